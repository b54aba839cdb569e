"""How much disk ``anyswe prepare images`` will need, per filesystem, checked before anything is made.

Sizes come from the local image store (an image already pulled), else from the registry manifest
(the compressed layers, unpacked by a measured factor); a provider's own artefact says what it needs
and where from the image's size (its kind's ``estimate`` and ``places``). What exists already needs
nothing.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from anyswe.errors import InsufficientDisk
from anyswe.prepare.registry import remote_image
from anyswe.sandbox.store import image_size, store_root

if TYPE_CHECKING:
    from anyswe.sandbox.artefacts import ImageJob

# Measured on this machine over anyswe's own images (docs/verified.md): a layer unpacks to about
# 2.3x its compressed size.
EXPANSION = 2.5
#: A dataset's own image build adds a few small layers on a local base.
BUILD_BYTES = 64 * 2**20
#: When neither the registry nor the store can tell an image's size (assumed, and reported).
ASSUMED_COMPRESSED = 2 * 2**30


async def estimate(job: ImageJob, store_available: bool) -> None:
    """Fill in ``needs``/``transient`` (and ``status`` for what is already there)."""
    if job.kind is None:
        if store_available and await image_size(job.ref) is not None:
            job.status = "present"
            return
        if job.build_dataset is not None:
            job.needs = BUILD_BYTES
            return
        if job.build_by is not None:
            job.needs = job.build_by.instance_build_bytes
            return
    elif job.kind.present(job):
        job.status = "present"
        return
    unpacked = await image_size(job.ref) if store_available else None
    if unpacked is None and job.build_by is not None:
        # Its image is built in this preparation: nothing to ask a registry, whose copy is not this one.
        unpacked = job.build_by.instance_build_bytes
    compressed = None
    if unpacked is None:
        try:
            compressed = (await remote_image(job.ref, store_cli=store_available)).compressed_bytes
        except LookupError as exc:
            job.size_known = False
            job.note = f"size unknown ({exc}); assumed {ASSUMED_COMPRESSED / 2**30:.0f} GiB compressed"
            compressed = ASSUMED_COMPRESSED
        unpacked = int(compressed * EXPANSION)
    if job.kind is None:
        job.needs, job.transient = unpacked, compressed or 0
    else:
        job.kind.estimate(job, unpacked, compressed)


def _filesystem(path: Path) -> Path:
    """The nearest existing directory of ``path`` (what ``statvfs`` can be asked about)."""
    p = path.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


async def check_disk(
    jobs: list[ImageJob],
    *,
    store_available: bool,
    budget: int | None = None,
    jobs_in_parallel: int = 1,
    refuse: bool = True,
) -> list[dict[str, Any]]:
    """Per filesystem: bytes needed (kept, plus the transient bytes of the builds running at once)
    against bytes free (or ``budget``, if smaller). Raises :class:`InsufficientDisk` naming each short one
    (``refuse=False``, a dry run's: each row says ``short`` instead)."""
    places: dict[int, dict[str, Any]] = {}

    def add(path: Path, what: str, kept: int, transient: int) -> None:
        fs = _filesystem(path)
        dev = os.stat(fs).st_dev
        entry = places.setdefault(dev, {"path": str(fs), "needed": 0, "transient": [], "what": set()})
        entry["needed"] += kept
        entry["transient"].append(transient)
        entry["what"].add(what)

    pending = [j for j in jobs if j.status in ("pending", "buildable")]  # buildable: a dry run's
    root = await store_root() if store_available and any(j.kind is None for j in pending) else Path("/")
    for j in pending:
        if j.kind is None:
            add(root, "stored images", j.needs + j.transient, 0)
        else:
            for place in j.kind.places(j):
                add(place.path, place.what, place.kept, place.transient)
    out, short = [], []
    for entry in places.values():
        largest = sorted(entry["transient"], reverse=True)[:jobs_in_parallel]
        needed = entry["needed"] + sum(largest)
        free = shutil.disk_usage(entry["path"]).free
        usable = min(free, budget) if budget is not None else free
        row = {
            "filesystem": entry["path"],
            "for": ", ".join(sorted(entry["what"])),
            "needed_mb": round(needed / 2**20),
            "free_mb": round(free / 2**20),
            "usable_mb": round(usable / 2**20),
        }
        out.append(row)
        row["short"] = needed > usable
        if needed > usable:
            limit = f"the budget of {budget / 2**20:.0f} MB" if budget is not None and budget < free else "free"
            short.append(
                f"{entry['path']} ({row['for']}): needs about {needed / 2**20:,.0f} MB, "
                f"{usable / 2**20:,.0f} MB {'is' if limit == 'free' else 'within'} {limit}"
            )
    if short and refuse:
        raise InsufficientDisk(
            "not enough disk to prepare these images; nothing was pulled or built:\n  " + "\n  ".join(short)
        )
    return out


__all__ = ["check_disk", "estimate"]
