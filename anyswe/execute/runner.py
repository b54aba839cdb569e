"""Executors: what runs units, one :class:`Runner` per apply or session, chosen by name in :func:`make_runner`.

Cheap to import (a spec's ``executor.type`` is checked against :data:`EXECUTORS` when it loads): the
runners' own modules load only when one is made.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import TYPE_CHECKING

from anyswe.errors import PlanError
from anyswe.registry import Registry

if TYPE_CHECKING:
    from anyswe.execute.unit import TaskOutput, WorkUnit

__all__ = ["EXECUTORS", "Runner", "known_executor", "make_runner"]


class Runner(ABC):
    """What runs units, registered as an executor (``executor.type`` of a spec): the in-process
    :class:`~anyswe.execute.worker.Worker` (``local``), the Ray runner (``ray``), or a plugin's
    (entry point group ``anyswe.executors``)."""

    #: Where units that run on other machines reach this machine's model gateway (None: they do not).
    gateway_host: str | None = None
    #: Whether the driver's concurrency bounds what runs at once (False: the executor's own resources do,
    #: and the driver only waits).
    bounded_by_driver: bool = True

    @classmethod
    def create(cls, *, address: str | None, local_resources: dict[str, float], gateway_host: str | None) -> Runner:
        """The runner a spec's executor block asks for (``address``: a cluster's; ``local_resources``:
        what a cluster started here advertises of each provider type)."""
        return cls()

    @abstractmethod
    async def check(self, units: Iterable[WorkUnit]) -> None: ...
    @abstractmethod
    async def run(self, unit: WorkUnit) -> TaskOutput: ...
    @abstractmethod
    async def collect_orphans(self, task_keys: set[str]) -> list[str]: ...
    @abstractmethod
    async def sweep(self, run_id: str) -> list[str]: ...
    @abstractmethod
    async def close(self) -> None: ...


EXECUTORS: Registry[Runner] = Registry("executor", Runner, group="anyswe.executors", error=PlanError)
EXECUTORS.register("local", "anyswe.execute.worker:Worker")
EXECUTORS.register("ray", "anyswe.execute.ray:RayRunner")


def make_runner(
    kind: str,
    address: str | None = None,
    local_resources: dict[str, float] | None = None,
    gateway_host: str | None = None,
) -> Runner:
    """The runner of an executor (``local``: a Worker in this process; ``ray``: the cluster at ``address``,
    or one started here advertising ``local_resources`` of each provider type), the one place it is chosen."""
    cls = EXECUTORS.load(kind)
    return cls.create(address=address, local_resources=local_resources or {}, gateway_host=gateway_host)


def known_executor(name: str) -> str:
    """``name`` if it names an executor (a spec's or the server's ``executor``), else a ValueError listing them."""
    if name not in EXECUTORS and ":" not in name:
        raise ValueError(f"unknown executor {name!r}; known: {', '.join(EXECUTORS.names())}; or module:Class")
    return name
