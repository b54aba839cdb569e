"""Models: the spec's ``models.<name>`` block, and the endpoint an agent is given for one task.

A model's key is never in a spec, a unit of work or a container: the spec names the environment
variable that holds it, and only the host-side process that talks to the upstream reads it.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

Protocol = Literal["openai-chat", "openai-responses", "anthropic-messages"]


class ModelSpec(BaseModel):
    """A model endpoint. The key is never in the spec: only the *name* of the env var that holds it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    api: Protocol
    model: str = Field(description="The model id sent to the API.")
    base_url: str | None = None
    api_key_env: str | None = Field(default=None, description="Name of the environment variable holding the key.")
    params: dict[str, Any] = Field(default_factory=dict, description="Sampling parameters (temperature, ...).")

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, value: str | None) -> str | None:
        if value is not None and not _ENV_NAME.match(value):
            raise ValueError("must be the NAME of an environment variable (e.g. OPENAI_API_KEY), never the key itself")
        return value

    def key_payload(self) -> dict[str, Any]:
        """What of the model changes a result (and so the task key): not where it is served from."""
        return {"api": self.api, "model": self.model, "params": self.params}


class ModelEndpoint(BaseModel):
    """Where an agent sends its model calls for one task, and with which credential.

    ``token`` is a per-task credential issued by the host (never the upstream's real key): it is
    what an agent may put in its environment or config file inside the sandbox.
    """

    model_config = ConfigDict(frozen=True)

    name: str = Field(description="The model's name in the spec.")
    api: Protocol
    model: str
    base_url: str | None = None
    token: str | None = Field(default=None, repr=False)
    params: dict[str, Any] = Field(default_factory=dict)
