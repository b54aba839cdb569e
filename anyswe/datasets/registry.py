"""Benchmarks: the one registry of what a dataset name means (its rows, images and harness).

A benchmark is a :class:`Benchmark` subclass, registered like agents and providers: anyswe's own
in code (the SWE-bench family and R2E-Gym in :mod:`anyswe.datasets.hub`, the demo in
:mod:`anyswe.datasets.demo`), a plugin's through the ``anyswe.benchmarks`` entry point group, or
a dotted path ``module:Class`` as the dataset's name. A name matches in any case, with or without a
split suffix (``:test``, ``@test``, ``[test]``, ``/test``), and a benchmark's hub names and aliases
match too. Rows of a hub dataset come from a local file (``path:``) or the local Hugging Face
cache: nothing is downloaded at grading time.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from anyswe.errors import DatasetError
from anyswe.registry import Registry

if TYPE_CHECKING:
    from anyswe.datasets.instance import Instance

__all__ = ["BENCHMARKS", "Benchmark", "known_datasets", "refresh", "register_benchmark", "route", "split_name"]

_SPLITS = ("test", "dev", "train", "validation")
_SPLIT_SUFFIX = re.compile(r"(?:[:@/](?P<a>" + "|".join(_SPLITS) + r")|\[(?P<b>" + "|".join(_SPLITS) + r")\])$")


class Benchmark:
    """What a named dataset is: its names, the rows it carries (if any), how its task images are named
    or built, and the harness that grades it. One object per name and process (:func:`route`).

    A subclass sets the class attributes; one whose rows ship with it overrides :meth:`rows`, one that
    builds its own task images sets ``builds_images`` and overrides :meth:`build_context`.
    """

    #: The canonical name (what results, plans and reports say).
    name: ClassVar[str]
    #: Hugging Face hub names (the last one is where rows are read from the local cache).
    hub_names: ClassVar[tuple[str, ...]] = ()
    #: Other names that mean the same benchmark.
    aliases: ClassVar[tuple[str, ...]] = ()
    #: The harness (a registered name or ``module:Class``) that grades it; ``auto`` routes per instance.
    harness: ClassVar[str] = "auto"
    #: Docker image reference template (``{instance_id}``, ``{instance_id_docker}``, ``{repo}``, ...).
    image_template: ClassVar[str | None] = None
    default_split: ClassVar[str] = "test"
    #: Its task images are built locally by :meth:`build_context`, never pulled.
    builds_images: ClassVar[bool] = False
    #: What one instance image built offline (:meth:`build_instance`) takes on disk, for the estimate.
    instance_build_bytes: ClassVar[int] = 0

    @classmethod
    def names(cls) -> set[str]:
        return {n.lower() for n in (cls.name, *cls.hub_names, *cls.aliases)}

    def row(self, raw: dict[str, Any], source: Path | None, assets: Path | None) -> dict[str, Any]:
        """One row as read (from ``source``, a file, or the hub) in SWE-bench's schema, with what grading
        needs from the benchmark's ``assets`` directory (the dataset block's ``assets:``); as read, by default."""
        return raw

    def rows(self) -> list[dict[str, Any]] | None:
        """The rows this benchmark carries itself, in SWE-bench's schema; None: they come from a file
        (``path:``) or the hub."""
        return None

    def build_context(self, instance_id: str, base_image: str) -> tuple[Path, str]:
        """A docker build context of ``instance_id``'s task image on ``base_image``: (Dockerfile, tag).

        The tag must change whenever what is built would (a content hash), so a cached image is reused
        only when it is the same."""
        raise DatasetError(f"dataset {self.name!r} does not build its own images")

    def builds_offline(self) -> bool:
        """Whether :meth:`build_instance` makes this benchmark's official images here."""
        return type(self).build_instance is not Benchmark.build_instance

    def unbuildable(self, instance: Instance, repo_mirror: Path) -> tuple[str, str] | None:
        """Why :meth:`build_instance` cannot build ``instance``'s image here from ``repo_mirror``, found before
        any build (a dry run's answer): ``(kind of reason, message)``; None when the build can be tried."""
        return None

    async def build_instance(self, instance: Instance, repo_mirror: Path) -> str:
        """Build ``instance``'s official image offline (``anyswe prepare images --build``) as the
        benchmark's own recipe does, its repository cloned from ``repo_mirror`` (bare repositories);
        a one-line summary of what was built. An image already there (by its tag) is not built again."""
        raise DatasetError(f"dataset {self.name!r} cannot build its images offline (--build)")


