"""Datasets: loading instance rows, filtering them, and knowing how their images are made.

A dataset is named (``demo``, later the SWE-bench family) or a local JSONL/JSON/parquet file of
rows in SWE-bench's schema. Each dataset names the grading harness its instances are routed to.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from anyswe.datasets.instance import AgentView, Instance
from anyswe.errors import DatasetError

__all__ = ["AgentView", "Dataset", "Instance", "filter_instances", "known_datasets", "load_dataset", "read_rows"]


@dataclass
class Dataset:
    """Rows plus what is needed to run them: the harness name and how task images are named or built."""

    name: str
    instances: list[Instance]
    harness: str = "pytest"
    #: docker image reference template; ``{instance_id}``, ``{instance_id_docker}``, ``{repo}`` fill in
    image_template: str | None = None
    builds_images: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def by_id(self) -> dict[str, Instance]:
        return {i.instance_id: i for i in self.instances}

    def docker_image(self, instance: Instance, template: str | None = None) -> str:
        tpl = template or self.image_template
        if tpl is None:
            raise DatasetError(
                f"dataset {self.name!r} has no image for {instance.instance_id}: set the provider's `image` template"
            )
        return format_image(tpl, instance)


def format_image(template: str, instance: Instance) -> str:
    try:
        return template.format(
            instance_id=instance.instance_id,
            instance_id_docker=instance.instance_id.replace("__", "_1776_").lower(),
            repo=instance.repo,
            version=instance.version,
        )
    except (KeyError, IndexError) as exc:
        raise DatasetError(f"image template {template!r} has an unknown field {exc}") from None


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Rows of a JSONL, JSON (a list) or parquet file; errors name the file and line."""
    if not path.is_file():
        raise DatasetError(f"dataset file not found: {path}")
    if path.suffix == ".parquet":
        import polars as pl

        return pl.read_parquet(path).to_dicts()
    text = path.read_text()
    if path.suffix == ".json":
        data = json.loads(text)
        if not isinstance(data, list):
            raise DatasetError(f"{path}: expected a JSON list of rows")
        return data
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{path}:{n}: not valid JSON: {exc.msg}") from None
    return rows


def _validate(rows: Sequence[dict[str, Any]], source: str) -> list[Instance]:
    out = []
    seen: set[str] = set()
    for n, row in enumerate(rows, 1):
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


def known_datasets() -> list[str]:
    return ["demo"]


def load_dataset(name: str | None = None, path: str | Path | None = None, *, harness: str | None = None) -> Dataset:
    """Load a named dataset or a local file (``harness`` defaults to the generic pytest one)."""
    if path is not None:
        p = Path(path)
        return Dataset(name=name or p.stem, instances=_validate(read_rows(p), str(p)), harness=harness or "pytest")
    if name is None:
        raise DatasetError("a dataset needs a name or a path")
    if name.lower() == "demo":
        from anyswe.datasets import demo

        return Dataset(name="demo", instances=demo.load(), harness=harness or "pytest", builds_images=True)
    raise DatasetError(
        f"unknown dataset {name!r}; known: {', '.join(known_datasets())} (or give `path:` to a JSONL/parquet file)"
    )


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
