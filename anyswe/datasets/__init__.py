"""Datasets: loading instance rows, filtering them, and knowing how their images are made.

A dataset is a named benchmark (:mod:`anyswe.datasets.registry`: the demo, the SWE-bench family,
R2E-Gym, a plugin's) or a local JSONL/JSON/parquet file of rows in SWE-bench's schema. The
benchmark names the grading harness its instances are routed to and how their images are made.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from anyswe._text import json_rows
from anyswe.datasets.instance import AgentView, Instance
from anyswe.datasets.registry import Benchmark, known_datasets, route, split_name
from anyswe.errors import DatasetError

__all__ = [
    "AgentView",
    "Benchmark",
    "Dataset",
    "Instance",
    "dataset_of",
    "filter_instances",
    "format_image",
    "image_builder",
    "image_fields",
    "known_datasets",
    "load_dataset",
    "read_rows",
    "route",
]


@dataclass
class Dataset:
    """Rows plus what is needed to run them: the harness name and how task images are named or built."""

    name: str
    instances: list[Instance]
    harness: str = "pytest"
    #: docker image reference template; ``{instance_id}``, ``{instance_id_docker}``, ``{repo}`` fill in
    image_template: str | None = None
    #: (instance_id, base_image) -> (Dockerfile, tag), for datasets that build their own task images
    build_context: Callable[[str, str], tuple[Path, str]] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def builds_images(self) -> bool:
        return self.build_context is not None

    def by_id(self) -> dict[str, Instance]:
        return {i.instance_id: i for i in self.instances}

    def docker_image(self, instance: Instance, template: str | None = None) -> str:
        tpl = template or self.image_template
        if tpl is None:
            raise DatasetError(
                f"dataset {self.name!r} has no image for {instance.instance_id}: set the provider's `image` template"
            )
        return format_image(tpl, instance)


def image_fields(instance: Instance) -> dict[str, str]:
    """The fields an image template may use: {instance_id}, {instance_id_docker}, {docker_image}, {repo}, {version}."""
    return {
        "instance_id": instance.instance_id,
        "instance_id_docker": instance.instance_id.replace("__", "_1776_").lower(),
        "docker_image": str((instance.model_extra or {}).get("docker_image", "")),
        "repo": instance.repo,
        "version": instance.version,
    }


def format_image(template: str, instance: Instance) -> str:
    try:
        return template.format(**image_fields(instance))
    except (KeyError, IndexError) as exc:
        raise DatasetError(f"image template {template!r} has an unknown field {exc}") from None


def image_builder(name: str) -> Callable[[str, str], tuple[Path, str]]:
    """The local image build of a dataset that builds its own: (instance_id, base image) -> (Dockerfile, tag)."""
    bench = route(name)
    if not bench.builds_images:
        raise DatasetError(f"dataset {name!r} does not build its own images")
    return bench.build_context


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Rows of a JSONL, JSON (a list) or parquet file; errors name the file and line."""
    if not path.is_file():
        raise DatasetError(f"dataset file not found: {path}")
    if path.suffix == ".parquet":
        import polars as pl

        try:
            return pl.read_parquet(path).to_dicts()
        except Exception as exc:  # polars raises its own types for a truncated or foreign file
            raise DatasetError(f"{path}: not a readable parquet file: {exc}") from None
    return json_rows(path, DatasetError)


def _from_r2e(row: dict[str, Any]) -> dict[str, Any]:
    """An R2E-Gym row in SWE-bench's field names (its tests live in its image, its verdict in the row)."""
    image = str(row.get("docker_image") or row.get("image_name") or "")
    return {
        "instance_id": row.get("instance_id") or image.rsplit("/", 1)[-1].replace(":", "__"),
        "repo": row.get("repo_name") or row.get("repo") or "",
        "base_commit": row.get("commit_hash") or row.get("base_commit") or "HEAD",
        "problem_statement": row.get("problem_statement", ""),
        "test_patch": "",
        "FAIL_TO_PASS": [],
        **{k: v for k, v in row.items() if k not in ("instance_id", "repo", "base_commit", "problem_statement")},
    }


