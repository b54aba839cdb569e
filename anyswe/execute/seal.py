"""Seal the task's repository before the agent starts: no future of it in the agent's sandbox.

A task image's repository must hold nothing after the base commit: no later commits reachable from
a branch, tag or remote ref, no reflog entry, no unreachable object (the fix or the tests, left by
how the image was made). swebench 4.x images are built that way; images made otherwise (older
harness versions, other datasets, hand-made ones) may not be. Only a repository that is not sealed
pays for the clean-up (its overlay, not the image).

Whether a repository is sealed is a property of what its sandbox was started from: once one sandbox
of an image (its ``image_identity``: the docker image id it runs, the SIF file) was found sealed,
the worker's later sandboxes of it skip the check (:class:`SealedImages`), which on a large
repository walks every object (``git prune --dry-run``). A worker given a store (the cache
directory's ``seals/``) keeps sealed findings there, so later runs skip the check too: the identity
is a content digest (docker) or the SIF file's device, inode, size and mtime, so a changed image is
a new key, and the key includes the script's own hash. On the real Verified tier that is about a
second of every task's 12 (bench/grading_throughput.py), every run, since each instance has its
own image. A repository that had to be cleaned is checked, and cleaned, in every sandbox: the
clean-up lives in that sandbox's overlay.

The seal also finds the work tree as the image ships it. An image's own build may change tracked
files (jq's regenerates ``src/parser.c`` from ``parser.y`` with the image's bison) or leave files no
``.gitignore`` names; a capture against HEAD would hand those in as the agent's change, and graded in
a fresh sandbox of the image, which has them already, they break the patch. That work tree is the
capture's baseline (:attr:`Seal.baseline`), and what it changes is recorded with the task, never in
its patch.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import os
import tempfile
import weakref
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from anyswe.errors import InfraError, WrongImage
from anyswe.execute.capture import CLEAN_GIT

if TYPE_CHECKING:
    from anyswe.sandbox import Sandbox

# The work tree as the image ships it, against commit $1: `baseline <tree>` and the paths it changes
# (`shipped <path>`, at most 201), or nothing when it is $1's own tree. Read as the capture reads the
# agent's work (a git directory of its own, no config of the repository's), but the objects go to the
# repository's own store, unreachable as `git stash` leaves them (a gc keeps them two weeks), so the
# capture finds the tree after the agent. The repository's index, copied, gives git the files' stat
# data (size and whole-second mtime: a SIF keeps those, not inodes), so only changed files are read;
# an index the copy cannot use (a split index) is built from the commit instead.
_SHIPPED = r"""
shipped() (
  # Each step checked: `set -e` does nothing in a function called before `||`.
  start=$1
  objects=$(cd "$(git rev-parse --git-common-dir)" && pwd -P)/objects || exit 1
  index=$(git rev-parse --git-dir)/index || exit 1
  tmp=$(mktemp -d /tmp/.anyswe-baseline.XXXXXX) || exit 1
  trap 'rm -rf "$tmp"' EXIT
  export HOME="$tmp" XDG_CONFIG_HOME="$tmp"
  git init -q --bare --template= "$tmp/git" || exit 1
  export GIT_DIR="$tmp/git" GIT_WORK_TREE="$PWD" GIT_INDEX_FILE="$tmp/index" GIT_OBJECT_DIRECTORY="$objects"
  g() { git -c core.bare=false -c core.checkStat=minimal -c core.trustctime=false "$@"; }
  { cp "$index" "$tmp/index" && g read-tree -m "$start"; } 2>/dev/null \
    || { rm -f "$tmp/index"; g read-tree "$start"; } || exit 1
  g add -A -- . || exit 1
  tree=$(g write-tree) && own=$(g rev-parse "$start^{tree}") || exit 1
  [ "$tree" = "$own" ] && exit 0
  echo "baseline $tree"
  g diff-tree -r --no-renames --name-only "$start" "$tree" | head -n 201 | sed "s/^/shipped /"
)
"""

# $1: the base commit; git runs with anyswe's clean configuration (capture.CLEAN_GIT). The starting
# point is the commit HEAD is at (swebench's "SWE-bench" setup commit in an official image, or the
# base commit itself): what lies between the base and it is
# reported for the host to judge, then refs whose commit is not HEAD or one of its ancestors are
# deleted (as swebench's own image script deletes later tags), then reflogs, then every unreachable
# object. A reflog counts only if it reaches a commit HEAD does not: an official image's reflog holds
# its clone and its setup commit, HEAD and its past, and cleaning it up (a `git gc` of the whole
# repository) cost each real Verified task about a second, in every sandbox, for nothing. Output,
# one item a line: head, commit (base..HEAD, at most 50), file (base..HEAD, as
# unidiff names them on the host: unquoted unless a name holds a control character; at most 20001:
# more than 20000 means "not all listed"), the work tree as shipped (_SHIPPED), then the finding.
_SEAL = (
    CLEAN_GIT
    + _SHIPPED
    + r"""
