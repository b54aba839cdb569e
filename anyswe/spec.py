"""Experiment specs: pydantic models of the YAML file, loaded with ruamel.yaml so errors point at lines.

Every error names the file, line, column and field (``specs/x.yaml:12:5: agents.gold.typo: ...``);
``--set a.b=c`` overrides any field before validation, and an error in an override names it.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Hashable, Iterator
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from anyswe._overrides import apply_override, as_typed, locate, parse_override
from anyswe._proc import MAX_OUTPUT_BYTES, MAX_PATCH_BYTES
from anyswe._yaml import read_yaml
from anyswe.agents import AgentConfig, agent_class
from anyswe.errors import AnysweError, SpecError
from anyswe.execute.runner import known_executor
from anyswe.model import ModelSpec
from anyswe.results.schema import TamperPolicy
from anyswe.sandbox import ProviderConfig, provider_class

__all__ = ["DatasetSpec", "GradingSpec", "MatrixRule", "MatrixSpec", "ModelSpec", "Spec", "TimeoutSpec", "load_spec"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DatasetSpec(_Strict):
    """Which instances to run."""

    name: str | None = Field(default=None, description="A known dataset name, e.g. 'demo'.")
    path: Path | None = Field(default=None, description="A JSONL/JSON/parquet file of rows (relative to the spec).")
    split: str = "test"
    instance_ids: list[str] | None = None
    repos: list[str] | None = None
    limit: int | None = Field(default=None, ge=1)
    seed: int | None = None
    exclude: list[str] = Field(default_factory=list, description="Instance ids never run (on every provider).")
    exclude_file: Path | None = Field(
        default=None,
        description="An exclusion list written by `anyswe gold-check` (relative to the spec); its instances "
        "are never run, on every provider, and are listed in the plan, the tables and the report.",
    )
    assets: Path | None = Field(
        default=None, description="The benchmark's own assets directory (SWE-bench Pro's; relative to the spec)."
    )

    def relative_to(self, base: Path) -> DatasetSpec:
        """The block with its relative paths (to the spec file) made absolute."""
        paths = {k: getattr(self, k) for k in ("path", "exclude_file", "assets")}
        return self.model_copy(update={k: base / v for k, v in paths.items() if v is not None and not v.is_absolute()})

    @model_validator(mode="after")
    def _name_or_path(self) -> DatasetSpec:
        if self.name is None and self.path is None:
            raise ValueError("give the dataset a `name` or a `path`")
        return self


class MatrixRule(_Strict):
    agent: str | None = None
    model: str | None = None
    provider: str | None = None


class MatrixSpec(_Strict):
    """Which agent x model x provider cells to run; each list defaults to everything declared."""

    agents: list[str] | None = Field(default=None, min_length=1)
    models: list[str] | None = Field(default=None, min_length=1)
    providers: list[str] | None = Field(default=None, min_length=1)
    include: list[MatrixRule] = Field(default_factory=list, description="Extra cells beyond the product.")
    exclude: list[MatrixRule] = Field(default_factory=list, description="Cells to drop (all given fields match).")


class TimeoutSpec(_Strict):
    agent: float = Field(default=1800, gt=0, description="Seconds an agent may work on one task.")
    grading: float = Field(default=1800, gt=0, description="Seconds the eval script may run.")
    sandbox_start: float = Field(default=300, gt=0)


class LimitSpec(_Strict):
    """What one task may cost the host (issue 21): past a cap it is the agent's failure, not the host's."""

    # At most the output cap: capture comes through one command, whose output past it comes back cut.
    max_patch_bytes: int = Field(default=MAX_PATCH_BYTES, ge=1, le=MAX_OUTPUT_BYTES, description="Patch cap (bytes).")


class RetrySpec(_Strict):
    """How a task that hit an infrastructure error (a dead sandbox, a runtime error) is run again."""

    max_attempts: int = Field(
        default=3, ge=1, description="Attempts per task and apply; a later apply tries the still-failed ones again."
    )
    backoff: float = Field(default=10.0, ge=0, description="Seconds before the second attempt, doubling after.")


class ExecutorSpec(_Strict):
    """Where tasks run: here (local), over a Ray cluster (ray), or a plugin's executor (anyswe.executors)."""

    type: Annotated[str, AfterValidator(known_executor)] = "local"
    address: str | None = Field(
        default=None,
        description="Ray: the cluster to join (host:port, or 'auto' for the one on this machine); "
        "none starts a Ray instance on this machine.",
    )
    gateway_host: str | None = Field(
        default=None,
        description="Ray, model cells: this machine's address as the nodes reach it (no port), where the "
        "model gateway listens too; default: loopback if every node is this machine, else its Ray address.",
    )
    gateway_port: int = Field(default=0, ge=0, le=65535, description="Ray, model cells: the gateway's port (0: any).")

    @field_validator("gateway_host")
    @classmethod
    def _concrete_host(cls, value: str | None) -> str | None:
        host = None if value is None else value.strip().strip("[]")
        if host is not None and (host.count(":") == 1 or "]" in host):  # IPv6 has two colons or more
            raise ValueError("must be an address or host name without a port (the port: gateway_port)")
        if host in ("", "0.0.0.0", "::"):
            raise ValueError("must be an address the nodes can connect to, not a wildcard")
        return host


