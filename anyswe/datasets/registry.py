"""Known datasets, the names they go by, and the harness each is graded with.

A name matches in any case, with or without a split suffix (``:test``, ``@test``, ``[test]``,
``/test``); both the ``princeton-nlp/...`` and the ``SWE-bench/...`` hub names are known. Rows of
a hub dataset come from a local file (``path:``) or the local Hugging Face cache: nothing is
downloaded at grading time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from anyswe.errors import DatasetError

#: swebench's instance image naming; ``{instance_id_docker}`` is the id with "__" -> "_1776_", lowercased.
SWEBENCH_IMAGE = "swebench/sweb.eval.x86_64.{instance_id_docker}:latest"

_SPLITS = ("test", "dev", "train", "validation")
_SPLIT_SUFFIX = re.compile(r"(?:[:@/](?P<a>" + "|".join(_SPLITS) + r")|\[(?P<b>" + "|".join(_SPLITS) + r")\])$")


@dataclass(frozen=True)
class DatasetInfo:
    name: str
    harness: str
    hub_names: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    image_template: str | None = None
    default_split: str = "test"

    def names(self) -> set[str]:
        return {n.lower() for n in (self.name, *self.hub_names, *self.aliases)}


_KNOWN: list[DatasetInfo] = [
    DatasetInfo("demo", "pytest"),
    # The demo tasks shaped like SWE-bench images (/testbed, a conda `testbed` env), graded by swebench.
    DatasetInfo("demo-swebench", "swebench"),
    DatasetInfo(
        "swe-bench-verified",
        "swebench",
        ("princeton-nlp/SWE-bench_Verified", "SWE-bench/SWE-bench_Verified"),
        ("verified",),
        SWEBENCH_IMAGE,
    ),
    DatasetInfo(
        "swe-bench-lite",
        "swebench",
        ("princeton-nlp/SWE-bench_Lite", "SWE-bench/SWE-bench_Lite"),
        ("lite",),
        SWEBENCH_IMAGE,
    ),
    DatasetInfo("swe-bench", "swebench", ("princeton-nlp/SWE-bench", "SWE-bench/SWE-bench"), ("full",), SWEBENCH_IMAGE),
    DatasetInfo(
        "swe-bench-multilingual",
        "swebench",
        ("SWE-bench/SWE-bench_Multilingual",),
        ("multilingual",),
        SWEBENCH_IMAGE,
    ),
    DatasetInfo(
        "swe-bench-multimodal",
        "swebench",
        ("princeton-nlp/SWE-bench_Multimodal", "SWE-bench/SWE-bench_Multimodal"),
        ("multimodal",),
        SWEBENCH_IMAGE,
        default_split="dev",
    ),
    DatasetInfo(
        "r2e-gym",
        "r2e",
        ("R2E-Gym/R2E-Gym-Lite", "R2E-Gym/R2E-Gym-Subset", "R2E-Gym/R2E-Gym-V1"),
        ("r2e",),
        "{docker_image}",
        default_split="train",
    ),
]


def register_dataset(info: DatasetInfo) -> None:
    """Make a dataset name known (it then routes to ``info.harness``)."""
    _KNOWN.insert(0, info)


def known_datasets() -> list[str]:
    return sorted(i.name for i in _KNOWN)


def split_name(name: str) -> tuple[str, str | None]:
    """``"SWE-bench/SWE-bench_Verified:test"`` -> ``("SWE-bench/SWE-bench_Verified", "test")``."""
    m = _SPLIT_SUFFIX.search(name)
    if m is None:
        return name, None
    return name[: m.start()], m.group("a") or m.group("b")


def route(name: str) -> DatasetInfo:
    """The known dataset ``name`` refers to, or a :class:`DatasetError` listing the known ones."""
    base, _ = split_name(name.strip())
    wanted = base.lower()
    for info in _KNOWN:
        if wanted in info.names():
            return info
    listing = "; ".join(f"{i.name} ({', '.join(i.hub_names) or 'built in'})" for i in _KNOWN)
    raise DatasetError(f"unknown dataset {name!r}; known: {listing}; or give `path:` to a JSONL/JSON/parquet file")
