"""Apptainer sandboxes: one apptainer instance per sandbox.

Each sandbox gets its own sparse ext3 overlay of configurable size (``--writable-tmpfs`` caps writes
at 64 MiB, which real builds overflow; a sparse copy of an empty one made once per size and apptainer
version, kept in the state dir) in a state dir named after the instance so ``anyswe gc`` can find
what a crash left. /tmp, /var/tmp and $HOME are the image's own, in that overlay (``--no-mount
tmp,home``), as on docker, where they are in the container's filesystem: a ``--workdir`` would put
them on the host's disk, outside the overlay's size. Instances start with ``--contain --cleanenv``:
a minimal /dev, no host home or working directory, no host environment (which may hold API keys);
no ``--pid``, which apptainer >= 1.3.6 rejects for instances.

spython finds the runtime and lists instances; start, exec and stop run as argv lists from here,
because spython's instance start reports a failure only on the console, and an exec needs stdin,
separate streams and a timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Hashable, Mapping
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field

from anyswe import _proc
from anyswe._threads import in_thread
from anyswe.errors import DatasetError, ImageNotFound, RuntimeNotAvailable, SandboxStartError
from anyswe.sandbox.artefacts import Needs
from anyswe.sandbox.base import Sandbox
from anyswe.sandbox.helper import HELPER_PATH
from anyswe.sandbox.labels import NAME_PREFIX
from anyswe.sandbox.provider import Provenance, SandboxProvider
from anyswe.sandbox.request import (
    SANDBOX_HOSTNAME,
    NetworkPolicy,
    ProviderConfig,
    SandboxRequest,
    StoredImage,
    neutral,
)
from anyswe.sandbox.sif import SifArtefacts, collect_interrupted_builds, sif_identity

#: The instance's environment variable that carries its labels.
LABELS_ENV = "ANYSWE_LABELS"
#: The instance's process id, written by apptainer into the sandbox's state dir.
PID_FILE = "instance.pid"


def default_state_dir() -> Path:
    return Path(os.environ.get("ANYSWE_APPTAINER_STATE", Path(tempfile.gettempdir()) / "anyswe-apptainer"))


class ApptainerConfig(ProviderConfig):
    """Settings of the apptainer provider (``providers.<name>`` with ``type: apptainer``)."""

    type: str = "apptainer"
    binary: str = neutral(default="apptainer", description="The apptainer (or singularity) executable.")
    overlay_size_mb: int = Field(default=4096, ge=64, description="Writable overlay per sandbox (sparse).")
    network: Literal["host", "none"] = Field(
        default="none",
        description="Network of the task's sandboxes: none (sealed, the default), or host: the host's own, "
        "loopback included (a warning in the plan).",
    )
    # As docker's: without them a fork bomb took every pid of the host (32768 here) and a memory hog
    # calls the host's OOM killer. Cgroups, which apptainer sets for root only (rootless: the job's).
    memory: str | None = Field(default="8g", description="Memory per sandbox, swap included (as root); null: none.")
    pids_limit: int | None = Field(default=4096, gt=0, description="Processes per sandbox (as root); null: none.")
    state_dir: Path = neutral(default_factory=default_state_dir, description="Overlays and work dirs.")
    extra_options: list[str] = neutral(default_factory=list, description="Extra `instance start` options.")
    sif: str | None = neutral(
        default=None, description="SIF path template; default: converted from the docker image and cached."
    )

    def names_own_images(self) -> bool:
        return self.sif is not None or super().names_own_images()

    def relative_to(self, base: Path) -> ApptainerConfig:
        if self.sif is None or "://" in self.sif or Path(self.sif).is_absolute() or self.sif.startswith("{"):
            return self
        return self.model_copy(update={"sif": str(base / self.sif)})

    def prepared_artefacts(self, fields: Mapping[str, str], *, from_registry: bool) -> Needs:
        kind = SifArtefacts(self.binary)
        if self.sif is None:  # converted from the local docker image into anyswe's cache, as a run would
            return Needs(store_image=True, kind=kind)
        try:
            target = str(Path(self.sif.format(**fields)).absolute())
        except (KeyError, IndexError) as exc:
            raise DatasetError(f"sif template {self.sif!r} has an unknown field {exc}") from None
        return Needs(store_image=not from_registry, kind=kind, target=target, from_registry=from_registry)


#: The capabilities docker gives a container's root by default: root must be the same root on both
#: runtimes (permission checks, adduser, chown), and apptainer's root otherwise has none.
DOCKER_DEFAULT_CAPS = (
    "CAP_AUDIT_WRITE,CAP_CHOWN,CAP_DAC_OVERRIDE,CAP_FOWNER,CAP_FSETID,CAP_KILL,CAP_MKNOD,CAP_NET_BIND_SERVICE,"
    "CAP_NET_RAW,CAP_SETFCAP,CAP_SETGID,CAP_SETPCAP,CAP_SETUID,CAP_SYS_CHROOT"
)


class ApptainerSandbox(Sandbox["ApptainerProvider"]):
    # Apptainer adds its own variables (APPTAINER_*, a prompt, a library path) to every process.
    helper_flags = ("-S",)

    def _exec_argv(self, inner: list[str], *, env_file: Path | None, stdin: bool) -> list[str]:
        # --cleanenv again on exec: without it the host environment is passed into the command.
        # --pwd /: the helper changes to the working directory itself (-C), as on docker.
        cmd = [self.provider.config.binary, "exec", "--cleanenv", "--pwd", "/", "--add-caps", DOCKER_DEFAULT_CAPS]
        return [*cmd, f"instance://{self.name}", *inner]

    async def _env_transport(self, env: Mapping[str, str]) -> tuple[Path | None, list[str]]:
        # apptainer's --env-file evaluates values a second time inside the container (a `$` in a
        # token is expanded), so values are not carried verbatim: the env goes in a 0600 file
        # inside the sandbox, which the helper loads and deletes before the command starts.
        return None, await self._env_in_sandbox(env)

    def _is_runtime_failure(self, result: _proc.ProcResult) -> bool:
        err = result.stderr.decode("utf-8", errors="replace")
        return result.exit_code == 255 and "FATAL:" in err

    async def _teardown(self) -> None:
        await self.provider.remove(self.name)


class ApptainerProvider(SandboxProvider[ApptainerConfig]):
    """Starts apptainer instances from SIF files (or any apptainer image URI)."""

    name = "apptainer"
    config_class = ApptainerConfig
    networks: ClassVar[tuple[NetworkPolicy, ...]] = ("none", "host", "gateway")
    sandbox_class = ApptainerSandbox

    def __init__(self, config: ApptainerConfig | None = None) -> None:
        super().__init__(config or ApptainerConfig())
        #: Instances this provider started -> their process (pid, start time), from ``--pid-file``:
        #: whether one still runs is a look in /proc, not an `instance list` (two apptainer runs).
        self._processes: dict[str, tuple[int, str]] = {}
        self._version: str | None = None

    @classmethod
    def leftover_files(cls) -> list[str]:
        return collect_interrupted_builds()  # a SIF build's image archive: hundreds of MB

    def _state(self, name: str) -> Path:
        return self.config.state_dir / name

    async def check(self) -> None:
        r = await _proc.run([self.config.binary, "--version"], timeout=60)
        if r.exit_code != 0 or r.timed_out:
            raise RuntimeNotAvailable.from_proc("apptainer does not answer (run scripts/provision.sh apptainer)", r)

    async def image_exists(self, image: str) -> bool:
        if "://" in image:
            return True  # a URI (docker-daemon://, oras://...): apptainer resolves it at start
        return Path(image).is_file()

    async def runnable_image(self, stored: StoredImage, fields: Mapping[str, str]) -> str:
        """The SIF for the ``stored`` image: the config's ``sif`` template, or a cached conversion."""
        if self.config.sif:
            try:
                return self.config.sif.format(**fields)
            except (KeyError, IndexError) as exc:
                raise DatasetError(f"sif template {self.config.sif!r} has an unknown field {exc}") from None
        from anyswe.sandbox.sif import ensure_sif

        return str(await ensure_sif(await stored(), apptainer=self.config.binary))

    async def image_provenance(self, image: str) -> Provenance:
        if "://" in image or not Path(image).is_file():
            return Provenance()
        from anyswe.sandbox.sif import sif_provenance

        return await in_thread(sif_provenance, Path(image))

    def default_network(self) -> NetworkPolicy:
        return self.config.network

    def host_address(self, network: NetworkPolicy) -> str | None:
        # Without --net the instance shares the host's network namespace, loopback included;
        # a gateway sandbox reaches its relay at its own loopback.
        return None if network == "none" else "127.0.0.1"

    async def _run_checked(self, argv: list[str], what: str, timeout: float | None = None) -> None:
        r = await _proc.run(argv, timeout=timeout)
        if r.exit_code != 0 or r.timed_out:
            raise SandboxStartError.from_proc(f"apptainer: {what} failed", r)

    def _start_argv(self, request: SandboxRequest, network: NetworkPolicy, state: Path) -> list[str]:
        cfg = self.config
        argv = [cfg.binary, "instance", "start", "--contain", "--cleanenv", "--hostname", SANDBOX_HOSTNAME]
        # The labels also live in the instance itself (its first process's environment), for a gc
        # whose state directory is another one (each batch job may have its own TMPDIR).
        argv += ["--env", f"{LABELS_ENV}={json.dumps(request.labels(), separators=(',', ':'))}"]
        # /tmp and home from the image, in the overlay: bounded by its size, not on the host's disk.
        argv += ["--overlay", str(state / "overlay.img"), "--no-mount", "tmp,home"]
        argv += ["--pid-file", str(state / PID_FILE)]
        for m in request.mounts:
            argv += ["--bind", f"{m.source}:{m.target}:{'ro' if m.read_only else 'rw'}"]
        if self._own_init():
            # PID 1 is then anyswe's helper (--boot runs /sbin/init), which nothing inside can end
            # (helper/anyswe-exec.c, init mode). Apptainer's own PID 1 (appinit) exits on any signal
            # once the instance's start script is done, so an agent's `kill -TERM 1` would end the
            # instance and pass its own failure off as the infrastructure's.
            helper = next(m.source for m in request.mounts if m.target == HELPER_PATH)
            argv += ["--boot", "--bind", f"{helper}:/sbin/init:ro"]
            if network not in ("none", "gateway"):
                # --boot gives the instance a network namespace of its own: join the host's instead.
                argv += ["--netns-path", f"/proc/{os.getpid()}/ns/net"]
            argv += ["--memory", cfg.memory, "--memory-swap", cfg.memory] if cfg.memory else []  # cgroups: root's
            argv += ["--pids-limit", str(cfg.pids_limit)] if cfg.pids_limit else []
        if network in ("none", "gateway"):
            argv += ["--net", "--network", "none"]
        return [*argv, *cfg.extra_options, request.image, request.name]

    def _own_init(self) -> bool:
        """Whether sandboxes get anyswe's PID 1: `--boot` is for root only, and a user namespace
        (--fakeroot, --userns) asked for in extra options is not root's start."""
        userns = {"--fakeroot", "-f", "--userns", "-u"} & set(self.config.extra_options)
        return os.geteuid() == 0 and not userns

    async def _image_workdir(self, image: str) -> str:
        """The WORKDIR of the docker image a SIF was built from (its OCI config inside the SIF)."""
        if not Path(image).is_file():
            return "/"
        listing = await _proc.run([self.config.binary, "sif", "list", image], timeout=60)
        ids = [line.split("|")[0].strip() for line in listing.stdout.decode().splitlines() if "JSON.Generic" in line]
        for sif_id in ids:
            dump = await _proc.run([self.config.binary, "sif", "dump", sif_id, image], timeout=60)
            with contextlib.suppress(ValueError):
                config = json.loads(dump.stdout)
                if isinstance(config, dict) and ("Cmd" in config or "WorkingDir" in config or "Env" in config):
                    return str(config.get("WorkingDir") or "/")
        return "/"

    async def _start(self, request: SandboxRequest, network: NetworkPolicy) -> Hashable | None:
        if not await self.image_exists(request.image):
            raise ImageNotFound(f"SIF image {request.image!r} does not exist")
        state = self._state(request.name)
        try:
            state.mkdir(parents=True, exist_ok=True)
            os.chmod(state, 0o700)
            (state / "labels.json").write_text(json.dumps(request.labels() | {"image": request.image}))
            # A copy of an empty overlay made once: `apptainer overlay create` per sandbox is an
            # apptainer run and a mkfs, CPU that sandbox starts queue for under concurrency.
            template = await self._overlay_template()
            copy = ["cp", "--sparse=always", "--", str(template), str(state / "overlay.img")]
            await self._run_checked(copy, "copying the empty overlay")
            argv = self._start_argv(request, network, state)
            before = sif_identity(request.image)
            what = f"starting instance {request.name} from {request.image}"
            start = asyncio.ensure_future(self._run_checked(argv, what, timeout=self.config.startup_timeout))
            try:
                await asyncio.shield(start)
            except asyncio.CancelledError:
                # Killing `instance start` does not stop an instance its starter has already
                # daemonised (a session of its own): let the start end, so the removal comes after it.
                with contextlib.suppress(BaseException):
                    await start
                raise
            if (process := _process(state / PID_FILE)) is not None:
                self._processes[request.name] = process
                await self._watch_init(request.name, process[0], self.config.memory if self._own_init() else None)
            # The SIF as it was while the instance started (a file replaced meanwhile is not known);
            # none when extra options may bind or overlay anything, the repository included.
            same = before is not None and before == sif_identity(request.image)
            return before if same and not self.config.extra_options else None
        except BaseException:
            await asyncio.shield(self.remove(request.name))
            raise

    async def _overlay_template(self) -> Path:
        """An empty sparse overlay of the configured size, made by this apptainer (version in the name)."""
        cfg = self.config
        if self._version is None:
            r = await _proc.run([cfg.binary, "--version"], timeout=60)
            self._version = hashlib.sha256(r.stdout).hexdigest()[:12]
        path = cfg.state_dir / f".overlay-{cfg.overlay_size_mb}mb-{self._version}.img"
        if not path.is_file():
            # Made under a name of its own, then renamed: whole or absent, whoever else makes one meanwhile.
            cfg.state_dir.mkdir(parents=True, exist_ok=True)
            part = path.with_name(f"{path.name}.part-{uuid.uuid4().hex}")
            try:
                overlay = ["overlay", "create", "--sparse", "--size", str(cfg.overlay_size_mb), str(part)]
                await self._run_checked([cfg.binary, *overlay], "creating the overlay")
                os.replace(part, path)
            finally:
                part.unlink(missing_ok=True)
        return path

    async def remove(self, name: str) -> None:
        """Stop the instance (if any) and delete its state dir; idempotent."""
        process = self._processes.pop(name, None)
        self._unwatch(name)
        # One known to be gone needs no stop; any other is stopped outright (a stop of an instance
        # that is not there fails, harmlessly) rather than looked up first.
        if process is None or _running(process):
            with contextlib.suppress(Exception):
                await _proc.run([self.config.binary, "instance", "stop", "--force", name], timeout=60)
        await in_thread(shutil.rmtree, self._state(name), True)

    async def gone_reason(self, name: str) -> str | None:
        process = self._processes.get(name)
        running = _running(process) if process is not None else name in await self.running_instances()
        if running:
            return None
        # Nothing inside can end anyswe's PID 1 (but its memory limit: out_of_memory); apptainer's own can.
        who = "stopped or killed from outside" if self._own_init() else "apptainer's own PID 1: from outside or inside"
        return f"the apptainer instance is no longer running ({who})"

    async def init_pid(self, name: str) -> int | None:
        process = self._processes.get(name)  # from the instance's --pid-file: a process on this host
        return process[0] if process is not None and _running(process) else None

    async def running_instances(self) -> list[str]:
        """Names of the anyswe instances running now (through spython's instance listing)."""
        return sorted(await self._instance_pids())

    async def _instance_pids(self) -> dict[str, int]:
        def _list() -> dict[str, int]:
            from spython.main import Client

            found = Client.instances(return_json=True, quiet=True) or []
            pids = {(i.get("instance") or i.get("daemon_name") or ""): int(i.get("pid") or 0) for i in found}
            return {n: pid for n, pid in pids.items() if n.startswith(NAME_PREFIX)}

        return await in_thread(_list)

    async def sandboxes(self) -> dict[str, dict[str, str] | None]:
        """Running anyswe instances and state dirs (overlays) that outlived theirs, with their labels."""
        pids = await self._instance_pids()
        names = set(pids)
        if self.config.state_dir.is_dir():
            names |= {p.name for p in self.config.state_dir.iterdir() if p.name.startswith(NAME_PREFIX)}
        return {n: self._labels(n) or _instance_labels(pids.get(n)) for n in sorted(names)}

    def _labels(self, name: str) -> dict[str, str] | None:
        try:
            labels = json.loads((self._state(name) / "labels.json").read_text())
        except (OSError, ValueError):
            return None
        return {str(k): str(v) for k, v in labels.items()}


