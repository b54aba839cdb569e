"""One registry helper for every pluggable kind: agents, sandbox providers, grading harnesses.

A kind maps short names to ``"module:Class"`` targets that are imported on first use (so
``import anyswe`` stays cheap), and any ``"module:Class"`` (or ``"module.Class"``) given where a
short name is expected works too: users plug their own class into a spec without editing anyswe.
"""

from __future__ import annotations

import importlib
from typing import Any, Generic, TypeVar

from anyswe.errors import AnysweError, SpecError

T = TypeVar("T")


class Registry(Generic[T]):
    """Short name -> class, loaded lazily; dotted paths resolve without registration.

    Example::

        PROVIDERS: Registry[SandboxProvider] = Registry("sandbox provider", SandboxProvider)
        PROVIDERS.register("docker", "anyswe.sandbox.docker:DockerProvider")
        PROVIDERS.load("docker")                      # the class
        PROVIDERS.load("mypkg.sandboxes:MyProvider")  # any class of the right base, unregistered
    """

    def __init__(self, kind: str, base: type[Any], *, error: type[AnysweError] = SpecError) -> None:
        self.kind = kind
        self.base = base
        self.error = error
        self._targets: dict[str, str | type[T]] = {}

    def register(self, name: str, target: str | type[T]) -> None:
        """Register ``target`` (a class, or ``"module:Class"`` imported on first use) as ``name``."""
        self._targets[name] = target

    def names(self) -> list[str]:
        """Registered short names, in registration order."""
        return list(self._targets)

    def __contains__(self, name: object) -> bool:
        return name in self._targets

    def load(self, name: str) -> type[T]:
        """The class registered as ``name``, or the class a dotted path ``module:Class`` names."""
        target = self._targets.get(name)
        if target is None:
            if ":" not in name and "." not in name:
                known = ", ".join(self.names()) or "none"
                raise self.error(f"unknown {self.kind} {name!r}; known: {known}; or give a dotted path module:Class")
            target = name
        cls = _import(target, self.kind, self.error) if isinstance(target, str) else target
        if not (isinstance(cls, type) and issubclass(cls, self.base)):
            # What was found is named by its type, never shown: a path like `os:environ` must not
            # put the object's value (a whole environment) into an error a user or client reads.
            found_what = f"class {cls.__qualname__}" if isinstance(cls, type) else f"a {type(cls).__name__}"
            raise self.error(f"{self.kind} {name!r} is {found_what}, not a subclass of {self.base.__name__}")
        found: type[T] = cls
        return found


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
