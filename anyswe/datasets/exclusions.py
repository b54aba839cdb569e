"""Exclusion lists: instances a run leaves out on every provider, each with the reason.

``anyswe gold-check`` writes one (YAML, the instances whose gold patch does not resolve on some
provider, with the failing tests); a spec names it with ``dataset.exclude_file`` and lists more ids
with ``dataset.exclude``. Excluding an instance everywhere keeps the backends comparable: an
instance broken on one backend must not count against it alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from anyswe._text import read_utf8
from anyswe.errors import DatasetError


class ExcludedInstance(BaseModel):
    model_config = ConfigDict(extra="forbid")

    instance_id: str = Field(min_length=1)
    reason: str = ""
    #: provider -> the tests that failed with the gold patch there (empty: it did not apply, say)
    failing: dict[str, list[str]] = Field(default_factory=dict)
    #: provider -> the gold census's bucket there (supported, flaky, broken, no-verdict)
    census: dict[str, str] = Field(default_factory=dict)


class ExclusionList(BaseModel):
    """The file format (``version: 1``)."""

    model_config = ConfigDict(extra="forbid")

    version: int = 1
    dataset: str = ""
    checked_on: list[str] = Field(default_factory=list, description="The providers the gold check ran on.")
    source: str = Field(default="", description="What wrote the list (a gold-check run directory).")
    passes: int = Field(default=1, ge=1, description="Gold and empty-patch passes per instance and provider.")
    exclude: list[ExcludedInstance] = Field(default_factory=list)

    def write(self, path: Path) -> None:
        from ruamel.yaml import YAML

        yaml = YAML()
        yaml.default_flow_style = False
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.part")
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write("# Instances left out of every provider's runs; reference with dataset.exclude_file.\n")
            yaml.dump(self.model_dump(mode="json"), fh)
        tmp.replace(path)


def read_exclusions(path: Path) -> ExclusionList:
    """An exclusion list file, with errors that name the file and the field."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    if not path.is_file():
        raise DatasetError(f"exclusion list not found: {path}")
    try:
        data: Any = YAML(typ="safe").load(read_utf8(path, DatasetError))
    except YAMLError as exc:
        raise DatasetError(f"{path}: not YAML: {exc}") from None
    try:
        return ExclusionList.model_validate(data or {})
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"]) or "(top level)"
        raise DatasetError(f"{path}: {where}: {err['msg']}") from None


@dataclass
class Exclusions:
    """The instances a spec excludes: id -> reason."""

    reasons: dict[str, str] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, ids: list[str], file: Path | None) -> Exclusions:
        out = cls()
        if file is not None:
            for entry in read_exclusions(file).exclude:
                out.reasons[entry.instance_id] = entry.reason or f"listed in {file.name}"
            out.files.append(str(file))
        for iid in ids:
            out.reasons.setdefault(iid, "dataset.exclude")
        return out

    def __contains__(self, instance_id: object) -> bool:
        return instance_id in self.reasons

    def __bool__(self) -> bool:
        return bool(self.reasons)
