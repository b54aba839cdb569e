"""Import only the parts of swebench that grading needs (private to ``grading/swebench.py``).

``import swebench`` runs the package ``__init__``, which imports the whole harness: the docker SDK,
Modal, the collection tools, and through ``harness.utils`` the ``datasets`` library with pandas and
pyarrow, about 1700 modules and 3.5 s. Grading needs a dozen small modules of ``swebench.harness``.

So when swebench is not imported yet, ``swebench`` and ``swebench.harness`` are registered as real
package modules (spec, ``__path__``, ``__file__``, ``__version__``) whose ``__init__.py`` has not
run; it runs on the first access of a name they do not have yet (PEP 562 ``__getattr__``), so
``import swebench; swebench.run_evaluation`` elsewhere still behaves exactly as usual. While
``harness.utils`` is imported, ``datasets`` is a placeholder whose names import the real library
when first used. Anything unexpected undoes all of this and imports swebench the usual way.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import logging
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib.abc import Loader
from pathlib import Path
from types import ModuleType
from typing import Any

log = logging.getLogger(__name__)

# utils first: it is the one that imports ``datasets``, and the others import it.
GRADING_PARTS = (
    "swebench.harness.utils",
    "swebench.harness.constants",
    "swebench.harness.log_parsers",
    "swebench.harness.test_spec.test_spec",
    "swebench.harness.test_spec.create_scripts",
    "swebench.harness.grading",
)
_LOCK = threading.Lock()


def load() -> ModuleType:
    """The ``swebench`` package with :data:`GRADING_PARTS` imported; raises ImportError without swebench."""
    with _LOCK:
        if "swebench" not in sys.modules and importlib.util.find_spec("swebench") is not None:
            try:
                _load_lean()
            except Exception:
                # A layout this code does not know: forget the partial load, import the usual way.
                log.warning("swebench's grading parts could not be imported alone; importing all", exc_info=True)
                for name in [n for n in sys.modules if n == "swebench" or n.startswith("swebench.")]:
                    del sys.modules[name]
        for part in GRADING_PARTS:  # after a lean load: already there; otherwise the usual import
            importlib.import_module(part)
        return importlib.import_module("swebench")


def _load_lean() -> None:
    root = _deferred_package("swebench", version=True)
    root.before = _deferred_package("swebench.harness", version=False)
    with _placeholder_datasets():
        importlib.import_module(GRADING_PARTS[0])
    for part in GRADING_PARTS[1:]:
        importlib.import_module(part)


def _deferred_package(name: str, *, version: bool) -> _DeferredInit:
    """Register ``name`` as its package module with its ``__init__.py`` not run yet."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None or spec.origin is None or not spec.submodule_search_locations:
        raise ImportError(f"{name} is not a source package here")
    module = importlib.util.module_from_spec(spec)
    if version:
        module.__version__ = _literal_assignment(Path(spec.origin), "__version__")  # type: ignore[attr-defined]
    init = module.__dict__["__getattr__"] = _DeferredInit(module, spec.loader)
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)  # as the import system does for a submodule
    return init


class _DeferredInit:
    """A package's PEP 562 ``__getattr__``: run the real ``__init__.py`` once, then look the name up.

    ``before`` is a subpackage to initialise first: a plain ``import swebench`` has run
    ``swebench/harness/__init__.py`` by the time it returns, so the whole harness is imported then.
    """

    def __init__(self, module: ModuleType, loader: Loader) -> None:
        self.module, self.loader = module, loader
        self.before: _DeferredInit | None = None
        self.state = "pending"  # -> "running" -> "done"
        self.lock = threading.RLock()

    def run(self) -> None:
        with self.lock:
            if self.state != "pending":
                return
            self.state = "running"
            try:
                if self.before is not None:
                    self.before.run()
                self.loader.exec_module(self.module)
            except BaseException:
                self.state = "pending"  # as a failed import: the next access tries again
                raise
            self.state = "done"
            self.module.__dict__.pop("__getattr__", None)  # from now on an ordinary module

    def __call__(self, name: str) -> Any:
        self.run()  # while running, the init's own lookups (hasattr for submodules) land here: missing
        try:
            return self.module.__dict__[name]
        except KeyError:
            raise AttributeError(f"module {self.module.__name__!r} has no attribute {name!r}") from None


@contextmanager
def _placeholder_datasets() -> Iterator[None]:
    """``datasets`` as a placeholder while harness.utils runs ``from datasets import Dataset, ...``.

    utils calls ``load_dataset``/``load_from_disk`` only in ``load_swebench_dataset`` and uses
    ``Dataset`` only in ``cast()``; the forwarders import the real library on first use. The
    placeholder is gone from sys.modules afterwards, so any later ``import datasets`` is the real one.
    """
    if "datasets" in sys.modules:  # already paid for: utils gets the real names
        yield
        return
    placeholder = ModuleType("datasets", "Forwarders to the datasets library, imported on first use.")
    placeholder.Dataset = _ForwardingClass("Dataset", (), {})  # type: ignore[attr-defined]
    placeholder.load_dataset = _forwarding_function("load_dataset")  # type: ignore[attr-defined]
    placeholder.load_from_disk = _forwarding_function("load_from_disk")  # type: ignore[attr-defined]
    sys.modules["datasets"] = placeholder
    try:
        yield
    finally:
        if sys.modules.get("datasets") is placeholder:
            del sys.modules["datasets"]


def _real_datasets(name: str) -> Any:
    return getattr(importlib.import_module("datasets"), name)


def _forwarding_function(name: str) -> Callable[..., Any]:
    def forward(*args: Any, **kwargs: Any) -> Any:
        return _real_datasets(name)(*args, **kwargs)

    forward.__name__ = forward.__qualname__ = name
    forward.__doc__ = f"``datasets.{name}``, imported on first call."
    return forward


class _ForwardingClass(type):
    """A stand-in class whose calls, class attributes and isinstance checks go to ``datasets.<name>``."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        return _real_datasets(cls.__name__)(*args, **kwargs)

    def __getattr__(cls, name: str) -> Any:
        return getattr(_real_datasets(cls.__name__), name)

    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, _real_datasets(cls.__name__))

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, _real_datasets(cls.__name__))


def _literal_assignment(path: Path, name: str) -> Any:
    """The literal value of the module-level ``name = <literal>`` in ``path``, without running it."""
    for node in ast.parse(path.read_bytes(), str(path)).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            try:
                return ast.literal_eval(node.value)
            except ValueError:
                raise LookupError(f"{name} in {path} is not a literal") from None
    raise LookupError(f"{path} has no module-level literal {name}")


def git_apply_cmds() -> list[str]:
    """``swebench.harness.run_evaluation.GIT_APPLY_CMDS`` read from its source: that module imports docker.

    Call after :func:`load` (finding the module imports its parent packages).
    """
    spec = importlib.util.find_spec("swebench.harness.run_evaluation")
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        raise LookupError("swebench.harness.run_evaluation has no source file")
    value = _literal_assignment(Path(spec.origin), "GIT_APPLY_CMDS")
    if not (isinstance(value, list) and value and all(isinstance(v, str) for v in value)):
        raise LookupError(f"GIT_APPLY_CMDS in {spec.origin} is not a list of strings: {value!r}")
    return value
