"""What ``anyswe prepare images`` makes for a provider, and how a provider says so.

Every artefact starts from an image in the local store (sandbox/store.py), pulled or built. A
provider whose runtime runs something else (apptainer: a SIF) owns an :class:`ArtefactKind`: the
jobs' phase, how much disk one needs and where, and how one is made. The preparation itself
(prepare/images.py) only collects the jobs, checks the disk and runs each phase under its bound.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

if TYPE_CHECKING:
    from anyswe.datasets.instance import Instance
    from anyswe.datasets.registry import Benchmark

#: buildable / unbuildable: a dry run's answer for an image it would build (``reason``: why not).
Status = Literal["pending", "present", "pulled", "built", "failed", "skipped", "buildable", "unbuildable"]
#: The store's own phase: images pulled or built into the local store.
STORE_PHASE = "image"


@dataclass
class ImageJob:
    """One artefact to make: an image in the store (phase ``image``) or a provider's own (its kind's phase)."""

    phase: str
    ref: str  #: the image reference in the store
    target: str  #: the reference, or the artefact's path ("" when it goes to the provider's cache)
    instance_id: str
    providers: set[str] = field(default_factory=set)
    build_dataset: str | None = None  #: store phase: built locally by this dataset
    #: the row an official image is built from offline (``--build``; its artefact: never asked of a
    #: registry), and the benchmark whose recipe builds it
    build_instance: Instance | None = None
    build_by: Benchmark | None = None
    from_registry: bool = False  #: a provider's artefact made from the registry rather than the store
    kind: ArtefactKind | None = None  #: who makes it (None: the store)
    needs: int = 0  #: bytes kept when done
    transient: int = 0  #: bytes needed only while it is made
    size_known: bool = True
    status: Status = "pending"
    seconds: float = 0.0
    error: str = ""
    #: What the estimate had to assume (a size neither the store nor the registry could tell).
    note: str = ""
    reason: str = ""  #: unbuildable: the kind of reason (python, mirror, commit, environment.yml, ...)

    def row(self) -> dict[str, Any]:
        cache = self.kind.cache_name if self.kind is not None else "cache"
        return {
            "phase": self.phase,
            "instance_id": self.instance_id,
            "image": self.target or f"{self.ref} ({cache})",
            "providers": ",".join(sorted(self.providers)),
            "status": self.status,
            "est_mb": round((self.needs + self.transient) / 2**20),
            "seconds": round(self.seconds, 1),
            "error": (self.error or self.note)[-300:],
            **({"reason": self.reason} if self.reason else {}),
        }


@dataclass(frozen=True)
class Needs:
    """Per instance, what a provider needs made ready: the image in the store (``store_image``) and
    its own artefact (``kind``; ``target``: "" for the provider's own cache, else a path)."""

    store_image: bool = False
    kind: ArtefactKind | None = None
    target: str = ""
    #: the artefact is made from the registry, not from the store
    from_registry: bool = False


@dataclass(frozen=True)
class Place:
    """Disk a job takes on the filesystem holding ``path``: ``kept`` when done, ``transient`` while made."""

    path: Path
    what: str
    kept: int
    transient: int


@dataclass(frozen=True)
class MakeOptions:
    attempts: int = 3
    backoff: float = 5.0
    timeout: float = 3600.0


class ArtefactKind(ABC):
    """A provider's own artefact, made from an image (in the store or a registry)."""

    phase: ClassVar[str]  #: the jobs' phase (a short word)
    title: ClassVar[str]  #: the phase's progress title
    cache_name: ClassVar[str] = "cache"  #: how a job for the provider's own cache is shown

    def key(self, needs: Needs, ref: str) -> str:
        """Jobs of one key are made once (one path, or one cached conversion of ``ref``)."""
        return needs.target or f"cache:{ref}"

    def clean_stale(self, jobs: list[ImageJob]) -> list[str]:
        """Remove what killed preparations of these jobs left; the paths removed."""
        return []

    @abstractmethod
    def present(self, job: ImageJob) -> bool:
        """Whether the job's artefact is there already (nothing to do)."""

    @abstractmethod
    def estimate(self, job: ImageJob, unpacked: int, compressed: int | None) -> None:
        """Fill in ``job.needs``/``job.transient`` from its image's size."""

    @abstractmethod
    def places(self, job: ImageJob) -> list[Place]:
        """Where the job takes disk."""

    @abstractmethod
    async def make(self, job: ImageJob, options: MakeOptions) -> None:
        """Make the artefact (set ``job.status``), or raise an :class:`~anyswe.errors.AnysweError`."""