base=$1
if ! git rev-parse -q --verify "$base^{commit}" >/dev/null 2>&1; then
  if why=$(git rev-parse --git-dir 2>&1); then why="the base commit is not in it"; fi
  echo "no-repository $(printf '%s\n' "$why" | head -n 1)"; exit 0
fi
head=$(git rev-parse -q --verify "HEAD^{commit}" 2>/dev/null) || { echo "no-head"; exit 0; }
echo "head $head"
git merge-base --is-ancestor "$base" "$head" || { echo "not-descendant"; exit 0; }
git log --format='commit %H %s' -n 50 "$base..$head" --
git -c core.quotePath=false diff --no-ext-diff --no-renames --name-only "$base" "$head" -- \
  | head -n 20001 | sed "s/^/file /"
future=$(git rev-list -n 1 --all --not "$head" --)
reflogs=$( { git reflog --all --format=%H 2>/dev/null | sort -u; echo "^$head"; } \
  | git rev-list --stdin --ignore-missing -n 1 2>/dev/null || echo unreadable)
unreachable=$(git prune --dry-run --expire=now | head -n 1)
if [ -z "$future" ] && [ -z "$reflogs" ] && [ -z "$unreachable" ]; then
  shipped "$head" || { echo "no-baseline"; exit 0; }
  echo "sealed"; exit 0
fi
git for-each-ref --format='%(refname)' | while read -r ref; do
  git merge-base --is-ancestor "$ref" "$head" 2>/dev/null || git update-ref -d "$ref"
done
git reflog expire --expire=now --all
git -c gc.auto=0 gc --prune=now --quiet
shipped "$head" || { echo "no-baseline"; exit 0; }
echo "cleaned"
"""
)


_MAX_FILES = 20000


@dataclass(frozen=True)
class Seal:
    """What the seal check found in a sandbox's repository before its agent started."""

    #: "sealed" (nothing after the starting point) or "cleaned" (removed from this sandbox's overlay).
    finding: str
    #: The starting point: the commit HEAD is at (the image's setup commit, or the base commit).
    head: str
    #: The commits from the base commit (excluded) to HEAD, newest first, as "<sha> <subject>".
    commits: tuple[str, ...] = ()
    #: The files those commits change.
    files: tuple[str, ...] = ()
    files_truncated: bool = False
    #: The work tree as the image ships it, when it is not HEAD's tree (its build changed tracked files
    #: or left new ones): the tree the agent's patch is captured against. "": HEAD's tree is it.
    baseline: str = ""
    #: The paths that tree changes from HEAD's (at most 201 listed: 201 means more), the image's doing.
    shipped: tuple[str, ...] = ()

    @property
    def start(self) -> str:
        """What the agent's patch is captured against: the work tree as shipped, or HEAD's commit."""
        return self.baseline or self.head


