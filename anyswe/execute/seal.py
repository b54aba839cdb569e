"""Seal the task's repository before the agent starts: no future of it in the agent's sandbox.

A task image's repository must hold nothing after the base commit: no later commits reachable from
a branch, tag or remote ref, no reflog entry, no unreachable object (the fix or the tests, left by
how the image was made). swebench 4.x images are built that way; images made otherwise (older
harness versions, other datasets, hand-made ones) may not be. The check is cheap and runs in every
agent sandbox; only a repository that is not sealed pays for the clean-up (its overlay, not the image).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from anyswe.errors import InfraError

if TYPE_CHECKING:
    from anyswe.sandbox import Sandbox

# $1: the base commit. Refs whose commit is not the base or one of its ancestors are deleted (as
# swebench's own image script deletes later tags), then reflogs, then every unreachable object.
_SEAL = r"""
base=$1
git rev-parse -q --verify "$base^{commit}" >/dev/null 2>&1 || { echo "no-repository"; exit 0; }
[ "$(git rev-parse HEAD 2>/dev/null)" = "$(git rev-parse "$base^{commit}")" ] || { echo "head-not-at-base"; exit 0; }
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
    """Make sure the repository at ``workdir`` holds nothing after ``base_commit``; what was found."""
    r = await sandbox.exec(["bash", "-c", _SEAL, "seal", base_commit], workdir=workdir, timeout=900)
    if r.exit_code != 0:
        raise InfraError(f"sealing the repository in {workdir} failed (exit {r.exit_code}): {r.stderr[-500:]}")
    return r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
