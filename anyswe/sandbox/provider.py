"""The provider interface: starts sandboxes of one runtime under a shared concurrency bound."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Hashable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from anyswe._threads import in_thread
from anyswe.errors import SandboxDiskFull, SandboxError, SandboxOutOfMemory, SandboxOverLimit, SandboxStartError
from anyswe.sandbox.base import Sandbox, check_env
from anyswe.sandbox.helper import HELPER_PATH, ensure_helper
from anyswe.sandbox.labels import LABEL_SESSION
from anyswe.sandbox.oom import OomWatch, protect_init
from anyswe.sandbox.request import GATEWAY_DIR, Mount, NetworkPolicy, ProviderConfig, SandboxRequest, StoredImage
from anyswe.sandbox.slots import Slots

C = TypeVar("C", bound=ProviderConfig)


def _cpus() -> int:
    """CPUs this process may run on (its affinity mask where the platform has one)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


@dataclass(frozen=True)
class Provenance:
    """``digest``: the artefact that ran (docker image id, SIF sha256); ``source_digest``: the docker
    image id it was made from (equal on every backend that ran the same image)."""

    digest: str | None = None
    source_digest: str | None = None


class SandboxProvider(ABC, Generic[C]):
    """Starts sandboxes of one runtime, at most ``config.concurrency`` alive at once.

    Subclasses name their config class (``config_class``), which validates the spec's
    ``providers.<name>`` block, and the networks they can give (``networks``; the first is the default).
    """

    name: ClassVar[str]
    config_class: ClassVar[type[ProviderConfig]]
    networks: ClassVar[tuple[NetworkPolicy, ...]]
    sandbox_class: ClassVar[type[Sandbox[Any]]]

    def __init__(self, config: C) -> None:
        self.config = config
        self.slots = Slots(config.concurrency)
        # Starts are CPU-bound in the runtime (dockerd, containerd, runc; apptainer's setup): all of a
        # wave at once would each take as long as the whole wave.
        self._starts = Slots(config.start_concurrency or _cpus())
        self._workdirs: dict[str, str] = {}
        self._stopping: set[asyncio.Task[None]] = set()
        #: The OOM events of sandboxes whose memory cgroup goes with them (sandbox/oom.py).
        self._oom: dict[str, OomWatch] = {}

    def stop_later(self, sandbox: Sandbox[Any], then: Callable[[], None] | None = None) -> None:
        """Remove ``sandbox`` in the background (then call ``then``): a task's result need not wait for
        the runtime's teardown (an apptainer ``instance stop`` takes over a second). Its concurrency
        slot stays taken until it is gone; :meth:`drain` waits for every removal still under way."""

        async def stop() -> None:
            try:
                await sandbox.stop()
            finally:
                if then is not None:
                    then()

        task = asyncio.get_running_loop().create_task(stop())
        self._stopping.add(task)
        task.add_done_callback(self._stopped)

    def _stopped(self, task: asyncio.Task[None]) -> None:
        self._stopping.discard(task)
        # A removal that failed leaves its sandbox labelled for the run's sweep and `anyswe gc`: the
        # error is theirs to report. Retrieved here, it is not printed as "never retrieved".
        if not task.cancelled():
            task.exception()

    async def drain(self) -> None:
        """Wait until every background removal has finished (errors are the runtime's gc's business)."""
        while self._stopping:
            await asyncio.gather(*list(self._stopping), return_exceptions=True)

    @abstractmethod
    async def _start(self, request: SandboxRequest, network: NetworkPolicy) -> Hashable | None:
        """Start the container/instance; on any failure remove what was half-started, then raise.

        Returns exactly what it was started from (the sandbox's ``image_identity``; None: unknown).
        """

    @abstractmethod
    async def _image_workdir(self, image: str) -> str:
        """The image's WORKDIR ("" or "/" when it sets none)."""

    @abstractmethod
    async def check(self) -> None:
        """Raise :class:`RuntimeNotAvailable` unless the runtime answers."""

    @abstractmethod
    async def image_exists(self, image: str) -> bool:
        """Whether ``image`` is available locally."""

    @abstractmethod
    async def runnable_image(self, stored: StoredImage, fields: Mapping[str, str]) -> str:
        """What this provider runs for a task's image (the stored reference itself, or an artefact of its own).

        ``stored()`` gives the image's reference in the local store (building it if need be: called
        only when needed); ``fields`` fill the provider's own image templates ({instance_id}, ...), if any.
        """

    async def image_provenance(self, image: str) -> Provenance:
        """What exactly ``image`` is (for the task's result): its digest and the docker image it came from."""
        return Provenance()

    @abstractmethod
    def host_address(self, network: NetworkPolicy) -> str | None:
        """The address at which a sandbox on ``network`` reaches a host service (None: unreachable)."""

    @abstractmethod
    async def remove(self, name: str) -> None:
        """Remove the sandbox called ``name`` and its storage, whether or not it runs; idempotent."""

    @abstractmethod
    async def gone_reason(self, name: str) -> str | None:
        """Why the sandbox ``name`` no longer runs (killed, stopped, OOM-killed, removed); None while it runs."""

    async def out_of_memory(self, name: str) -> str | None:
        """Asked once sandbox ``name`` is gone: the evidence that its own memory limit ended it (an
        OOM kill in its cgroup: the task's doing, :class:`~anyswe.errors.SandboxOutOfMemory`), or
        None when there is none (the sandbox's loss is then the runtime's or the host's)."""
        watch = self._oom.get(name)
        return None if watch is None else await in_thread(watch.evidence)

    async def over_limit(self, name: str) -> SandboxOverLimit | None:
        """Asked once sandbox ``name`` is gone: the error of its own limit that ended it (its memory, its
        disk: the task's doing), or None (its loss is the runtime's or the host's)."""
        if (disk := self.disk_exceeded(name)) is not None:
            return SandboxDiskFull(disk)
        if (oom := await self.out_of_memory(name)) is not None:
            return SandboxOutOfMemory(oom)
        return None

    def limit_notes(self) -> list[str]:
        """The limits of its sandboxes that are kept in a way a reader should know (the task's log)."""
        return []

    def disk_exceeded(self, name: str) -> str | None:
        """The evidence that sandbox ``name`` was stopped for passing its disk limit (a provider that
        watches one: docker's watchdog), or None."""
        return None

    async def _watch_init(self, name: str, pid: int, memory: str | None) -> None:
        """Keep sandbox ``name``'s PID 1 (host pid ``pid``) out of the OOM killer's choice where the host
        may, and, when it has a ``memory`` limit, watch its memory cgroup for the OOMs that can end it
        all the same (a task can raise PID 1's score)."""
        await in_thread(protect_init, pid)
        if memory and (watch := await in_thread(OomWatch.of, pid, memory)):
            self._oom[name] = watch

    def _unwatch(self, name: str) -> None:
        if (watch := self._oom.pop(name, None)) is not None:
            watch.close()

    async def init_pid(self, name: str) -> int | None:
        """The host pid of sandbox ``name``'s PID 1, when it runs on this host in a PID namespace of
        its own (what :meth:`Sandbox.end_strays` needs); None when that cannot be known."""
        return None

    @classmethod
    def leftover_files(cls) -> list[str]:
        """Remove the files this runtime's killed runs and builds left on this host; the paths removed."""
        return []

    @abstractmethod
    async def sandboxes(self) -> dict[str, dict[str, str] | None]:
        """Every anyswe sandbox of this runtime on this host: name -> its labels (None if unknown)."""

    @abstractmethod
    def default_network(self) -> NetworkPolicy:
        """The network a request that names none gets (from the provider's config)."""

    async def leftovers(self, session: str | None = None) -> list[str]:
        """Names of every anyswe sandbox on this host (of one ``session`` if given)."""
        found = await self.sandboxes()
        if session is None:
            return sorted(found)
        return sorted(n for n, labels in found.items() if labels is not None and labels.get(LABEL_SESSION) == session)

    def _network(self, request: SandboxRequest) -> NetworkPolicy:
        network = request.network or self.default_network()
        if network not in self.networks:
            raise SandboxError(
                f"{self.name} sandboxes cannot have network {network!r} (supported: {', '.join(self.networks)})"
            )
        if (network == "gateway") != (request.gateway is not None):
            raise ValueError("network 'gateway' needs the request's `gateway` socket, and only it takes one")
        return network

    async def image_workdir(self, image: str) -> str:
        """Where commands run by default in sandboxes of ``image`` (its WORKDIR), the same on every runtime."""
        if image not in self._workdirs:
            workdir = await self._image_workdir(image)
            self._workdirs[image] = workdir if workdir.startswith("/") else "/"
        return self._workdirs[image]

    async def start(self, request: SandboxRequest | str, *, run_id: str = "", task_id: str = "") -> Sandbox[Any]:
        """Start a sandbox (from a request, or an image name), waiting for a free concurrency slot first.

        Every sandbox gets anyswe's helper bind-mounted read-only (see ``helper/``).
        """
        if isinstance(request, str):
            request = SandboxRequest(image=request, run_id=run_id, task_id=task_id)
        check_env(request.env)
        network = self._network(request)
        mounts = [Mount(str(await ensure_helper()), HELPER_PATH)]
        if request.gateway is not None:
            # The socket's directory is the task's own (the gateway's per-task socket, or a node relay's
            # per unit), read-only: the task can neither remove nor replace it, nor see another's.
            mounts.append(Mount(str(Path(request.gateway.socket).parent), GATEWAY_DIR))
        request = dataclasses.replace(request, mounts=(*request.mounts, *mounts))
        slot = await self.slots.take()
        try:
            starting = await self._starts.take()  # a wait here is queueing, not the start's timeout
            try:
                identity = await asyncio.wait_for(self._start(request, network), self.config.startup_timeout)
            finally:
                starting.release()
        except TimeoutError:
            slot.release()
            raise SandboxStartError(
                f"{self.name} sandbox from {request.image!r} did not start within {self.config.startup_timeout:g}s "
                "(providers.<name>.startup_timeout)"
            ) from None
        except BaseException:
            slot.release()
            raise
        try:
            sandbox = self.sandbox_class(
                request, self, slot, network=network, workdir=await self.image_workdir(request.image)
            )
            sandbox.image_identity = identity
            if request.gateway is not None:
                await sandbox.open_gateway(request.gateway)
        except BaseException:
            await asyncio.shield(self.remove(request.name))
            slot.release()
            raise
        return sandbox

    @contextlib.asynccontextmanager
    async def sandbox(
        self, request: SandboxRequest | str, *, run_id: str = "", task_id: str = ""
    ) -> AsyncIterator[Sandbox[Any]]:
        """``async with provider.sandbox(image) as sb:`` -- stopped on every path, cancellation included."""
        sb = await self.start(request, run_id=run_id, task_id=task_id)
        try:
            yield sb
        finally:
            await asyncio.shield(sb.stop())
