"""Docker sandboxes through python-on-whales.

``docker run`` and a container's state go through python-on-whales' typed API. Exec, removal, the
image inspect and the sweep run from the same client's argv prefix in an asyncio subprocess: an exec
needs separate stdout/stderr bytes, stdin and a timeout, which python-on-whales' blocking ``execute``
does not give, and an inspect with ``--format`` answers several questions (or containers) in one call.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import time
from collections.abc import Hashable, Mapping
from functools import cached_property
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field

from anyswe import _proc
from anyswe._threads import in_thread
from anyswe.errors import ImageNotFound, RuntimeNotAvailable, SandboxError, SandboxStartError
from anyswe.sandbox.artefacts import Needs
from anyswe.sandbox.base import Sandbox
from anyswe.sandbox.disk import DiskLimits, DiskSize, plan_note, size_bytes
from anyswe.sandbox.helper import HELPER_PATH
from anyswe.sandbox.labels import LABEL_MANAGED
from anyswe.sandbox.oom import protect_init
from anyswe.sandbox.provider import Provenance, SandboxProvider
from anyswe.sandbox.reap import in_cgroup_of
from anyswe.sandbox.request import (
    SANDBOX_HOSTNAME,
    NetworkPolicy,
    ProviderConfig,
    SandboxRequest,
    StoredImage,
    added_limit,
)

if TYPE_CHECKING:
    from python_on_whales import DockerClient

#: How long one container's removal may take, a removal already under way included: dockerd
#: removes a container of a SWE-bench image (a big writable layer) in seconds, under load in tens.
_REMOVE_SECONDS = 120.0


class DockerConfig(ProviderConfig):
    """Settings of the docker provider (the ``providers.<name>`` block of a spec with ``type: docker``)."""

    type: str = "docker"
    cpus: float | None = Field(default=None, gt=0, description="CPU limit per sandbox (docker --cpus).")
    # Limits on by default (issue 21): without them one sandbox can take the host. 8g is above what
    # the heaviest SWE-bench test suites need (sympy, matplotlib, astropy: a few GB) and below a host
    # that runs several; swap is held to the same value, or docker lets a sandbox swap as much again.
    memory: str | None = Field(
        default="8g", description="Memory limit per sandbox, e.g. '4g' (swap included); null: none."
    )
    network: Literal["bridge", "none", "host"] = Field(
        default="none",
        description="Network of the task's sandboxes: none (sealed, the default), or bridge / host, which "
        "reach the host and beyond (a warning in the plan). Model traffic goes through the gateway either way.",
    )
    # Processes and threads per sandbox: a fork bomb stops here, not at the host's pid_max (32768 on
    # many hosts, shared by every sandbox). 4096 leaves room for parallel test runners and their threads.
    pids_limit: int | None = Field(default=4096, gt=0, description="Processes and threads per sandbox; null: none.")
    disk: DiskSize = added_limit(default="4g", description="Disk a sandbox may write (sandbox/disk.py); null: none.")

    def prepared_artefacts(self, fields: Mapping[str, str], *, from_registry: bool) -> Needs:
        return Needs(store_image=True)  # docker runs the stored image itself

    def notes(self, name: str) -> list[str]:
        return [plan_note(f"providers.{name}.disk", self.disk)]


def _client() -> DockerClient:
    from python_on_whales import DockerClient

    return DockerClient()


class DockerSandbox(Sandbox["DockerProvider"]):
    def _exec_argv(self, inner: list[str], *, env_file: Path | None, stdin: bool) -> list[str]:
        # Working directory and user are the helper's business (-C, -u), the same as on apptainer.
        cmd = [*self.provider.docker_cmd, "exec"]
        if stdin:
            cmd.append("--interactive")
        if env_file is not None:
            cmd += ["--env-file", str(env_file)]
        return [*cmd, self.name, *inner]

    def _is_runtime_failure(self, result: _proc.ProcResult) -> bool:
        # `docker exec` itself exits 125 (daemon error) or 126/127 with "OCI runtime exec failed"
        # when the helper cannot start; a vanished container reports on stderr with 1.
        err = result.stderr.decode("utf-8", errors="replace")
        return (
            result.exit_code == 125
            or "OCI runtime exec failed" in err
            or (result.exit_code == 1 and ("No such container" in err or "is not running" in err))
        )

    async def _teardown(self) -> None:
        await self.provider.remove(self.name)


class DockerProvider(SandboxProvider[DockerConfig]):
    """Starts one container per sandbox: ``--init``, pre-assigned name, anyswe labels, limits."""

    name = "docker"
    config_class = DockerConfig
    networks: ClassVar[tuple[NetworkPolicy, ...]] = ("none", "bridge", "host", "gateway")
    sandbox_class = DockerSandbox

    def __init__(self, config: DockerConfig | None = None) -> None:
        super().__init__(config or DockerConfig())
        self._docker = _client()
        # image -> (id, WORKDIR) of a present image: one `docker image inspect` per image answers
        # whether it is here, what it is and where commands run, for every task of it.
        self._images: dict[str, tuple[str, str]] = {}
        # sandbox -> (host pid of its PID 1, container id), from the inspect of its start.
        self._inits: dict[str, tuple[int, str]] = {}
        self._disk = DiskLimits(size_bytes(self.config.disk) if self.config.disk else None)

    @property
    def docker_cmd(self) -> list[str]:
        return list(self._docker.client_config.docker_cmd)

    async def check(self) -> None:
        r = await _proc.run([*self.docker_cmd, "version", "--format", "{{.Server.Version}}"], timeout=30)
        if r.exit_code != 0 or r.timed_out:
            raise RuntimeNotAvailable.from_proc("docker does not answer (run scripts/provision.sh docker)", r)

    def disk_exceeded(self, name: str) -> str | None:
        return self._disk.exceeded(name)

    def limit_notes(self) -> list[str]:
        return [self._disk.note()]

    async def _image(self, image: str) -> tuple[str, str] | None:
        """``image``'s id and WORKDIR, None when it is not here. A present image is remembered; one
        removed meanwhile fails its `docker run --pull never`, which forgets it."""
        if (known := self._images.get(image)) is not None:
            return known
        fmt = "[{{json .Id}},{{json .Config.WorkingDir}}]"
        r = await _proc.run([*self.docker_cmd, "image", "inspect", "--format", fmt, image], timeout=60)
        if r.exit_code != 0 and not r.timed_out and b"no such image" in r.stderr.lower():
            return None
        try:
            image_id, workdir = json.loads(r.stdout) if r.exit_code == 0 and not r.timed_out else (None, None)
        except ValueError:
            image_id = workdir = None
        if not isinstance(image_id, str) or not isinstance(workdir, str):
            raise SandboxError.from_proc(f"docker could not inspect image {image!r}", r)
        self._images[image] = (image_id, workdir)
        return self._images[image]

    async def image_exists(self, image: str) -> bool:
        return await self._image(image) is not None

    async def runnable_image(self, stored: StoredImage, fields: Mapping[str, str]) -> str:
        return await stored()

    async def image_provenance(self, image: str) -> Provenance:
        digest = known[0] if (known := await self._image(image)) is not None else None
        return Provenance(digest or None, digest or None)

    def default_network(self) -> NetworkPolicy:
        return self.config.network

    @cached_property
    def _bridge_gateway(self) -> str:
        """The host's address on docker's default bridge (what ``host-gateway`` resolves to)."""
        ipam = self._docker.network.inspect("bridge").ipam.config or [{}]
        cfg = ipam[0]
        if cfg.get("Gateway"):
            return str(cfg["Gateway"])
        # Older engines leave Gateway out: the bridge takes the subnet's first address.
        return str(next(ipaddress.ip_network(cfg.get("Subnet", "172.17.0.0/16")).hosts()))

    def host_address(self, network: NetworkPolicy) -> str | None:
        if network == "none":
            return None
        # gateway: the helper's relay inside the sandbox; host: the host's own loopback.
        return "127.0.0.1" if network in ("host", "gateway") else self._bridge_gateway

    async def remove(self, name: str) -> None:
        """Remove container ``name`` and its anonymous volumes; idempotent.

        The CLI runs in a session of its own (``_proc``): a Ctrl-C sent to the terminal's process
        group must not kill a removal half-way, which leaves the daemon removing the container and
        every later ``rm`` of it refused ("removal ... is already in progress"). Such a removal,
        started by another client or one that was killed, is waited for rather than reported.
        """
        self._inits.pop(name, None)
        await self._disk.forget(name)
        argv = [*self.docker_cmd, "container", "rm", "--force", "--volumes", name]
        deadline = time.monotonic() + _REMOVE_SECONDS
        while True:
            r = await _proc.run(argv, timeout=_REMOVE_SECONDS)
            err = r.stderr.decode(errors="replace").lower()
            if r.exit_code == 0 or "no such container" in err:
                return
            if r.timed_out or "already in progress" not in err or time.monotonic() > deadline:
                raise SandboxError.from_proc(f"docker could not remove container {name}", r)
            await asyncio.sleep(0.5)

    def _run_options(self, request: SandboxRequest, network: NetworkPolicy) -> dict[str, Any]:
        cfg = self.config
        mounts = [
            ["type=bind", f"source={m.source}", f"target={m.target}", *(["readonly"] if m.read_only else [])]
            for m in request.mounts
        ]
        return {
            "detach": True,
            "name": request.name,
            "hostname": SANDBOX_HOSTNAME,
            "labels": request.labels(),
            "pull": "never",
            "cpus": cfg.cpus,
            "memory": cfg.memory,
            "memory_swap": cfg.memory,  # equal to memory: no swap beyond the limit
            # A gateway sandbox has no network at all: its one way out is a relayed unix socket.
            "networks": ["none" if network == "gateway" else network],
            "pids_limit": cfg.pids_limit,
            "mounts": mounts,
            "storage_options": [f"size={cfg.disk}"] if self._disk.mechanism == "storage-opt" else [],
        }

    async def _image_workdir(self, image: str) -> str:
        known = await self._image(image)
        if known is None:
            raise ImageNotFound(f"docker image {image!r} is not available locally")
        # As the image's config has it ("/testbed/" in SWE-bench's), normalised: "/testbed".
        return str(PurePosixPath(known[1])) if known[1].startswith("/") else "/"

    async def _start(self, request: SandboxRequest, network: NetworkPolicy) -> Hashable | None:
        if self._disk.mechanism is None:  # how the disk limit is kept: by the daemon's storage driver, asked once
            info = [*self.docker_cmd, "info", "--format", "{{json .Driver}}|{{json .DriverStatus}}"]
            self._disk.choose((await _proc.run(info, timeout=60)).stdout)
        try:
            return await self._run(request, network)
        except SandboxStartError as exc:
            if self._disk.mechanism != "storage-opt" or "storage-opt" not in (exc.stderr_tail or ""):
                raise
            self._disk.refused()  # overlay2 over xfs without pquota: the watchdog, and the start again
            return await self._run(request, network)

    async def _run(self, request: SandboxRequest, network: NetworkPolicy) -> Hashable | None:
        from python_on_whales.exceptions import DockerException

        if not await self.image_exists(request.image):
            raise ImageNotFound(
                f"docker image {request.image!r} is not available locally; anyswe never pulls "
                "implicitly (`docker pull` it, or build it, first)"
            )
        try:
            # The helper as PID 1 keeps the container up whatever the image's CMD, and nothing inside can end
            # it (helper/anyswe-exec.c, --init): a sandbox lost is the runtime's or the host's doing, never the
            # task's way to make its failure infra. docker's --init (tini) would pass an inside `kill 1` on.
            options = self._run_options(request, network)

            def run_container() -> tuple[Any, str | None]:
                container = self._docker.run(request.image, ["--init"], entrypoint=HELPER_PATH, **options)
                with contextlib.suppress(Exception):
                    # PID 1 is never the OOM killer's choice (sandbox/oom.py); only the host may set that.
                    if (pid := _local_pid(container)) is not None:
                        protect_init(pid)
                        self._inits[request.name] = (pid, container.id)
                try:
                    # The image the container runs (python-on-whales has just inspected it), not
                    # what the tag names, which another build or pull may have moved meanwhile.
                    return container, str(container.image)
                except Exception:
                    return container, None

            run = asyncio.ensure_future(in_thread(run_container))
            try:
                container, image_id = await asyncio.shield(run)
            except asyncio.CancelledError:
                # A thread cannot be cancelled: `docker run` goes on and may create the container
                # after a removal issued now. Wait for it to return, so the removal below comes last.
                with contextlib.suppress(BaseException):
                    await run
                raise
            if not getattr(container, "id", None):
                raise SandboxStartError(f"`docker run -d` returned no container id for {request.name}")
            layer = (getattr(getattr(container, "graph_driver", None), "data", None) or {}).get("UpperDir")
            self._disk.watch(request.name, layer, [*self.docker_cmd, "container", "kill", request.name])
            return ("docker", image_id) if image_id else None
        except DockerException as exc:
            self._images.pop(request.image, None)
            await asyncio.shield(self.remove(request.name))
            raise SandboxStartError(
                f"docker could not start a sandbox from {request.image!r}",
                argv=exc.docker_command,
                exit_code=exc.return_code,
                stdout=exc.stdout,
                stderr=exc.stderr,
            ) from exc
        except Exception as exc:
            # e.g. an empty reply from `docker run -d`, which python-on-whales cannot parse.
            await asyncio.shield(self.remove(request.name))
            raise SandboxStartError(f"docker could not start {request.name}: {exc!r}") from exc
        except BaseException:
            # A half-started container is found by its pre-assigned name and removed.
            await asyncio.shield(self.remove(request.name))
            raise

    async def gone_reason(self, name: str) -> str | None:
        from python_on_whales.exceptions import NoSuchContainer

        # Its PID 1 still in its cgroup: it runs. The shim reaps an ended PID 1 before docker marks the
        # container exited, so the kernel never says "running" later than docker would.
        if self._running(name):
            return None
        try:
            state = (await in_thread(self._docker.container.inspect, name)).state
        except NoSuchContainer:
            return "the container was removed"
        if state.running:
            return None
        code = state.exit_code
        if state.oom_killed:
            return f"the container was killed for exceeding its memory limit (OOMKilled, exit {code})"
        # The helper's init ends with 143 on docker stop's SIGTERM, 137 on a kill (SIGKILL); nothing
        # inside can end it, so any end is the runtime's or the host's.
        how = {137: "killed (SIGKILL: docker kill, the OOM killer or a preemption)", 143: "stopped (SIGTERM)"}
        return f"the container was {how.get(code or 0, f'ended ({state.status}, exit {code})')}"

    async def out_of_memory(self, name: str) -> str | None:
        from python_on_whales.exceptions import NoSuchContainer

        try:
            state = (await in_thread(self._docker.container.inspect, name)).state
        except NoSuchContainer:
            return None
        if state.running or not state.oom_killed:
            return None
        # Docker's OOMKilled: an OOM kill of the container's own memory limit happened in its life.
        # Its PID 1 is never the victim unless the task raised its oom_score_adj (sandbox/oom.py).
        limit = f" of {self.config.memory}" if self.config.memory else ""
        code = state.exit_code
        return f"its own memory limit{limit} ran out (OOMKilled, exit {code})"

    def _running(self, name: str) -> bool:
        """Whether the PID 1 its start found is still in the container's cgroup (a pid reused after the
        container ended is another's); False also when this provider did not start it."""
        return (known := self._inits.get(name)) is not None and in_cgroup_of(*known)

    async def init_pid(self, name: str) -> int | None:
        from python_on_whales.exceptions import NoSuchContainer

        # The pid its start found while it runs; otherwise docker is asked.
        if self._running(name):
            return self._inits[name][0]
        try:
            container = await in_thread(self._docker.container.inspect, name)
        except NoSuchContainer:
            return None
        return _local_pid(container)

    async def sandboxes(self) -> dict[str, dict[str, str] | None]:
        """Every anyswe container on this host, running or not, with its labels: two docker calls."""
        listing = [*self.docker_cmd, "container", "ls", "--all", "--quiet", "--no-trunc"]
        r = await _proc.run([*listing, "--filter", f"label={LABEL_MANAGED}=1"], timeout=60)
        if r.exit_code != 0 or r.timed_out:
            raise SandboxError.from_proc("docker could not list anyswe's containers", r)
        ids = r.stdout.decode().split()
        if not ids:
            return {}
        # One inspect of them all, for their names and labels. One removed in between (by a concurrent
        # run, a gc, a test worker's teardown) is no longer there to list: docker says so on stderr,
        # exits 1 and still prints the others; skipped, not an error (retrying the whole listing lost
        # that race under load).
        fmt = "[{{json .Name}},{{json .Config.Labels}}]"
        r = await _proc.run([*self.docker_cmd, "container", "inspect", "--format", fmt, *ids], timeout=60)
        others = [
            e for e in r.stderr.decode(errors="replace").splitlines() if e and "no such container" not in e.lower()
        ]
        if r.timed_out or (r.exit_code != 0 and others):
            raise SandboxError.from_proc("docker could not inspect anyswe's containers", r)
        found: dict[str, dict[str, str] | None] = {}
        for line in filter(str.strip, r.stdout.decode().splitlines()):  # one removed meanwhile: an empty line
            name, labels = json.loads(line)
            found[name.lstrip("/")] = dict(labels or {})
        return found


def _local_pid(container: Any) -> int | None:
    """The host pid of a running container's PID 1, when it runs on this host."""
    pid = container.state.pid
    if not container.state.running or not pid:
        return None
    # The engine may be another machine's (DOCKER_HOST): the pid is this host's only if the
    # process it names here is in the container's cgroup.
    return int(pid) if in_cgroup_of(int(pid), container.id) else None
