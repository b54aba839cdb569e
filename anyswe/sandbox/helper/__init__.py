"""``anyswe-exec``: the static helper every sandbox runs its commands and file operations through.

Built once per source version from ``anyswe-exec.c`` with the host's C compiler (``-static``, so it
runs in any image whatever its libc), cached under ``$ANYSWE_CACHE/bin``, and bind-mounted
read-only at :data:`HELPER_PATH` in every sandbox. It is what makes docker and apptainer behave the
same: working directory, user switch, timeout of the whole process group, exit codes (128+N for a
signal, 126/127), environment and argument files, typed file errors (see the C source).
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path

from anyswe.config import cache_dir
from anyswe.errors import RuntimeNotAvailable

#: Where the helper is mounted inside every sandbox.
HELPER_PATH = "/.anyswe/bin/anyswe-exec"
_SOURCE = Path(__file__).with_name("anyswe-exec.c")


def _compiler() -> str:
    for cc in (os.environ.get("CC", ""), "cc", "gcc", "clang"):
        if cc and shutil.which(cc):
            return cc
    raise RuntimeNotAvailable(
        "anyswe builds a small static helper for its sandboxes and needs a C compiler with a static libc "
        "(Debian: apt-get install gcc libc6-dev; scripts/provision.sh installs them)"
    )


@cache
def helper_binary() -> Path:
    """The compiled helper for this source (built on first use, then reused by every process)."""
    source = _SOURCE.read_bytes()
    target = cache_dir() / "bin" / f"anyswe-exec-{hashlib.sha256(source).hexdigest()[:16]}"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.is_file():
            return target
        cc = _compiler()
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            out = Path(tmp) / "anyswe-exec"
            r = subprocess.run(
                [cc, "-static", "-O2", "-o", str(out), str(_SOURCE)], capture_output=True, text=True, check=False
            )
            if r.returncode != 0:
                raise RuntimeNotAvailable(
                    f"building the sandbox helper with {cc} failed (a static libc is needed: "
                    f"Debian's libc6-dev):\n{r.stderr[-2000:]}"
                )
            out.chmod(0o755)
            os.replace(out, target)  # atomic: no process ever mounts half a binary
    return target


async def ensure_helper() -> Path:
    """:func:`helper_binary` off the event loop."""
    return await asyncio.to_thread(helper_binary)