def parse_seal(stdout: str, workdir: str, base_commit: str) -> Seal:
    """The seal script's output as a :class:`Seal`; a repository that is not the task's is :class:`WrongImage`."""
    lines = stdout.splitlines()
    items: dict[str, list[str]] = {"head": [], "commit": [], "file": [], "baseline": [], "shipped": []}
    finding, detail = "", ""
    for line in lines:
        word, _, rest = line.partition(" ")
        if word in items:
            items[word].append(rest)
        else:
            finding, detail = word, rest
    head = items["head"][0] if items["head"] else ""
    if finding == "no-repository":
        raise WrongImage(
            f"no repository at {workdir} holds the task's base commit {base_commit} ({detail}): "
            "the sandbox's image is not this instance's, so its agent does not start"
        )
    if finding == "no-head":
        raise WrongImage(f"the repository at {workdir} has no commit checked out: the image is not this instance's")
    if finding == "not-descendant":
        raise WrongImage(
            f"the repository at {workdir} is checked out at {head}, which does not descend from the task's base "
            f"commit {base_commit}: the sandbox's image is not this instance's, so its agent does not start"
        )
    if finding == "no-baseline":
        raise WrongImage(f"git cannot read the work tree at {workdir} as the image ships it: the image is broken")
    if finding not in ("sealed", "cleaned") or not head:
        raise InfraError(f"sealing the repository in {workdir} said {stdout[-300:]!r}")
    files = items["file"]
    return Seal(
        finding,
        head,
        tuple(items["commit"]),
        tuple(files[:_MAX_FILES]),
        len(files) > _MAX_FILES,
        baseline=items["baseline"][0] if items["baseline"] else "",
        shipped=tuple(items["shipped"]),
    )


def check_starting_point(seal: Seal, base_commit: str, forbidden: set[str], workdir: str = "/testbed") -> None:
    """Refuse a repository whose commits after the base touch a file the reference or test patch touches.

    Such commits (an image's setup commit editing a tracked file, say) would give the agent part of
    the answer, or change what the tests see: the image is not this instance's. ``forbidden`` is
    computed on the host from the patches, which never enter the sandbox.
    """
    if seal.head == base_commit or not seal.commits:
        return
    clash = sorted(forbidden & set(seal.files))
    if clash or (seal.files_truncated and forbidden):
        commits = "; ".join(seal.commits[:5]) + (" ..." if len(seal.commits) > 5 else "")
        files = ", ".join(clash[:10]) if clash else "more than 20000 files, not all checked"
        raise WrongImage(
            f"the repository at {workdir} is at {seal.head}, {len(seal.commits)} commit(s) after the task's base "
            f"commit {base_commit} ({commits}), and they change files the reference or test patch touches "
            f"({files}): the sandbox's image is not this instance's, so its agent does not start"
        )


async def seal_repository(sandbox: Sandbox[Any], workdir: str, base_commit: str) -> Seal:
    """Make sure the repository at ``workdir`` holds nothing after its starting point (HEAD).

    Raises :class:`WrongImage` when the repository is missing, lacks the base commit, or HEAD does
    not descend from it: the sandbox then is not the task's, and an agent there could see code of
    another commit or make a patch that cannot be graded.
    """
    r = await sandbox.exec(["bash", "-c", _SEAL, "seal", base_commit], workdir=workdir, timeout=900)
    if r.exit_code != 0:
        raise InfraError(f"sealing the repository in {workdir} failed (exit {r.exit_code}): {r.stderr[-500:]}")
    return parse_seal(r.stdout, workdir, base_commit)


# $1: the tree a stored finding names. Its objects are in the store of the sandbox that found it; a
# later sandbox of the image writes them again into its own (the same work tree gives the same tree).
_BASELINE = (
    CLEAN_GIT
    + _SHIPPED
    + r"""
git cat-file -e "$1^{tree}" 2>/dev/null && { echo "baseline $1"; exit 0; }
shipped "$(git rev-parse HEAD)" || exit 1
"""
)


