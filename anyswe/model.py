"""Models: the spec's ``models.<name>`` block, and the endpoint an agent is given for one task.

A model's key is never in a spec, a unit of work or a container: the spec names the environment
variable that holds it, and only the host-side process that talks to the upstream reads it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _known_protocol(name: str) -> str:
    """``name`` if a wire protocol is registered under it (gateway/protocols.py; plugins included)."""
    from anyswe.gateway.protocols import PROTOCOLS

    if name not in PROTOCOLS and ":" not in name:
        raise ValueError(f"unknown protocol {name!r}; known: {', '.join(PROTOCOLS.names())}")
    return name


def _known_upstream(name: str) -> str:
    from anyswe.execute.upstreams import known_upstream

    return known_upstream(name)


def _known_api(name: str) -> str:
    return name if name == "scripted" else _known_protocol(name)


#: A wire protocol's name: openai-chat, openai-responses, anthropic-messages, or a plugin's.
Protocol = Annotated[str, AfterValidator(_known_protocol)]


class BudgetSpec(BaseModel):
    """Per-task limits the gateway enforces; a call past one is refused and the task ends as ``budget``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    calls: int | None = Field(default=None, ge=1, description="Model calls per task (a turn cap for any agent).")
    tokens: int | None = Field(default=None, ge=1, description="Input + output tokens per task.")
    seconds: float | None = Field(default=None, gt=0, description="Wall time from the task's first call.")


class PriceSpec(BaseModel):
    """US dollars per million tokens; with them, each task's cost is in its result."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cache_read: float | None = Field(default=None, ge=0, description="Default: the input price.")
    cache_write: float | None = Field(default=None, ge=0, description="Default: the input price.")

    def cost(self, input_tokens: int, output_tokens: int, cache_read: int, cache_write: int) -> float:
        read = self.input if self.cache_read is None else self.cache_read
        write = self.input if self.cache_write is None else self.cache_write
        total = input_tokens * self.input + output_tokens * self.output + cache_read * read + cache_write * write
        return round(total / 1e6, 6)


class ReplaySpec(BaseModel):
    """Serve the replies recorded in another run instead of calling the model: an anyswe run's (``run``,
    checked against the conversation call by call), or ATIF trajectories another tool wrote (``atif``,
    Harbor's among them: served in order, since another harness's prompts are its own)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    run: Path | None = Field(default=None, description="The recorded run directory (relative to the spec).")
    atif: Path | None = Field(
        default=None,
        description="A directory of ATIF trajectories (relative to the spec): <instance_id>.json, Harbor's "
        "<instance_id>__*/agent/trajectory.json or anyswe's export <key>.json; the n-th of an instance's "
        "for sample n.",
    )
    model: str | None = Field(default=None, description="The recorded cell's model name; default: this one's.")
    provider: str | None = Field(default=None, description="The recorded cell's provider; default: the first.")

    @model_validator(mode="after")
    def _one_source(self) -> ReplaySpec:
        if (self.run is None) == (self.atif is None):
            raise ValueError("replay: give exactly one of run (an anyswe run) and atif (a directory of ATIF files)")
        return self

    @property
    def source(self) -> Path:
        """The recorded run or the ATIF directory."""
        source = self.run or self.atif
        assert source is not None
        return source


