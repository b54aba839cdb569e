"""What a sandbox is asked for and what it gives back: plain data shared by every provider."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from anyswe.sandbox.artefacts import Needs
from anyswe.sandbox.labels import (
    LABEL_MANAGED,
    LABEL_OWNER,
    LABEL_PHASE,
    LABEL_RUN,
    LABEL_SESSION,
    LABEL_TASK,
    NAME_PREFIX,
    current_owner,
    current_session,
)

if TYPE_CHECKING:
    from anyswe._proc import ProcResult

#: ``none``: loopback only; ``bridge``: the runtime's private network (docker); ``host``: the host's
#: own; ``gateway``: no network, except one host service (a unix socket) at 127.0.0.1:<port> inside.
NetworkPolicy = Literal["none", "bridge", "host", "gateway"]

#: Where a ``gateway`` sandbox finds the host service's socket directory.
GATEWAY_DIR = "/.anyswe/gateway"

#: Every sandbox's hostname, on every runtime (docker would use the container id, apptainer the host's).
SANDBOX_HOSTNAME = "sandbox"

#: Gives the reference of a task's image in the local store (building it first if need be).
StoredImage = Callable[[], Awaitable[str]]


def added_limit(**kwargs: Any) -> Any:
    """A config field added after runs were made with the field's default in force by other means (or
    none): its default is not in the task key, so those runs keep their keys; any other value is."""
    return Field(**kwargs, json_schema_extra={"key_unless_default": True})


def neutral(**kwargs: Any) -> Any:
    """A config field that cannot change a task's result (where or how many, not what).

    Declared on the field itself, so the task key leaves it out; every other field is part of it.
    """
    return Field(**kwargs, json_schema_extra={"result_neutral": True})


@dataclass(frozen=True)
class ExecResult:
    """What one command in a sandbox did."""

    exit_code: int
    stdout: str
    stderr: str
    duration: float
    timed_out: bool = False
    #: Bytes of each stream counted but not kept, over the exec's ``max_output`` (0: it is whole);
    #: the text then holds its head and tail with a marker line between.
    stdout_dropped: int = 0
    stderr_dropped: int = 0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    @property
    def truncated(self) -> bool:
        return bool(self.stdout_dropped or self.stderr_dropped)

    @classmethod
    def from_proc(cls, r: ProcResult) -> ExecResult:
        return cls(
            exit_code=r.exit_code,
            stdout=r.stdout.decode("utf-8", errors="replace"),
            stderr=r.stderr.decode("utf-8", errors="replace"),
            duration=r.duration,
            timed_out=r.timed_out,
            stdout_dropped=r.stdout_dropped,
            stderr_dropped=r.stderr_dropped,
        )


class ProviderConfig(BaseModel):
    """Settings common to every provider (the ``providers.<name>`` block of a spec).

    ``type`` names the provider: a registered short name or a dotted path ``module:Class``.
    """

    model_config = ConfigDict(extra="forbid")

    type: str = Field(description="Provider type: a registered name or module:Class.")
    concurrency: int = neutral(default=4, ge=1, description="Sandboxes of this provider alive at once.")
    start_concurrency: int | None = neutral(
        default=None,
        ge=1,
        description="Sandbox starts under way at once (default: the host's CPUs). A burst of starts "
        "queues rather than sharing the CPU: the first sandboxes are ready sooner, and tasks stay staggered.",
    )
    startup_timeout: float = neutral(
        default=300.0, gt=0, description="Seconds to start one sandbox; unset in a spec: its timeouts.sandbox_start."
    )
    image: str | None = Field(
        default=None,
        description="Docker image template ({instance_id}, {instance_id_docker}, {repo}, {version}); "
        "default: the dataset's own (built locally for the demo).",
    )

    def prepared_artefacts(self, fields: Mapping[str, str], *, from_registry: bool) -> Needs:
        """What ``anyswe prepare images`` makes ready for this provider, per instance (``fields`` fill
        its own templates; ``from_registry``: its own artefacts are to be made from the registry, not
        the store). Default: nothing; it resolves its own."""
        return Needs()

    def relative_to(self, base: Path) -> ProviderConfig:
        """This config with its relative paths made relative to ``base`` (the spec's directory)."""
        return self

    def names_own_images(self) -> bool:
        """Whether this config says which image every instance runs, whatever the dataset."""
        return self.image is not None

    def notes(self, name: str) -> list[str]:
        """What the plan says of how this provider (``providers.<name>``) keeps its limits; none by default."""
        return []

    def key_payload(self) -> dict[str, Any]:
        """The fields that can change a result (everything not declared :func:`neutral`)."""
        data, fields = self.model_dump(mode="json"), type(self).model_fields
        extra = {k: f.json_schema_extra if isinstance(f.json_schema_extra, dict) else {} for k, f in fields.items()}
        return {
            k: v
            for k, v in data.items()
            if not extra[k].get("result_neutral")
            and not (extra[k].get("key_unless_default") and v == fields[k].default)
        }


@dataclass(frozen=True)
class Mount:
    """A host path bound into the sandbox (read-only unless said otherwise)."""

    source: str
    target: str
    read_only: bool = True

    def __post_init__(self) -> None:
        if not PurePosixPath(self.target).is_absolute():
            raise ValueError(f"mount target must be an absolute path: {self.target!r}")
        if not Path(self.source).exists():
            raise FileNotFoundError(f"mount source does not exist: {self.source}")


@dataclass(frozen=True)
class Gateway:
    """The one host service a ``gateway`` sandbox may reach: a unix socket on the host, seen inside
    the sandbox as ``127.0.0.1:port`` (anyswe's helper relays each connection to the socket)."""

    socket: str
    port: int = 8765

    def __post_init__(self) -> None:
        if not Path(self.socket).is_socket():
            raise FileNotFoundError(f"gateway socket does not exist: {self.socket}")
        if not 0 < self.port < 65536:
            raise ValueError(f"gateway port out of range: {self.port}")


@dataclass
class SandboxRequest:
    """What to start: the image, what to bind in, the env every command gets, the network, labels."""

    image: str
    run_id: str = ""
    task_id: str = ""
    mounts: tuple[Mount, ...] = ()
    #: Added to the environment of every command run in the sandbox (never on a command line).
    env: Mapping[str, str] = field(default_factory=dict)
    #: None: the provider's configured network.
    network: NetworkPolicy | None = None
    #: The host service a ``gateway`` network reaches (required with it, refused without it).
    gateway: Gateway | None = None
    name: str = field(default_factory=lambda: f"{NAME_PREFIX}{uuid.uuid4().hex[:16]}")
    session: str = field(default_factory=current_session)
    owner: str = field(default_factory=current_owner)
    #: What the sandbox is for within its task ("agent", "grading"), to tell them apart in `docker ps`.
    phase: str = ""

    def labels(self) -> dict[str, str]:
        return {
            LABEL_MANAGED: "1",
            LABEL_RUN: self.run_id,
            LABEL_TASK: self.task_id,
            LABEL_PHASE: self.phase,
            LABEL_SESSION: self.session,
            LABEL_OWNER: self.owner,
        }
