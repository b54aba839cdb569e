"""Who owns a sandbox: the labels every sandbox carries, and ``gc`` of the ones whose owner is gone.

Every container and instance anyswe starts is named ``anyswe-<hex>`` and labelled with the run,
the task, the session (``ANYSWE_SESSION``, so a test session can check its own leaks while another
shares the runtime) and its owner, ``<host>:<pid>`` of the process that started it.
"""

from __future__ import annotations

import os
import socket
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from anyswe.sandbox.provider import SandboxProvider

NAME_PREFIX = "anyswe-"
LABEL_MANAGED = "anyswe.managed"
LABEL_RUN = "anyswe.run_id"
LABEL_TASK = "anyswe.task_id"
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


async def collect(provider: SandboxProvider[Any], *, session: str | None, include_live: bool) -> list[str]:
    """Remove ``provider``'s sandboxes whose owner is gone (of one ``session`` if given); their names."""
    gone = []
    for item, labels in (await provider.sandboxes()).items():
        labels = labels or {}
        if session is not None and labels.get(LABEL_SESSION) != session:
            continue
        if not include_live and owner_alive(labels.get(LABEL_OWNER)):
            continue
        await provider.remove(item)
        gone.append(item)
    return gone


async def gc(
    providers: list[str] | None = None, *, session: str | None = None, include_live: bool = False
) -> dict[str, list[str]]:
    """Remove leftover anyswe containers, instances and overlays; returns what was removed.

    A sandbox whose owning process still runs on this host is not a leftover and is kept (unless
    ``include_live``): gc is safe to run beside a live experiment. ``session`` limits it to the
    sandboxes of one ``ANYSWE_SESSION``. A provider whose runtime is missing is skipped.
    """
    from anyswe.errors import RuntimeNotAvailable
    from anyswe.sandbox import get_provider, provider_names

    removed: dict[str, list[str]] = {}
    for name in providers or provider_names():
        provider = get_provider(name)
        try:
            await provider.check()
        except RuntimeNotAvailable:
            continue
        removed[name] = await collect(provider, session=session, include_live=include_live)
    return removed