async def write_baseline(sandbox: Sandbox[Any], workdir: str, seal: Seal) -> Seal:
    """``seal`` (a finding this sandbox may not have made) with its baseline's objects in this sandbox's
    repository, so the capture can read it; a work tree that is not the finding's is this sandbox's own."""
    if not seal.baseline:
        return seal
    r = await sandbox.exec(["bash", "-c", _BASELINE, "baseline", seal.baseline], workdir=workdir, timeout=900)
    if r.exit_code != 0:
        raise WrongImage(
            f"git cannot read the work tree at {workdir} as the image ships it (exit {r.exit_code}): "
            f"{r.stderr.strip()[-300:]}"
        )
    found = [line.partition(" ")[2] for line in r.stdout.splitlines() if line.startswith("baseline ")]
    return dataclasses.replace(seal, baseline=found[0] if found else "")


class SealedImages:
    """Which images' repositories were found sealed, so each is checked once per process.

    Sandboxes of one image that start together wait for the first one's check rather than each
    walking the repository at once; if it was not sealed, each runs its own check and clean-up.
    """

    def __init__(self, store: Path | None = None) -> None:
        #: Where sealed findings outlive the process (None: memory only).
        self.store = store
        self._sealed: dict[Hashable, Seal] = {}
        self._unsealed: set[Hashable] = set()
        # A lock belongs to one event loop; a worker used from successive loops (Jupyter) gets new ones.
        self._locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Hashable, asyncio.Lock]] = (
            weakref.WeakKeyDictionary()
        )

    async def check(self, key: Hashable | None, check: Callable[[], Awaitable[Seal]]) -> Seal:
        """``check()``'s finding, or the earlier one if ``key`` (None: not cacheable) was found sealed before.

        A sealed image's finding (its HEAD, the commits after the base) is a fact of the image, so
        it is the same for every sandbox of it.
        """
        if key is None or key in self._unsealed:
            return await check()
        if key in self._sealed:
            return self._sealed[key]
        if (stored := self._load(key)) is not None:
            self._sealed[key] = stored
            return stored
        locks = self._locks.setdefault(asyncio.get_running_loop(), {})
        async with locks.setdefault(key, asyncio.Lock()):
            if key in self._sealed:
                return self._sealed[key]
            if key not in self._unsealed:
                try:
                    found = await check()
                except BaseException:
                    # A check that failed (a killed sandbox, a timeout, a wrong image) is not cached;
                    # the others check for themselves, at once rather than one after another.
                    self._unsealed.add(key)
                    raise
                if found.finding == "sealed":
                    self._sealed[key] = found
                    self._save(key, found)
                else:
                    self._unsealed.add(key)
                return found
        return await check()

    def _path(self, key: Hashable) -> Path | None:
        if self.store is None:
            return None
        digest = hashlib.sha256(f"{_SEAL_HASH}\0{key!r}".encode()).hexdigest()
        return self.store / f"{digest[:32]}.json"

    def _load(self, key: Hashable) -> Seal | None:
        """A sealed finding stored for ``key`` by an earlier process (None: none, or unreadable)."""
        path = self._path(key)
        if path is None:
            return None
        try:
            row = json.loads(path.read_text())
            if row.get("key") != repr(key) or row.get("finding") != "sealed":
                return None
            return Seal(
                finding=str(row["finding"]),
                head=str(row["head"]),
                commits=tuple(str(c) for c in row["commits"]),
                files=tuple(str(f) for f in row["files"]),
                files_truncated=bool(row["files_truncated"]),
                baseline=str(row["baseline"]),
                shipped=tuple(str(f) for f in row["shipped"]),
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None  # no finding, or a torn one: check again

    def _save(self, key: Hashable, seal: Seal) -> None:
        path = self._path(key)
        if path is None:
            return
        with contextlib.suppress(OSError):  # a store that cannot be written costs the next run a check
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".seal-")
            with os.fdopen(fd, "w") as fh:
                json.dump({"key": repr(key), **dataclasses.asdict(seal)}, fh)
            os.replace(tmp, path)


#: Part of a stored finding's key: a changed seal script checks every image again.
_SEAL_HASH = hashlib.sha256(_SEAL.encode()).hexdigest()[:16]
