"""What a client of ``anyswe serve`` may ask for: the server's config, a run request read against it,
and the bearer token that lets a client in.

A request chooses only among what the config declares, by name; every type path, URL, key variable,
network, limit, image and timeout is the config's (issue 31: a request that could give them read the
server's environment, sent its key to the client and ran a sandbox on the host network).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from anyswe.errors import RequestError
from anyswe.execute.runner import known_executor

#: Gym's rollout path prefix (nemo_gym.config_types.ROLLOUT_PATH_PREFIX).
ROLLOUT_PREFIX = "ng-rollout"
#: A rollout id Gym accepts (nemo_gym's rollout id pattern): it becomes a path segment of the model URL.
ROLLOUT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def _default_provider() -> str:
    from anyswe.sandbox import default_provider

    return default_provider()


class ServeConfig(BaseModel):
    """What the server may run: ``anyswe serve``'s options.

    A request chooses only among what is declared here, by name: the default ``agent``, ``model`` and
    ``provider`` blocks (name ``default``) and the named ones in ``agents``, ``models`` and
    ``providers``; a dataset of ``dataset``/``datasets``. Types, environment variable names, URLs,
    scripts, networks, limits, images and timeouts come from this file or the command line only: a
    request that could give them could read the server's secrets or run on its host.
    """

    model_config = ConfigDict(extra="forbid")

    agent: dict[str, Any] = Field(default_factory=lambda: {"type": "mini-swe-agent"})
    agents: dict[str, dict[str, Any]] = Field(default_factory=dict)
    provider: dict[str, Any] | str = Field(default_factory=lambda: _default_provider())
    providers: dict[str, dict[str, Any] | str] = Field(default_factory=dict)
    #: The model block; its ``base_url`` is the policy model server's root (the rollout prefix and
    #: /v1 are added per request). ``api: scripted`` serves the oracle (tests, no model).
    model: dict[str, Any] = Field(default_factory=lambda: {"api": "openai-chat"})
    models: dict[str, dict[str, Any]] = Field(default_factory=dict)
    #: The dataset a row without ``dataset_name`` is of (its harness and images); ``datasets`` are
    #: the others a row may name. A row naming any other is refused.
    dataset: str | None = None
    datasets: list[str] = Field(default_factory=list)
    #: Whether a request's ``instance_dict`` is the row run (its image fields, its repo's scripts,
    #: its test lists and so its reward). Off: the row is looked up by ``instance_id`` in the declared
    #: dataset and ``instance_dict`` is not read, since a row given inline chooses which local image
    #: runs and what grading runs. On only for clients trusted with that (rows of a dataset not here).
    inline_rows: bool = False
    timeouts: dict[str, float] = Field(default_factory=dict)
    concurrency: int = Field(default=4, ge=1)
    queue: int = Field(default=1024, ge=0)
    #: Seconds a connection may take to send a request's headers (and may stay idle between
    #: requests), and to send its body: slow clients cannot hold connections open.
    header_timeout: float = Field(default=30.0, gt=0)
    body_timeout: float = Field(default=120.0, gt=0)
    #: Where rollouts run: in this process (``local``), or as tasks on the Ray cluster at ``address``
    #: (its nodes advertise provider types; they reach this server's gateway at ``gateway_host``).
    executor: Annotated[str, AfterValidator(known_executor)] = "local"
    address: str | None = None
    gateway_host: str | None = None
    #: Record every rollout here as ``anyswe apply`` records a run (``anyswe results`` reads it).
    run_dir: Path | None = None
    #: Who may call ``/run``: ``token`` (a bearer token, the default) or ``none``, for a NeMo Gym deployment
    #: whose servers call each other without credentials inside one trust domain (its ServerClient sends no
    #: Authorization header). Only this config sets it, never a request; the server warns at start with the
    #: address it listens on, and refuses ``none`` on an address other than loopback unless
    #: ``auth_none_off_loopback`` says so too.
    auth: Literal["token", "none"] = "token"
    auth_none_off_loopback: bool = False
    #: Which model names a request may ask for (``responses_create_params.model``): the model block's own
    #: ``model`` and these; and the range each sampling parameter a request sets must lie in.
    request_models: list[str] = Field(default_factory=list)
    sampling_bounds: dict[str, tuple[float, float]] = Field(
        default_factory=lambda: {"temperature": (0.0, 2.0), "top_p": (0.0, 1.0), "max_output_tokens": (1, 131072)}
    )

    @field_validator("agents", "models", "providers")
    @classmethod
    def _not_default(cls, value: dict[str, Any]) -> dict[str, Any]:
        if DEFAULT in value:
            raise ValueError(f"{DEFAULT!r} names the singular block (agent, model, provider); choose another name")
        return value

    def choices(self, kind: str) -> dict[str, dict[str, Any] | str]:
        """The blocks a request may name for ``kind`` (agent, model, provider), ``default`` first."""
        singular: dict[str, Any] | str
        plural: dict[str, dict[str, Any]] | dict[str, dict[str, Any] | str]
        if kind == "agent":
            singular, plural = self.agent, self.agents
        elif kind == "model":
            singular, plural = self.model, self.models
        else:
            singular, plural = self.provider, self.providers
        return {DEFAULT: singular, **plural}

    def allowed_datasets(self) -> dict[str, str]:
        """Canonical name -> the name as declared, of every dataset a request may name."""
        from anyswe.datasets.registry import route

        declared = [d for d in (self.dataset, *self.datasets) if d]
        return {route(d).name: d for d in declared}


#: The name of the singular agent, model and provider blocks of a config.
DEFAULT = "default"
#: What an ``anyswe`` object in a request may hold: names of declared blocks, nothing else.
REQUEST_KEYS = ("agent", "model", "provider", "dataset")
#: Gym's per-sample fields of ``responses_create_params`` that reach the model (as sampling).
SAMPLING = ("model", "temperature", "top_p", "max_output_tokens")
#: How deep a request's JSON may nest (deeper: a 400; Python's own parsers recurse).
MAX_DEPTH = 64


def _needs_model(agent: Mapping[str, Any]) -> bool:
    """Whether the agent block's type asks for a model (an unknown type is refused later, by name)."""
    from anyswe.agents import agent_class

    try:
        return bool(agent_class(agent["type"]).needs_model)
    except Exception:
        return True


