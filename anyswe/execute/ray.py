"""The Ray runner: each unit of work runs as a Ray task on a node that has its sandbox provider.

Nodes advertise what they can run as custom resources named after provider types, with their
concurrency as the amount (``ray start --resources='{"docker": 8, "apptainer": 4}'``); a unit asks
for one of its provider's type and no CPU, so Ray places it on such a node and never runs more
there at once than advertised. The node resolves images and SIFs itself (``run_unit``: a fresh
worker per unit) and sends back the :class:`TaskOutput`; only the driver writes the run directory,
so resume and exactly-once recording are the local executor's. A task whose node or worker process
dies is run again elsewhere by Ray (``max_retries``); the driver still records one output for it.
A model task is the exception: its gateway grant (token, budget, trajectory) belongs to one attempt,
and a lost attempt has spent model calls, so Ray does not re-run it; the loss comes back as an infra
error, recorded with its usage, and the driver runs the task again with a fresh grant.

Model cells need the model gateway, which listens on the driver's machine. On Ray every model unit
runs inside a relay on its node (gateway/relay.py) that pipes its calls to the gateway: over
loopback while every node is this machine, else to this machine's cluster address (or the spec's
``executor.gateway_host``), where the gateway listens as well.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from anyswe.errors import RuntimeNotAvailable
from anyswe.execute.classify import failed_output
from anyswe.execute.models import is_loopback
from anyswe.execute.ray_auth import AUTH_MODE_VAR, choose_auth_mode, probe, probe_target, use_auth_mode
from anyswe.execute.runner import Runner
from anyswe.execute.worker import Worker, run_unit

if TYPE_CHECKING:
    from anyswe.execute.unit import TaskOutput, WorkUnit

#: How often Ray runs a task again when its node or worker process dies (a task's own failure is
#: its result, never a Ray failure).
NODE_FAILURE_RETRIES = 3


def _run_remote(unit: WorkUnit) -> TaskOutput:
    return run_unit(unit)


class RayRunner(Runner):
    """The ``ray`` executor: runs units on a Ray cluster; sandbox bookkeeping (orphans, sweep) on this
    machine's runtimes."""

    #: The nodes' advertised resources bound what runs at once; the driver only waits.
    bounded_by_driver = False

    @classmethod
    def create(cls, *, address: str | None, local_resources: dict[str, float], gateway_host: str | None) -> Runner:
        return cls(address, local_resources=local_resources, gateway_host=gateway_host)

    def __init__(
        self,
        address: str | None = None,
        *,
        local_resources: dict[str, float] | None = None,
        gateway_host: str | None = None,
    ) -> None:
        try:
            import ray
        except ImportError:
            raise RuntimeNotAvailable(
                "the ray executor needs Ray: install anyswe with the `ray` extra (uv sync --extra ray)"
            ) from None
        self._ray = ray
        self.address = address
        #: Without an address, Ray starts on this machine advertising these (provider type -> tasks at once).
        self.local_resources = local_resources or {}
        self._local = Worker()
        self._remote: Any = None
        self._joined_here = False  # a Ray the user (or a notebook) joined is theirs to leave
        self._started_here = False
        self._run_id = ""
        #: Where nodes reach the model gateway: the spec's, or set by ``check`` (see ``_gateway_address``).
        self.gateway_host = gateway_host

    def _connect(self) -> None:
        ray = self._ray
        self._remote = ray.remote(_run_remote)
        if ray.is_initialized():  # joined before (a notebook's own ray.init, an earlier run)
            return
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # nothing leaves this machine
        # Under `uv run` Ray would start its workers through `uv run` with this directory shipped as their
        # working dir (the whole checkout, its .venv included), and they die starting: nodes run the
        # anyswe installed on them.
        os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
        # A cluster runs with token authentication or without; joining it in the other mode can abort
        # this process in Ray's C++, so its mode is asked first (ray_auth). A Ray started here by
        # ray.init (no cluster to join) gets the mode Ray gives it: token, its token made if missing.
        target = probe_target(self.address)
        if target is not None:
            use_auth_mode(choose_auth_mode(target, probe(target), os.environ.get(AUTH_MODE_VAR)))
        from ray.exceptions import AuthenticationError

        # ray.init makes SIGTERM a sys.exit in the middle of whatever runs; a handler the driver set
        # (the CLI's: stop as Ctrl-C does, tearing sandboxes down) stays. Without one (a notebook)
        # Ray's is kept.
        sigterm = signal.getsignal(signal.SIGTERM)
        try:
            extra: dict[str, Any] = {} if self.address else {"resources": self.local_resources}
            ray.init(
                address=self.address, log_to_driver=False, logging_level="WARNING", configure_logging=False, **extra
            )
        except (ConnectionError, RuntimeError, ValueError, AuthenticationError) as exc:
            raise RuntimeNotAvailable(f"cannot join the Ray cluster at {self.address or 'auto'}: {exc}") from None
        finally:
            if threading.current_thread() is threading.main_thread() and callable(sigterm):
                signal.signal(signal.SIGTERM, sigterm)
        self._joined_here = True
        self._started_here = self.address is None

    async def check(self, units: Iterable[WorkUnit]) -> None:
        """Every provider type the units need is advertised by some node (else they would wait forever)."""
        units = list(units)
        for u in units:
            self._local.provider(u)  # this machine's runtimes, for orphan collection
        self._connect()  # in the main thread: Ray installs its signal handlers there
        have = self._ray.cluster_resources()  # type: ignore[no-untyped-call]
        missing = sorted({u.provider.type for u in units} - {k for k, v in have.items() if v >= 1})
        nodes = self._ray.nodes()  # type: ignore[no-untyped-call]
        hosts = {n.get("NodeManagerAddress") for n in nodes if n.get("Alive")}
        if any(u.model is not None for u in units):
            self._gateway_address(hosts)
        if missing:
            raise RuntimeNotAvailable(
                f"no node of the Ray cluster advertises {', '.join(missing)}: start nodes with "
                f"`ray start --resources='{{\"{missing[0]}\": N}}'` (N: tasks at once on that node)"
            )

    def _gateway_address(self, hosts: set[str]) -> None:
        """Where nodes reach the gateway. Units always go through a relay on their node (so a node the
        cluster gains later is no different): loopback while every node is this machine, else this
        machine's address in the cluster, or the spec's."""
        here = self._ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
        others = sorted(h for h in hosts if h != here and not is_loopback(h))
        if self.gateway_host is None:
            self.gateway_host = here if others else "127.0.0.1"
        elif others and is_loopback(self.gateway_host):
            raise RuntimeNotAvailable(
                f"executor.gateway_host {self.gateway_host} is this machine's loopback, which the Ray nodes on "
                f"{', '.join(others)} cannot reach: give an address of this machine they can (or leave it unset)"
            )

    async def run(self, unit: WorkUnit) -> TaskOutput:
        # A re-run under the same grant would share its budget and interleave two attempts' calls in
        # one trajectory: model tasks are retried by the driver, with a new grant.
        retries = 0 if unit.model is not None else NODE_FAILURE_RETRIES
        ref = self._remote.options(
            num_cpus=0, resources={unit.provider.type: 1}, max_retries=retries, retry_exceptions=False
        ).remote(unit)
        try:
            output: TaskOutput = await asyncio.wrap_future(ref.future())
        except asyncio.CancelledError:
            # Ctrl-C: the node's process is interrupted, which tears its sandboxes down; wait (a while)
            # for that before the driver sweeps and lets Ray go.
            self._ray.cancel(ref, force=False)
            await asyncio.to_thread(self._ray.wait, [ref], timeout=60)
            raise
        except Exception as exc:  # the node died (more often than retried), or Ray itself failed
            return failed_output(unit, "infra", f"{type(exc).__name__} on the Ray cluster: {exc}", source="node")
        return output

    async def collect_orphans(self, task_keys: set[str]) -> list[str]:
        return await self._local.collect_orphans(task_keys)

    async def sweep(self, run_id: str) -> list[str]:
        # Sandboxes of a dead node's task on this machine: their owner (a Ray worker) is gone.
        self._run_id = run_id
        return await self._local.collect_orphans_of_run(run_id)

    async def close(self) -> None:
        """Leave Ray; a Ray started here stops, and what its workers had not removed yet is collected."""
        if self._joined_here and self._ray.is_initialized():
            self._ray.shutdown()
            self._joined_here = False
        if self._started_here and self._run_id:
            await self._local.collect_orphans_of_run(self._run_id)
