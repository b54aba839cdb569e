"""Patch capture: everything the agent changed, as the one diff `git apply` takes, whatever it did to git.

The agent owns its sandbox, the repository's ``.git`` included: its config (colour, no prefixes,
less context, an external diff, a textconv, a filter that fails, hooks, an fsmonitor), its
attributes and excludes, even ``.git`` itself. The capture reads none of that. It runs git with no
system or global config and no ``GIT_*`` variable from the sandbox, in a git directory of its own
made for the capture, whose only link to the agent's is the object store (an alternate, for the
starting point's tree); the index is built there from the starting point, then ``git add -A`` of
the working tree. What remains of the repository is what the official repository has: its
tracked ``.gitattributes`` and ``.gitignore`` (no filter or diff driver they name is defined).

A capture that fails with the sandbox alive fails because of the repository's state (no ``.git``,
objects removed): the agent's doing, so its failure, never a masked infrastructure sample.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from anyswe.errors import AgentError

if TYPE_CHECKING:
    from anyswe.sandbox import Sandbox

#: A bash prelude for every git call of anyswe's inside a sandbox: no system or global config, no
#: inherited ``GIT_*`` variable, and the settings that change git's output or run code turned off.
CLEAN_GIT = r"""
for v in $(compgen -e); do case $v in GIT_*) unset "$v";; esac; done
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null GIT_ATTR_NOSYSTEM=1 GIT_NO_REPLACE_OBJECTS=1
export GIT_TERMINAL_PROMPT=0 GIT_OPTIONAL_LOCKS=0
git() {
  command git -c color.ui=never -c diff.noprefix=false -c core.fsmonitor= -c core.hooksPath=/dev/null \
    -c core.quotePath=false -c core.autocrlf=false -c safe.directory='*' "$@"
}
"""

# $1: the starting point; the rest: a pathspec for `git add`. HOME and XDG_CONFIG_HOME point at the
# capture's own directory too (git before 2.32 has no GIT_CONFIG_GLOBAL).
_CAPTURE = (
    CLEAN_GIT
    + r"""
set -e
start=$1; shift
common=$(git rev-parse --git-common-dir)
objects=$(cd "$common" && pwd -P)/objects
tmp=$(mktemp -d /tmp/.anyswe-capture.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export HOME="$tmp" XDG_CONFIG_HOME="$tmp"
git init -q --bare --template= "$tmp/git"
printf '%s\n' "$objects" > "$tmp/git/objects/info/alternates"
export GIT_DIR="$tmp/git" GIT_WORK_TREE="$PWD" GIT_INDEX_FILE="$tmp/index"
git -c core.bare=false read-tree "$start"
git -c core.bare=false add -A "$@"
git -c core.bare=false diff --cached --binary --no-color --no-ext-diff --no-textconv \
  --src-prefix=a/ --dst-prefix=b/ -U3 "$start"
"""
)


class PatchCaptureFailed(AgentError):
    """The repository's own state made the capture fail (the sandbox was alive): the agent's failure."""


async def capture_patch(sandbox: Sandbox[Any], workdir: str, start: str, excludes: tuple[str, ...] = ()) -> str:
    """Everything the agent changed, new files included, as a binary git diff against ``start``.

    ``start`` is the commit the repository was at when the agent began (the image's setup commit
    in a SWE-bench image), not HEAD, so an agent that commits its work is still captured, and not
    the base commit, whose diff would carry the reverse of the image's setup edits. The grader
    applies it to a fresh sandbox of the same image, which has those edits already.
    ``excludes``: paths the agent wrote for itself (its state, its logs), not part of its fix.
    A runtime failure raises an infrastructure error; a failing git, :class:`PatchCaptureFailed`.
    """
    pathspec = ["--", ".", *(f":(exclude){p}" for p in excludes)]
    r = await sandbox.exec(["bash", "-c", _CAPTURE, "capture", start, *pathspec], workdir=workdir, timeout=300)
    if r.exit_code != 0:
        why = "timed out" if r.timed_out else f"exit {r.exit_code}"
        raise PatchCaptureFailed(
            f"patch capture failed ({why}) in a live sandbox, so the repository's own state made it fail: "
            f"{r.stderr.strip()[-500:]}"
        )
    return r.stdout