def _validate(
    rows: Sequence[dict[str, Any]], source: str, shape: Callable[[dict[str, Any]], dict[str, Any]] | None = None
) -> list[Instance]:
    out = []
    seen: set[str] = set()
    for n, row in enumerate(rows, 1):
        if not isinstance(row, dict):
            raise DatasetError(f"{source}: row {n}: expected an object of fields, found a {type(row).__name__}")
        if shape is not None:
            try:
                row = shape(row)
            except DatasetError as exc:
                raise DatasetError(f"{source}: row {n}: {exc}") from None
        if "expected_output_json" in row and "FAIL_TO_PASS" not in row:
            row = _from_r2e(row)
        try:
            inst = Instance.model_validate(row)
        except ValidationError as exc:
            first = exc.errors()[0]
            field_name = ".".join(str(x) for x in first["loc"])
            raise DatasetError(f"{source}: row {n}: field {field_name!r}: {first['msg']}") from None
        if inst.instance_id in seen:
            raise DatasetError(f"{source}: row {n}: duplicate instance_id {inst.instance_id!r}")
        seen.add(inst.instance_id)
        out.append(inst)
    return out


def hub_rows(hub_name: str, split: str) -> list[dict[str, Any]]:
    """Rows from the local Hugging Face cache; never a download."""
    try:
        import datasets as hf
        import huggingface_hub.constants

        # Offline for real: the flags are read at import time, and swebench may have imported both.
        hf.config.HF_DATASETS_OFFLINE = True
        huggingface_hub.constants.HF_HUB_OFFLINE = True

        return [dict(r) for r in hf.load_dataset(hub_name, split=split)]
    except Exception as exc:
        raise DatasetError(
            f"dataset {hub_name!r} (split {split!r}) is not in the local Hugging Face cache and anyswe does not "
            f"download at run time; give the rows as a file with `path:` ({type(exc).__name__})"
        ) from None


def load_dataset(
    name: str | None = None,
    path: str | Path | None = None,
    *,
    harness: str | None = None,
    split: str | None = None,
    assets: str | Path | None = None,
) -> Dataset:
    """Load a named dataset (rows from ``path`` or the local cache) or a local file of rows.

    ``assets``: the benchmark's own directory of per-instance files its rows need (SWE-bench Pro's run
    scripts, parsers and Dockerfiles), read as the rows are (:meth:`Benchmark.row`).

    The harness is, in order: ``harness`` if given, the named dataset's own, or chosen per instance
    (``auto``: R2E-Gym rows, repos swebench knows, otherwise the generic pytest harness).
    """
    bench = route(name) if name is not None else None
    given = Path(assets) if assets is not None else None
    if path is not None:
        p = Path(path)
        shape = functools.partial(bench.row, source=p, assets=given) if bench is not None else None
        # `path:` beside a benchmark's name: its images and harness with rows edited in a file (what
        # `anyswe prepare dataset` writes), e.g. a gold patch broken on purpose, or a hub benchmark's rows.
        instances = _validate(read_rows(p), str(p), shape)
    elif bench is None:
        raise DatasetError("a dataset needs a name or a path")
    elif (own := bench.rows()) is not None:
        instances = _validate(own, bench.name)
    elif bench.hub_names:
        _, suffix_split = split_name(name or "")
        rows = hub_rows(bench.hub_names[-1], split or suffix_split or bench.default_split)
        instances = _validate(rows, bench.name, functools.partial(bench.row, source=None, assets=given))
    else:
        raise DatasetError(f"dataset {bench.name!r} needs `path:` to its rows")
    if bench is None:
        return Dataset(name=Path(path or "").stem, instances=instances, harness=harness or "auto")
    return _of(bench, instances, harness)


def _of(bench: Benchmark, instances: list[Instance], harness: str | None) -> Dataset:
    return Dataset(
        name=bench.name,
        instances=instances,
        harness=harness or bench.harness,
        image_template=bench.image_template,
        build_context=bench.build_context if bench.builds_images else None,
    )


def dataset_of(rows: Sequence[Instance], name: str, *, harness: str | None = None) -> Dataset:
    """A dataset of just ``rows``, graded and imaged as the known dataset ``name`` is (its rows are not
    loaded: a rollout or a grading of one row needs no copy of Verified)."""
    return _of(route(name), list(rows), harness)


def filter_instances(
    instances: Sequence[Instance],
    *,
    instance_ids: Sequence[str] | None = None,
    repos: Sequence[str] | None = None,
    limit: int | None = None,
    seed: int | None = None,
) -> list[Instance]:
    """Select by id and repo, then shuffle with ``seed`` (if any) and keep ``limit``."""
    out = list(instances)
    if instance_ids:
        known = {i.instance_id for i in out}
        missing = [i for i in instance_ids if i not in known]
        if missing:
            raise DatasetError(f"instance ids not in the dataset: {', '.join(missing)}")
        wanted = set(instance_ids)
        out = [i for i in out if i.instance_id in wanted]
    if repos:
        wanted_repos = set(repos)
        out = [i for i in out if i.repo in wanted_repos]
    if seed is not None:
        random.Random(seed).shuffle(out)
    if limit is not None:
        out = out[:limit]
    return out
