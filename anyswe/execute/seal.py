"""Seal the task's repository before the agent starts: no future of it in the agent's sandbox.

A task image's repository must hold nothing after the base commit: no later commits reachable from
a branch, tag or remote ref, no reflog entry, no unreachable object (the fix or the tests, left by
how the image was made). swebench 4.x images are built that way; images made otherwise (older
harness versions, other datasets, hand-made ones) may not be. Only a repository that is not sealed
pays for the clean-up (its overlay, not the image).

Whether a repository is sealed is a property of what its sandbox was started from: once one sandbox
of an image (its ``image_identity``: the docker image id it runs, the SIF file) was found sealed,
the worker's later sandboxes of it skip the check (:class:`SealedImages`), which on a large
repository walks every object (``git prune --dry-run``). A repository that had to be cleaned is
checked, and cleaned, in every sandbox: the clean-up lives in that sandbox's overlay.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable, Hashable
from typing import TYPE_CHECKING, Any

from anyswe.errors import InfraError

if TYPE_CHECKING:
    from anyswe.sandbox import Sandbox

# $1: the base commit. Refs whose commit is not the base or one of its ancestors are deleted (as
# swebench's own image script deletes later tags), then reflogs, then every unreachable object.
_SEAL = r"""
base=$1
if ! git rev-parse -q --verify "$base^{commit}" >/dev/null 2>&1; then
  if why=$(git rev-parse --git-dir 2>&1); then why="the base commit is not in it"; fi
  echo "no-repository $(printf '%s\n' "$why" | head -n 1)"; exit 0
fi
head=$(git rev-parse HEAD 2>/dev/null)
[ "$head" = "$(git rev-parse "$base^{commit}")" ] || { echo "head-not-at-base ${head:-none}"; exit 0; }
future=$(git rev-list -n 1 --all --not "$base" --)
reflogs=$(git reflog --all --format=%H 2>/dev/null | head -n 1)
unreachable=$(git prune --dry-run --expire=now | head -n 1)
if [ -z "$future" ] && [ -z "$reflogs" ] && [ -z "$unreachable" ]; then echo "sealed"; exit 0; fi
git for-each-ref --format='%(refname)' | while read -r ref; do
  git merge-base --is-ancestor "$ref" "$base" 2>/dev/null || git update-ref -d "$ref"
done
git reflog expire --expire=now --all
git -c gc.auto=0 gc --prune=now --quiet
echo "cleaned"
"""


async def seal_repository(sandbox: Sandbox[Any], workdir: str, base_commit: str) -> str:
    """Make sure the repository at ``workdir`` holds nothing after ``base_commit``: "sealed" or "cleaned".

    Raises :class:`InfraError` when it cannot: the repository is missing, lacks the base commit, or
    is checked out elsewhere. The sandbox then is not the task's (a wrong image for the instance),
    and an agent there could see code of another commit or make a patch that cannot be graded.
    """
    r = await sandbox.exec(["bash", "-c", _SEAL, "seal", base_commit], workdir=workdir, timeout=900)
    if r.exit_code != 0:
        raise InfraError(f"sealing the repository in {workdir} failed (exit {r.exit_code}): {r.stderr[-500:]}")
    finding, _, detail = (r.stdout.strip().splitlines() or [""])[-1].partition(" ")
    if finding == "no-repository":
        raise InfraError(
            f"no repository at {workdir} holds the task's base commit {base_commit} ({detail}): "
            "the sandbox's image is not this instance's, so its agent does not start"
        )
    if finding == "head-not-at-base":
        raise InfraError(
            f"the repository at {workdir} is checked out at {detail}, not at the task's base commit "
            f"{base_commit}: the sandbox's image is not this instance's, so its agent does not start"
        )
    if finding not in ("sealed", "cleaned"):
        raise InfraError(f"sealing the repository in {workdir} said {r.stdout[-300:]!r}: {r.stderr[-300:]}")
    return finding


class SealedImages:
    """Which images' repositories were found sealed, so each is checked once per process.

    Sandboxes of one image that start together wait for the first one's check rather than each
    walking the repository at once; if it was not sealed, each runs its own check and clean-up.
    """

    def __init__(self) -> None:
        self._sealed: set[Hashable] = set()
        self._unsealed: set[Hashable] = set()
        # A lock belongs to one event loop; a worker used from successive loops (Jupyter) gets new ones.
        self._locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Hashable, asyncio.Lock]] = (
            weakref.WeakKeyDictionary()
        )

    async def check(self, key: Hashable | None, check: Callable[[], Awaitable[str]]) -> str:
        """``check()``'s finding, or "sealed" if ``key`` (None: not cacheable) was found sealed before."""
        if key is None or key in self._unsealed:
            return await check()
        if key in self._sealed:
            return "sealed"
        locks = self._locks.setdefault(asyncio.get_running_loop(), {})
        async with locks.setdefault(key, asyncio.Lock()):
            if key in self._sealed:
                return "sealed"
            if key not in self._unsealed:
                try:
                    found = await check()
                except BaseException:
                    # A check that failed (a killed sandbox, a timeout) tells nothing about the image;
                    # the others check for themselves, at once rather than one after another.
                    self._unsealed.add(key)
                    raise
                (self._sealed if found == "sealed" else self._unsealed).add(key)
                return found
        return await check()