def _shown(value: Any) -> str:
    """A value the request sent, short, for an error message."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def json_depth(value: Any) -> int:
    """How deeply ``value`` (decoded JSON) nests, without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            deepest = max(deepest, level)
            if level > MAX_DEPTH:
                return level
            stack.extend((child, level + 1) for child in item if isinstance(child, dict | list))
    return deepest


class Requests:
    """Run requests read against one server's config: the instance and the rollout's blocks."""

    def __init__(self, config: ServeConfig) -> None:
        self.config = config

    def private(self) -> list[str]:
        """What of the config a client is not told in an error: every model block's URL (and the server it
        names) and model name, longest first."""
        from urllib.parse import urlsplit

        found: set[str] = set()
        for block in self.config.choices("model").values():
            if isinstance(block, Mapping):
                url = str(block.get("base_url") or "").rstrip("/")
                parts = urlsplit(url)
                found |= {url, url.removesuffix("/v1"), parts.netloc, f"{parts.scheme}://{parts.netloc}"}
                found.add(str(block.get("model") or ""))
        return sorted((s for s in found if len(s) >= 4 and s != "://"), key=len, reverse=True)

    def _named(self, own: Mapping[str, Any], kind: str) -> Any:
        """The declared block the request's ``anyswe.<kind>`` names (the default when it names none)."""
        choices = self.config.choices(kind)
        name = own.get(kind, DEFAULT)
        if name is None:
            name = DEFAULT
        if not isinstance(name, str):
            raise RequestError(
                f"anyswe.{kind}: name one of the server's {kind}s ({', '.join(choices)}); a request cannot give a block"
            )
        if name not in choices:
            raise RequestError(
                f"anyswe.{kind}: {_shown(name)} is not one of the server's {kind}s: {', '.join(choices)}"
            )
        block = choices[name]
        return dict(block) if isinstance(block, Mapping) else block

    def _dataset(self, own: Mapping[str, Any], meta: Mapping[str, Any]) -> str | None:
        """The dataset of the row: one the config declares (its harness and images), never any other."""
        from anyswe.datasets.registry import route
        from anyswe.errors import DatasetError

        allowed = self.config.allowed_datasets()
        asked = own.get("dataset") or meta.get("dataset_name")
        field = "anyswe.dataset" if own.get("dataset") else "responses_create_params.metadata.dataset_name"
        if asked is None:
            return self.config.dataset
        if not isinstance(asked, str):
            raise RequestError(f"{field} must be a dataset name")
        try:
            canonical = route(asked).name
        except DatasetError:
            canonical = None
        if canonical not in allowed:
            listing = ", ".join(allowed.values()) or "none (set `dataset:` in the server's config)"
            raise RequestError(f"{field}: {_shown(asked)} is not a dataset this server serves: {listing}")
        return allowed[canonical]

    def blocks(self, body: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
        """The instance and the rollout's blocks from a Gym run request (a RequestError if malformed)."""
        params = body.get("responses_create_params")
        if not isinstance(params, Mapping):
            raise RequestError("the run request has no `responses_create_params` object")
        meta = params.get("metadata") or {}
        if not isinstance(meta, Mapping) or not meta.get("instance_id"):
            raise RequestError("responses_create_params.metadata.instance_id is missing")
        own = body.get("anyswe") or {}
        if not isinstance(own, Mapping):
            raise RequestError("`anyswe` in the run request must be an object")
        for key in own:
            if key not in REQUEST_KEYS:
                raise RequestError(
                    f"anyswe.{str(key)[:40]}: a request may name only the server's "
                    f"{', '.join(REQUEST_KEYS)}; everything else is the server's config"
                )
        row = meta.get("instance_dict") if self.config.inline_rows else None
        if isinstance(row, str):
            try:
                row = json.loads(row)
            except (json.JSONDecodeError, RecursionError) as exc:
                raise RequestError(f"responses_create_params.metadata.instance_dict is not JSON: {exc}") from None
            if json_depth(row) > MAX_DEPTH:
                raise RequestError(f"responses_create_params.metadata.instance_dict nests deeper than {MAX_DEPTH}")
        instance = row if isinstance(row, Mapping) else str(meta["instance_id"])
        agent = self._named(own, "agent")
        model: dict[str, Any] | None = self._named(own, "model")  # checked even where unused: never ignored
        if not _needs_model(agent):
            model = None  # gold, replay: the server's model is not theirs
        elif model is not None and model.get("api") != "scripted":
            model = self._policy_model(model, params, body.get("_ng_rollout_id"))
        dataset = self._dataset(own, meta)
        if dataset is None and not isinstance(instance, Mapping):
            raise RequestError("this server declares no dataset to look the instance up in (`dataset:` in its config)")
        return instance, {
            "agent": agent,
            "provider": self._named(own, "provider"),
            "model": model,
            "dataset": dataset,
            "timeouts": self.config.timeouts,
        }

    def _policy_model(self, model: dict[str, Any], params: Mapping[str, Any], rollout_id: Any) -> dict[str, Any]:
        """Gym's routing: the model server's root with the rollout prefix, the request's model and sampling,
        each within what the config allows (a key of the server's is not the client's to spend as it likes)."""
        root = str(model.get("base_url") or "").rstrip("/")
        # A root given with its /v1 (the way OpenAI clients are configured) gets no second one.
        root = root.removesuffix("/v1")
        if root and rollout_id is not None:
            if not isinstance(rollout_id, str | int) or not ROLLOUT_ID.fullmatch(str(rollout_id)):
                raise RequestError("_ng_rollout_id must be letters, digits, '.', '_' and '-' (Gym's own rule)")
            root += f"/{ROLLOUT_PREFIX}/{rollout_id}"
        sampling: dict[str, Any] = {}
        for k in ("temperature", "top_p", "max_output_tokens"):
            v = params.get(k)
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, int | float):
                raise RequestError(f"responses_create_params.{k} must be a number")
            low, high = self.config.sampling_bounds.get(k, (float("-inf"), float("inf")))
            if not low <= v <= high:
                raise RequestError(
                    f"responses_create_params.{k} {v:g} is outside this server's bounds [{low:g}, {high:g}]"
                )
            sampling["max_tokens" if k == "max_output_tokens" else k] = v
        out = {**model, "params": {**model.get("params", {}), **sampling}}
        if root:
            out["base_url"] = root + "/v1"
        if params.get("model"):
            if not isinstance(params["model"], str):
                raise RequestError("responses_create_params.model must be a string")
            allowed = {str(m) for m in (model.get("model"), *self.config.request_models) if m}
            if (allowed or model.get("api_key_env")) and params["model"] not in allowed:
                raise RequestError(
                    f"responses_create_params.model {params['model'][:80]!r} is not a model this server serves "
                    "(its config's model block and request_models)"
                )
            out["model"] = params["model"]
        return out


def token_path(run_dir: Path | None, run_id: str) -> Path:
    """Where a server that was given no token file writes the one it makes: beside its run state."""
    from anyswe.config import cache_dir

    return (run_dir if run_dir is not None else cache_dir() / "serve") / f"serve-{run_id}.token"


def write_token(path: Path, token: str) -> None:
    """``token`` into ``path``, readable by its owner only from the moment it exists."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(token + "\n")


def read_token(path: Path) -> str:
    """The token in ``path`` (its first line); a SpecError naming the file if there is none."""
    from anyswe.errors import SpecError

    try:
        token = path.read_text().strip()
    except OSError as exc:
        raise SpecError(f"--token-file {path}: {exc.strerror or exc}") from None
    if len(token) < 16:
        raise SpecError(f"--token-file {path}: a token of at least 16 characters is needed")
    if path.stat().st_mode & 0o077:  # as ssh refuses a key others can read
        raise SpecError(f"--token-file {path}: other users may read or write it (chmod 600 {path})")
    return token
