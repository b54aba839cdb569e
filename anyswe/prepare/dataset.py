"""``anyswe prepare dataset``: a SWE-bench-family dataset, validated row by row, written as a file.

The rows come from a local JSONL/JSON/parquet file, or by hub name through the ``datasets`` library
(online when the hub answers, else from the local Hugging Face cache). Every row is checked, and
every bad one is reported (which row, which instance, which field, why) before anything is written;
the selection is written in the rows' own field order, so a spec can name the file with ``path:``.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from anyswe._text import escape_surrogates
from anyswe.datasets import Instance, filter_instances, format_image, read_rows
from anyswe.datasets.hub import SWEBENCH_IMAGE
from anyswe.datasets.registry import Benchmark, route, split_name
from anyswe.errors import DatasetError

#: Bad rows listed in an error; the count of the rest follows.
MAX_LISTED = 25


@dataclass
class PreparedDataset:
    """The selected rows, their instances and the image each runs in."""

    source: str
    rows: list[dict[str, Any]]
    instances: list[Instance]
    images: dict[str, str] = field(default_factory=dict)
    validated: int = 0

    def by_repo(self) -> dict[str, int]:
        return dict(sorted(Counter(i.repo for i in self.instances).items()))

    def write(self, path: Path) -> None:
        """The selected rows as JSONL, atomically (a half-written file never replaces a good one)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                for row in self.rows:
                    # A lone surrogate (a row's JSON can say one) as its escape: UTF-8 cannot hold it.
                    fh.write(escape_surrogates(json.dumps(row, ensure_ascii=False, default=str)) + "\n")
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 is for the scratch file, not the dataset
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def _swebench_specs() -> dict[str, dict[str, Any]] | None:
    """swebench's repo -> version -> install spec table, or None when swebench cannot be used."""
    try:
        from anyswe.grading import swebench as sb

        return sb.repo_version_specs()
    except Exception:
        return None


def specs_known(instances: Sequence[Instance]) -> bool:
    """Whether every instance is of a repo and version swebench has a spec for (a SWE-bench row)."""
    specs = _swebench_specs()
    return specs is not None and all(i.version in specs.get(i.repo, {}) for i in instances)


def row_problems(row: Any, n: int, *, swebench_specs: dict[str, dict[str, Any]] | None) -> list[str]:
    """Everything wrong with row ``n`` (1-based), each as ``row N (id): field F: why``."""
    if not isinstance(row, dict):
        return [f"row {n}: expected an object of fields, found a {type(row).__name__}"]
    label = f"row {n} ({row.get('instance_id')})" if row.get("instance_id") else f"row {n}"
    try:
        inst = Instance.model_validate(row)
    except ValidationError as exc:
        return [
            f"{label}: field {'.'.join(str(x) for x in err['loc']) or '(row)'!r}: {err['msg']}" for err in exc.errors()
        ]
    except json.JSONDecodeError as exc:  # a FAIL_TO_PASS string that is not JSON
        return [f"{label}: a test list is not a JSON list: {exc}"]
    problems = []
    if swebench_specs is not None and inst.repo in swebench_specs and inst.version not in swebench_specs[inst.repo]:
        known = ", ".join(sorted(swebench_specs[inst.repo])[:12])
        problems.append(
            f"{label}: field 'version': {inst.version!r} has no swebench spec for {inst.repo} (known: {known}, ...); "
            "its eval script cannot be made"
        )
    if not inst.FAIL_TO_PASS and swebench_specs is not None and inst.repo in swebench_specs:
        problems.append(f"{label}: field 'FAIL_TO_PASS': empty: no test tells a fix from no fix")
    return problems


def validate_rows(rows: Sequence[Any], source: str, *, swebench: bool = True) -> list[Instance]:
    """Every row as an :class:`Instance`, or one :class:`DatasetError` listing every bad row."""
    specs = _swebench_specs() if swebench else None
    problems: list[str] = []
    instances: list[Instance] = []
    seen: dict[str, int] = {}
    for n, row in enumerate(rows, 1):
        found = row_problems(row, n, swebench_specs=specs)
        if not found:
            inst = Instance.model_validate(row)
            if inst.instance_id in seen:
                found = [f"row {n} ({inst.instance_id}): duplicate instance_id (first at row {seen[inst.instance_id]})"]
            else:
                seen[inst.instance_id] = n
                instances.append(inst)
        problems += found
    if problems:
        listed = "\n  ".join(problems[:MAX_LISTED])
        more = f"\n  ... and {len(problems) - MAX_LISTED} more" if len(problems) > MAX_LISTED else ""
        bad = len({p.split(":")[0] for p in problems})
        raise DatasetError(f"{source}: {bad} of {len(rows)} rows are not valid instances:\n  {listed}{more}")
    return instances


def _hub_rows_online(hub_name: str, split: str) -> list[dict[str, Any]]:
    """Rows through the ``datasets`` library: the hub when it answers, the local cache otherwise."""
    try:
        import datasets as hf
    except ImportError:
        raise DatasetError(
            "loading a dataset by hub name needs the `datasets` library; or give a local file of rows"
        ) from None
    try:
        return [dict(r) for r in hf.load_dataset(hub_name, split=split)]
    except Exception as online:
        from anyswe.datasets import hub_rows

        try:
            return hub_rows(hub_name, split)
        except DatasetError:
            raise DatasetError(
                f"dataset {hub_name!r} (split {split!r}): the hub did not answer ({type(online).__name__}: "
                f"{str(online)[:200]}) and it is not in the local Hugging Face cache; give a local file of rows"
            ) from None


def prepare_dataset(
    source: str,
    *,
    split: str | None = None,
    instance_ids: Sequence[str] | None = None,
    repos: Sequence[str] | None = None,
    limit: int | None = None,
    seed: int | None = None,
    image_template: str | None = None,
) -> PreparedDataset:
    """Load ``source`` (a file, a known name or a hub name), validate every row, select, name images."""
    path = Path(source)
    info: Benchmark | None = None
    if path.is_file():
        rows = read_rows(path)
        label = str(path)
    else:
        try:
            info = route(source)
        except DatasetError:
            if path.suffix in (".jsonl", ".json", ".parquet"):  # meant as a file, not a name
                raise DatasetError(f"dataset file not found: {source}") from None
            raise
        own = info.rows()
        if own is not None:
            rows = own
        elif info.hub_names:
            base, suffix_split = split_name(source)
            hub = base if "/" in base else info.hub_names[-1]
            rows = _hub_rows_online(hub, split or suffix_split or info.default_split)
        else:
            raise DatasetError(f"dataset {info.name!r} has no hub name: give a file of its rows")
        label = info.name
    harness = info.harness if info else "auto"
    instances = validate_rows(rows, label, swebench=harness in ("swebench", "auto"))
    selected = filter_instances(instances, instance_ids=instance_ids, repos=repos, limit=limit, seed=seed)
    if not selected:
        raise DatasetError(f"{label}: no rows left after filtering")
    by_id = {str(r["instance_id"]): r for r in rows if isinstance(r, dict)}
    template = image_template or (info.image_template if info else None)
    if template is None and specs_known(selected):
        template = SWEBENCH_IMAGE  # rows of SWE-bench's own repos run in its official images
    images = {i.instance_id: format_image(template, i) for i in selected} if template else {}
    return PreparedDataset(
        source=label,
        rows=[by_id[i.instance_id] for i in selected],
        instances=selected,
        images=images,
        validated=len(instances),
    )


__all__ = ["PreparedDataset", "prepare_dataset", "row_problems", "validate_rows"]
