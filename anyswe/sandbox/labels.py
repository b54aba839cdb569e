"""Who owns a sandbox: the labels every sandbox carries, and ``gc`` of the ones whose owner is gone.

Every container and instance anyswe starts is named ``anyswe-<hex>`` and labelled with the run,
the task, the session (``ANYSWE_SESSION``, so a test session can check its own leaks while another
shares the runtime) and its owner, ``<host>:<pid>`` of the process that started it.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from anyswe.sandbox.provider import SandboxProvider

NAME_PREFIX = "anyswe-"
LABEL_MANAGED = "anyswe.managed"
LABEL_RUN = "anyswe.run_id"
LABEL_TASK = "anyswe.task_id"
LABEL_PHASE = "anyswe.phase"
LABEL_SESSION = "anyswe.session"
LABEL_OWNER = "anyswe.owner"


def current_session() -> str:
    return os.environ.get("ANYSWE_SESSION", "")


def current_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def owner_alive(owner: str | None) -> bool:
    """Whether the process named by an owner label still runs on this host."""
    if not owner or ":" not in owner:
        return False
    host, _, pid = owner.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class Collected:
    """What a gc found: removed sandboxes, and those kept because their owner cannot be told."""

    removed: list[str] = field(default_factory=list)
    unknown_owner: list[str] = field(default_factory=list)


async def collect(
    provider: SandboxProvider[Any], *, session: str | None, include_live: bool, force: bool = False
) -> Collected:
    """Remove ``provider``'s sandboxes whose owner is gone (of one ``session`` if given).

    A sandbox whose labels cannot be read (its owner unknown) is reported, not removed, unless ``force``:
    it may belong to a live process whose state lives elsewhere.
    """
    out = Collected()
    for item, labels in (await provider.sandboxes()).items():
        if labels is None and not force:
            out.unknown_owner.append(item)
            continue
        labels = labels or {}
        if session is not None and labels.get(LABEL_SESSION) != session:
            continue
        if not include_live and owner_alive(labels.get(LABEL_OWNER)):
            continue
        await provider.remove(item)
        out.removed.append(item)
    return out


async def gc(
    providers: list[str] | None = None, *, session: str | None = None, include_live: bool = False, force: bool = False
) -> dict[str, Collected]:
    """Remove leftover anyswe containers, instances and overlays; what was removed and kept, per provider.

    A sandbox whose owning process still runs on this host is not a leftover and is kept (unless
    ``include_live``): gc is safe to run beside a live experiment; so is one whose owner cannot be
    told (unless ``force``). ``session`` limits it to the sandboxes of one ``ANYSWE_SESSION``. A
    provider whose runtime is missing is skipped.
    """
    from anyswe.errors import RuntimeNotAvailable
    from anyswe.sandbox import get_provider, provider_names

    found: dict[str, Collected] = {}
    for name in providers or provider_names():
        provider = get_provider(name)
        try:
            await provider.check()
        except RuntimeNotAvailable:
            continue
        found[name] = await collect(provider, session=session, include_live=include_live, force=force)
    return found


def scratch_prefix() -> str:
    """Host scratch directories of a sandbox are named after their owner's pid (gc removes a dead one's)."""
    return f"anyswe-sbx-{os.getpid()}-"


def collect_scratch() -> list[str]:
    """Remove the host scratch directories that a killed anyswe process left in the temp directory."""
    removed = []
    for path in Path(tempfile.gettempdir()).glob("anyswe-sbx-*"):
        pid = path.name.split("-")[2]
        if path.is_dir() and not owner_alive(f"{socket.gethostname()}:{pid}"):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(str(path))
    return removed