BENCHMARKS: Registry[Benchmark] = Registry("dataset", Benchmark, group="anyswe.benchmarks", error=DatasetError)
BENCHMARKS.register("demo", "anyswe.datasets.demo:DemoBenchmark")
# The demo tasks shaped like SWE-bench images (/testbed, a conda `testbed` env), graded by swebench.
BENCHMARKS.register("demo-swebench", "anyswe.datasets.demo:DemoSwebenchBenchmark")
BENCHMARKS.register("swe-bench-verified", "anyswe.datasets.hub:SWEbenchVerified")
BENCHMARKS.register("swe-bench-lite", "anyswe.datasets.hub:SWEbenchLite")
BENCHMARKS.register("swe-bench", "anyswe.datasets.hub:SWEbenchFull")
BENCHMARKS.register("swe-bench-multilingual", "anyswe.datasets.multilingual:SWEbenchMultilingual")
BENCHMARKS.register("swe-bench-multimodal", "anyswe.datasets.hub:SWEbenchMultimodal")
BENCHMARKS.register("swe-bench-pro", "anyswe.datasets.pro:SWEbenchPro")
BENCHMARKS.register("r2e-gym", "anyswe.datasets.hub:R2EGym")


def register_benchmark(name: str, target: str | type[Benchmark]) -> None:
    """Make a benchmark known under ``name`` (a class, or ``"module:Class"`` imported on first use)."""
    BENCHMARKS.register(name, target)
    _get.cache_clear()


def refresh() -> None:
    """Find benchmarks installed since the first lookup (a plugin installed from a running notebook)."""
    BENCHMARKS.refresh()
    _get.cache_clear()


@cache
def _get(name: str) -> Benchmark:
    cls = BENCHMARKS.load(name)
    if ":" not in name and name.lower() not in cls.names():
        names = sorted(cls.names())
        raise DatasetError(f"dataset {name!r} is registered as {cls.__qualname__}, whose names are {names}")
    return cls()


def known_datasets() -> list[str]:
    return sorted(BENCHMARKS.names())


def split_name(name: str) -> tuple[str, str | None]:
    """``"SWE-bench/SWE-bench_Verified:test"`` -> ``("SWE-bench/SWE-bench_Verified", "test")``."""
    m = _SPLIT_SUFFIX.search(name)
    if m is None:
        return name, None
    return name[: m.start()], m.group("a") or m.group("b")


def route(name: str) -> Benchmark:
    """The benchmark ``name`` refers to, or a :class:`DatasetError` listing the known ones.

    Exact names are looked up first (loading one class); then every benchmark's hub names and aliases,
    anyswe's own before the plugins' (a plugin whose code fails to load breaks only the names it
    would have matched)."""
    base, _ = split_name(name.strip())
    if ":" in base:  # module:Class
        return _get(base)
    wanted = base.lower()
    builtin = BENCHMARKS.builtin_names()
    plugins = [n for n in BENCHMARKS.names() if n not in builtin]
    for registered in (*builtin, *plugins):
        if registered.lower() == wanted:
            return _get(registered)
    unloadable: list[str] = []
    for registered in (*builtin, *plugins):
        try:
            names = BENCHMARKS.load(registered).names()
        except DatasetError as exc:  # a broken plugin: the other names still route
            unloadable.append(str(exc))
            continue
        if wanted in names:
            return _get(registered)
    listing = "; ".join(_describe(n) for n in (*builtin, *plugins))
    broken = "".join(f"\n  {e}" for e in unloadable)
    raise DatasetError(
        f"unknown dataset {name!r}; known: {listing}; or give `path:` to a JSONL/JSON/parquet file{broken}"
    )


def _describe(registered: str) -> str:
    try:
        hub = ", ".join(BENCHMARKS.load(registered).hub_names)
    except DatasetError:  # a plugin that does not load is still listed, not a second error
        return f"{registered} (does not load)"
    return f"{registered} ({hub or 'built in'})"