class GradingSpec(_Strict):
    harness: str | None = Field(default=None, description="The harness (the dataset's; a name, module:Class, auto).")
    tampered: TamperPolicy = Field(default="zero", description="A tampered sample's reward: zero, mask or count.")

    @field_validator("harness")
    @classmethod
    def _loadable(cls, value: str | None) -> str | None:
        from anyswe.grading import HARNESSES

        if value is not None and value != "auto" and value not in HARNESSES:
            try:
                HARNESSES.load(value)  # a dotted path: it must name a Harness class
            except AnysweError as exc:
                raise ValueError(str(exc)) from None
        return value


class Spec(_Strict):
    """An experiment: a matrix of agents x models x providers over a dataset."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    description: str = ""
    dataset: DatasetSpec
    agents: dict[str, AgentConfig] = Field(min_length=1)
    models: dict[str, ModelSpec] = Field(default_factory=dict)
    providers: dict[str, ProviderConfig] = Field(min_length=1)
    matrix: MatrixSpec = Field(default_factory=MatrixSpec)
    samples: int = Field(default=1, ge=1, description="Samples per instance and cell.")
    timeouts: TimeoutSpec = Field(default_factory=TimeoutSpec)
    grading: GradingSpec = Field(default_factory=GradingSpec)
    retries: RetrySpec = Field(default_factory=RetrySpec)
    limits: LimitSpec = Field(default_factory=LimitSpec)
    concurrency: int = Field(default=4, ge=1, description="Tasks in flight at once (local executor).")
    executor: ExecutorSpec = Field(default_factory=ExecutorSpec)
    output_dir: Path | None = Field(default=None, description="Run directory; default runs/<name>.")

    @model_validator(mode="after")
    def _matrix_declared(self) -> Spec:
        problems = [
            _undeclared(field_name, name, getattr(self, field_name))
            for field_name, _, name in _matrix_names(self.matrix.model_dump())
            if name not in getattr(self, field_name)
        ]
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def run_dir(self) -> Path:
        return self.output_dir or Path("runs") / self.name

    def resolved_yaml(self) -> str:
        """The spec with every default filled in, as YAML (written into the run directory)."""
        from ruamel.yaml import YAML

        yaml = YAML()
        yaml.default_flow_style = False
        buf = io.StringIO()
        yaml.dump(self.model_dump(mode="json"), buf)
        return buf.getvalue()


# -- loading ------------------------------------------------------------------------------------


def _format_errors(
    exc: ValidationError, data: Any, source: str, overrides: dict[tuple[Any, ...], str], prefix: tuple[Any, ...] = ()
) -> str:
    lines = []
    for err in exc.errors():
        loc = prefix + tuple(err["loc"])
        field_path = ".".join(str(x) for x in loc) or "(top level)"
        where = next((f"--set {t}" for p, t in overrides.items() if loc[: len(p)] == p), None)
        if where is None:
            pos = locate(data, loc)
            where = f"{source}:{pos[0]}:{pos[1]}" if pos else source
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown key (not allowed here)"
        lines.append(f"{where}: {field_path}: {msg}")
    return "\n".join(lines)


def _validate_blocks(
    data: Any,
    section: str,
    config_class: Callable[[str], type[BaseModel]],
    source: str,
    overrides: dict[tuple[Any, ...], str],
) -> tuple[dict[str, Any], list[str]]:
    """Validate each ``<section>.<name>`` block with the config class its ``type`` names."""
    configs: dict[str, Any] = {}
    errors: list[str] = []
    blocks = data.get(section)
    if not isinstance(blocks, dict):
        return configs, errors  # reported by the Spec model
    for name, raw in blocks.items():
        if not _typed(raw):
            continue  # reported by the Spec model
        try:
            cls = config_class(raw["type"])
        except SpecError as exc:
            pos = locate(data, (section, name, "type"))
            errors.append(f"{source}:{pos[0]}:{pos[1]}: {section}.{name}.type: {exc}" if pos else f"{source}: {exc}")
            continue
        try:
            configs[name] = cls.model_validate(dict(raw))
        except ValidationError as exc:
            errors.append(_format_errors(exc, data, source, overrides, prefix=(section, name)))
    return configs, errors


def _validated_or_placeholder(raw: Any, validated: dict[str, Any], base: type[BaseModel]) -> Any:
    if not isinstance(raw, dict):
        return raw
    return {
        name: validated.get(name) or (base.model_construct(type=block["type"]) if _typed(block) else block)
        for name, block in raw.items()
    }


def _typed(block: Any) -> bool:
    return isinstance(block, dict) and isinstance(block.get("type"), str)


def agent_config_class(type_: str) -> type[BaseModel]:
    return agent_class(type_).config_class


def provider_config_class(type_: str) -> type[BaseModel]:
    return provider_class(type_).config_class


def _matrix_names(matrix: Any) -> Iterator[tuple[str, int, Any]]:
    """(field, index, name) of every name the matrix lists."""
    if not isinstance(matrix, dict):
        return
    for field_name in ("agents", "models", "providers"):
        names = matrix.get(field_name)
        if isinstance(names, list):
            yield from ((field_name, i, name) for i, name in enumerate(names))


def _undeclared(field_name: str, name: Any, declared: Any) -> str:
    return (
        f"matrix.{field_name} names {name!r}, which is not declared under `{field_name}` "
        f"(declared: {', '.join(map(str, declared)) or 'none'})"
    )


def _check_matrix_names(data: dict[str, Any], source: str) -> list[str]:
    """Every matrix name that is not declared, each at its own line (not the first one only)."""
    errors = []
    for field_name, i, name in _matrix_names(data.get("matrix")):
        declared = data.get(field_name)
        declared = declared if isinstance(declared, dict) else {}
        # A mapping or list in the matrix is no name (and unhashable: `in` raised a TypeError).
        if not isinstance(name, Hashable) or name not in declared:
            pos = locate(data, ("matrix", field_name, i))
            where = f"{source}:{pos[0]}:{pos[1]}" if pos else source
            errors.append(f"{where}: matrix.{field_name}.{i}: {_undeclared(field_name, name, declared)}")
    return errors


def load_spec(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Spec:
    """Load and validate a spec file; ``overrides`` are ``a.b=c`` strings applied before validation (a
    relative path in one is the user's, from where anyswe runs: ``as_typed``; the file's are the spec's)."""
    p = Path(path)
    if not p.is_file():
        raise SpecError(f"spec file not found: {p}")
    data = read_yaml(p)
    if not isinstance(data, dict):
        raise SpecError("the spec must be a mapping of fields", location=str(p))
    applied: dict[tuple[Any, ...], str] = {}
    for text in overrides:
        keys, value = parse_override(text)
        apply_override(data, keys, as_typed(keys, value), text)
        applied[tuple(keys)] = text
    agents, errors = _validate_blocks(data, "agents", agent_config_class, str(p), applied)
    providers, provider_errors = _validate_blocks(data, "providers", provider_config_class, str(p), applied)
    errors += provider_errors
    matrix_errors = _check_matrix_names(data, str(p))
    errors += matrix_errors
    spec: Spec | None = None
    try:
        # Blocks already validated by their own classes go in as they are; a block that failed
        # (its errors are collected above) stands in as an unvalidated placeholder, not twice.
        # A matrix with undeclared names (reported above, each at its line) is left out.
        spec = Spec.model_validate(
            {
                **{k: v for k, v in data.items() if not (matrix_errors and k == "matrix")},
                "agents": _validated_or_placeholder(data.get("agents"), agents, AgentConfig),
                "providers": _validated_or_placeholder(data.get("providers"), providers, ProviderConfig),
            }
        )
    except ValidationError as exc:
        errors.insert(0, _format_errors(exc, data, str(p), applied))
    if errors or spec is None:
        raise SpecError("\n".join(errors))
    # Paths in the spec are relative to the spec file; the run directory to where anyswe runs.
    base = p.resolve().parent
    spec.dataset = spec.dataset.relative_to(base)
    for name, provider in list(spec.providers.items()):
        spec.providers[name] = provider.relative_to(base)
    spec.models = {name: model.relative_to(base) for name, model in spec.models.items()}
    for cfg in spec.agents.values():
        pred = getattr(cfg, "predictions", None)
        if isinstance(pred, Path) and not pred.is_absolute():
            cfg.predictions = base / pred  # type: ignore[attr-defined]
    return spec