class ModelSpec(BaseModel):
    """A model endpoint. The key is never in the spec: only the *name* of the env var that holds it.

    ``api: scripted`` is anyswe's deterministic model (no key, no network): with ``script`` a
    directory of ``<instance_id>.json`` files (``{"steps": [shell commands]}``), without it the
    oracle (the host hands it the reference patch; the sandbox never sees it). It answers in
    ``protocol``, the protocol agents are told to speak to it.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    api: Annotated[str, AfterValidator(_known_api)] = Field(
        description="The protocol to speak to the upstream, or `scripted` (anyswe's own model)."
    )
    model: str = Field(default="scripted", description="The model id sent to the API.")
    base_url: str | None = None
    base_url_env: str | None = Field(
        default=None, description="Name of an environment variable holding the base URL (when base_url is unset)."
    )
    api_key_env: str | None = Field(default=None, description="Name of the environment variable holding the key.")
    params: dict[str, Any] = Field(default_factory=dict, description="Sampling parameters (temperature, ...).")
    protocol: Protocol | None = Field(default=None, description="scripted: the protocol agents speak to it.")
    script: Path | None = Field(default=None, description="scripted: a directory of per-instance scripts.")
    budget: BudgetSpec = Field(default_factory=BudgetSpec)
    prices: PriceSpec | None = Field(default=None, description="USD per million tokens, for the cost per task.")
    replay: ReplaySpec | None = Field(default=None, description="Replay a recorded run's replies.")
    upstream: Annotated[str, AfterValidator(_known_upstream)] | None = Field(
        default=None,
        description="Where replies come from: a registered upstream (http, scripted, replay) or a plugin's "
        "(anyswe.upstreams); default: replay with a replay block, scripted for api scripted, else http.",
    )
    misbehave: Literal["slow", "malformed", "flaky", "rate_limited", "never_submits", "context_window"] | None = Field(
        default=None, description="scripted: misbehave this way (failure tests)."
    )
    delay: float = Field(default=30.0, ge=0, description="scripted, misbehave: slow: seconds each reply takes.")
    token_ids: bool = Field(
        default=False,
        description="Keep the policy's token ids and log-probs per call in the trajectory (RL rollouts): openai-chat "
        "asks for them in vLLM's fields (logprobs, return_token_ids, return_tokens_as_token_ids); openai-responses "
        "reads them from the output items, as NeMo Gym's model server puts them.",
    )
    mask_off_policy: bool = Field(
        default=False,
        description="Mask a sample whose calls' token ids do not form one growing prefix chain (compaction, "
        "retries, a rewritten history): its tokens are not what the policy generated in one context.",
    )

    @property
    def upstream_name(self) -> str:
        """The upstream the gateway asks for this model's replies (execute/upstreams.py)."""
        if self.upstream is not None:
            return self.upstream
        if self.replay is not None:
            return "replay"
        return "scripted" if self.api == "scripted" else "http"

    @property
    def agent_protocol(self) -> Protocol:
        """The protocol an agent speaks to this model (through the gateway)."""
        if self.api == "scripted":
            return self.protocol or "openai-chat"
        return self.api

    @model_validator(mode="after")
    def _tokens_need_a_policy_server(self) -> ModelSpec:
        if self.token_ids and self.api not in ("openai-chat", "openai-responses"):
            raise ValueError(
                "token_ids: the policy's token ids come from an OpenAI-compatible policy server (api openai-chat, "
                f"as vLLM's, or openai-responses, as NeMo Gym's model server), not api {self.api}"
            )
        return self

    @model_validator(mode="after")
    def _upstream_has_what_it_serves(self) -> ModelSpec:
        # Checked here so a bad pairing is the spec's error at load, not every task's at its grant.
        if self.upstream == "replay" and self.replay is None:
            raise ValueError("upstream replay: needs a replay block (the run whose replies to serve again)")
        if self.upstream == "http" and self.api == "scripted":
            raise ValueError("upstream http: api scripted is anyswe's own model, not a protocol to send requests in")
        if self.replay is not None and self.upstream in ("http", "scripted"):
            raise ValueError(f"upstream {self.upstream}: a replay block is served only by upstream replay")
        return self

    @field_validator("api_key_env", "base_url_env")
    @classmethod
    def _env_name(cls, value: str | None) -> str | None:
        if value is not None and not _ENV_NAME.match(value):
            raise ValueError("must be the NAME of an environment variable (e.g. OPENAI_API_KEY), never the key itself")
        return value

    def relative_to(self, base: Path) -> ModelSpec:
        """The block with its relative paths (a script directory, a replayed run) under ``base``."""
        model = self
        if model.script is not None and not model.script.is_absolute():
            model = model.model_copy(update={"script": base / model.script})
        if model.replay is not None and not model.replay.source.is_absolute():
            field = "run" if model.replay.run is not None else "atif"
            replay = model.replay.model_copy(update={field: base / model.replay.source})
            model = model.model_copy(update={"replay": replay})
        return model

    def endpoint_url(self) -> str | None:
        """``base_url``, or the value of ``base_url_env`` in this process's environment."""
        if self.base_url is not None or self.base_url_env is None:
            return self.base_url
        return os.environ.get(self.base_url_env) or None

    def key_payload(self) -> dict[str, Any]:
        """What of the model changes a result (and so the task key): not where it is served from."""
        payload: dict[str, Any] = {"api": self.api, "model": self.model, "params": self.params}
        if self.upstream is not None:  # a plugin's replies are its own (unset: the keys of every earlier run)
            payload["upstream"] = self.upstream
        if self.api == "scripted":
            payload.update(protocol=self.agent_protocol, script=self.script)
            if self.misbehave is not None:
                payload.update(misbehave=self.misbehave, delay=self.delay)
        if self.budget != BudgetSpec():
            payload["budget"] = self.budget.model_dump()
        if self.token_ids:  # the rows then hold the policy's tokens
            payload["token_ids"] = True
        if self.mask_off_policy:  # it decides a mask
            payload["mask_off_policy"] = True
        if self.replay is not None:
            payload["replay"] = {
                ("run" if self.replay.run is not None else "atif"): self.replay.source.name,
                "model": self.replay.model,
                "provider": self.replay.provider,
            }
        return payload


class ModelEndpoint(BaseModel):
    """Where an agent sends its model calls for one task, and with which credential.

    ``token`` is a per-task credential issued by the host (never the upstream's real key): it is
    what an agent may put in its environment or config file inside the sandbox.
    """

    model_config = ConfigDict(frozen=True)

    name: str = Field(description="The model's name in the spec.")
    api: Protocol = Field(description="The protocol to speak to ``base_url``.")
    model: str
    base_url: str | None = Field(default=None, description="The gateway, as the host reaches it.")
    token: str | None = Field(default=None, repr=False)
    params: dict[str, Any] = Field(default_factory=dict)
    #: The gateway's unix socket on the host: in-sandbox agents reach it through a ``gateway`` network.
    socket: str | None = None
    #: ``host:port`` of the gateway as other machines reach it: set (with no socket or base URL) for
    #: units that may run elsewhere, which reach it through a relay of their own (gateway/relay.py).
    relay: str | None = None