def _start_time(pid: int) -> str | None:
    """Process ``pid``'s start time (/proc/PID/stat field 22: a pid reused differs); None if not running."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return None if fields[0] in ("Z", "X") else fields[19]
    except (OSError, IndexError):
        return None


def _process(pid_file: Path) -> tuple[int, str] | None:
    """(pid, start time) of the process named in an instance's ``--pid-file``, if it runs."""
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None
    started = _start_time(pid)
    return None if started is None else (pid, started)


def _running(process: tuple[int, str]) -> bool:
    return _start_time(process[0]) == process[1]


def _instance_labels(pid: int | None) -> dict[str, str] | None:
    """The labels an instance was started with, read from the instance itself (None: unknown).

    Apptainer keeps an instance's start configuration, the ``--env`` values included, in the
    environment of the instance's process (``ENGINE_CONFIG<n>`` chunks of JSON), or of its parent
    when the process is anyswe's own init (``--boot``).
    """
    if not pid:
        return None
    try:
        environ = _environ(pid)
        if b"ENGINE_CONFIG1" not in environ:  # --boot: the instance's process is anyswe's init, its parent apptainer's
            environ = _environ(int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]))
        chunks = int(environ.get(b"ENGINE_CONFIG_CHUNKS", b"1"))
        config = json.loads(b"".join(environ.get(f"ENGINE_CONFIG{i}".encode(), b"") for i in range(1, chunks + 1)))
        labels = json.loads(config["engineConfig"]["jsonConfig"]["apptainerEnv"][LABELS_ENV])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return {str(k): str(v) for k, v in labels.items()}


def _environ(pid: int) -> dict[bytes, bytes]:
    return dict(item.split(b"=", 1) for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if b"=" in item)
