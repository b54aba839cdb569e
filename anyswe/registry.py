"""One registry helper for every pluggable kind: agents, sandbox providers, grading harnesses, benchmarks.

A kind maps short names to ``"module:Class"`` targets that are imported on first use (so
``import anyswe`` stays cheap). A name is found, in order: among anyswe's own (registered in
code), among the entry points of the kind's group that installed packages declare (``anyswe.agents``,
``anyswe.providers``, ``anyswe.harnesses``, ``anyswe.benchmarks``: a plugin package adds a kind
without editing anyswe, docs/extending.md), or as a dotted path ``"module:Class"`` given where a
short name is expected. A plugin cannot take the name of one of anyswe's own: the built-in wins,
so a spec's ``gold`` means the same on every machine.
"""

from __future__ import annotations

import importlib
from functools import cached_property
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from anyswe.errors import AnysweError, SpecError

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

T = TypeVar("T")


class Registry(Generic[T]):
    """Short name -> class, loaded lazily; dotted paths resolve without registration.

    Example::

        PROVIDERS: Registry[SandboxProvider] = Registry("sandbox provider", SandboxProvider)
        PROVIDERS.register("docker", "anyswe.sandbox.docker:DockerProvider")
        PROVIDERS.load("docker")                      # the class
        PROVIDERS.load("mypkg.sandboxes:MyProvider")  # any class of the right base, unregistered
    """

    def __init__(
        self, kind: str, base: type[Any], *, group: str | None = None, error: type[AnysweError] = SpecError
    ) -> None:
        self.kind = kind
        self.base = base
        #: The entry point group installed packages add to (None: code registrations only).
        self.group = group
        self.error = error
        self._targets: dict[str, str | type[T]] = {}
        #: Bumped by every change of what the names resolve to: a cache of what was loaded keys on it.
        self.generation = 0

    def register(self, name: str, target: str | type[T]) -> None:
        """Register ``target`` (a class, or ``"module:Class"`` imported on first use) as ``name``."""
        self._targets[name] = target
        self.generation += 1

    @cached_property
    def _plugins(self) -> dict[str, EntryPoint]:
        """The group's entry points by name (read once per process, on the first name not registered in
        code: scanning every installed package's metadata costs tens of milliseconds)."""
        if self.group is None:
            return {}
        from importlib.metadata import entry_points

        return {ep.name: ep for ep in entry_points(group=self.group) if ep.name not in self._targets}

    def refresh(self) -> None:
        """Read the entry points again on next use (after a package was installed into this process's path)."""
        self.__dict__.pop("_plugins", None)
        self.generation += 1

    def builtin_names(self) -> list[str]:
        """The names registered in code, in registration order (no package metadata is read)."""
        return list(self._targets)

    def names(self) -> list[str]:
        """Every short name: those registered in code, in registration order, then the plugins' entry points."""
        return [*self._targets, *sorted(n for n in self._plugins if n not in self._targets)]

    def __contains__(self, name: object) -> bool:
        return name in self._targets or (isinstance(name, str) and name in self._plugins)

    def load(self, name: str) -> type[T]:
        """The class registered as ``name`` (in code or by an entry point), or the one a dotted path names."""
        target: str | type[T] | None = self._targets.get(name)
        cls: object
        if target is None and name in self._plugins:
            cls = self._load_entry_point(self._plugins[name])
        else:
            if target is None:
                if ":" not in name and "." not in name:
                    known = ", ".join(self.names()) or "none"
                    raise self.error(
                        f"unknown {self.kind} {name!r}; known: {known}; or give a dotted path module:Class"
                    )
                target = name
            cls = _import(target, self.kind, self.error) if isinstance(target, str) else target
        if not (isinstance(cls, type) and issubclass(cls, self.base)):
            # What was found is named by its type, never shown: a path like `os:environ` must not
            # put the object's value (a whole environment) into an error a user or client reads.
            found_what = f"class {cls.__qualname__}" if isinstance(cls, type) else f"a {type(cls).__name__}"
            raise self.error(f"{self.kind} {name!r} is {found_what}, not a subclass of {self.base.__name__}")
        found: type[T] = cls
        return found

    def _load_entry_point(self, ep: EntryPoint) -> object:
        where = f"{self.kind} {ep.name!r} (entry point {ep.value!r} in group {self.group!r}"
        if ep.dist is not None:
            where += f" of {ep.dist.name} {ep.dist.version}"
        try:
            return ep.load()
        except Exception as exc:  # ImportError, AttributeError, or the plugin's own code failing on import
            raise self.error(f"{where}): cannot load: {type(exc).__name__}: {exc}") from None


def _import(target: str, kind: str, error: type[AnysweError]) -> object:
    module, sep, attr = target.partition(":")
    if not sep:
        module, _, attr = target.rpartition(".")
    if not module or not attr:
        raise error(f"{kind} {target!r}: expected module:Class")
    if not all(part.isidentifier() for part in (*module.split("."), attr)):
        # `.x:Y` (relative: there is no package to be relative to), `a..b:C`, `a:B C`
        raise error(f"{kind} {target!r}: expected module:Class, with an absolute dotted module path")
    try:
        mod = importlib.import_module(module)
    except Exception as exc:  # ImportError, or the module's own code failing as it is imported
        raise error(f"{kind} {target!r}: cannot import {module!r}: {type(exc).__name__}: {exc}") from None
    try:
        return getattr(mod, attr)
    except AttributeError:
        raise error(f"{kind} {target!r}: module {module!r} has no {attr!r}") from None
