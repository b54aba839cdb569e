"""``example-kata``: a benchmark as a plugin. Its rows ship with it (tasks.json), its task images are
built here on anyswe's base image, and anyswe's generic ``pytest`` harness grades it.

Each task is written as files: ``base`` (the repository at its base commit), ``fix`` (the files as
the reference fix leaves them) and ``tests`` (as the test patch leaves them). The row's
``base_commit``, ``patch`` and ``test_patch`` are made from them with git, deterministically (a fixed
identity and date), and cached under anyswe's cache directory. These tasks are written for the
example, not taken from a real project: a real benchmark plugin would build from its own recipe.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path
from typing import Any, ClassVar

from anyswe.config import cache_dir
from anyswe.datasets import Benchmark
from anyswe.errors import DatasetError

TASKS = Path(__file__).with_name("tasks.json")
_ROW_FIELDS = ("instance_id", "repo", "problem_statement", "FAIL_TO_PASS", "PASS_TO_PASS")
# A fixed identity and date make the base commit a function of the files alone; no user or system
# git config may change what is committed.
_GIT_ENV = {
    "GIT_AUTHOR_NAME": "kata",
    "GIT_AUTHOR_EMAIL": "kata@example.invalid",
    "GIT_COMMITTER_NAME": "kata",
    "GIT_COMMITTER_EMAIL": "kata@example.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+00:00",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+00:00",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def _git(repo: Path, *args: str) -> str:
    r = subprocess.run(["git", *args], cwd=repo, env={**os.environ, **_GIT_ENV}, capture_output=True, text=True)
    if r.returncode != 0:
        raise DatasetError(f"example-kata: git {' '.join(args)} failed in {repo}: {r.stderr.strip()}")
    return r.stdout


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _patch(repo: Path, files: dict[str, str]) -> str:
    """The patch that writes ``files`` over the base commit, made in a throwaway copy: the repository
    that goes into the image must not hold the answer's objects (``git fsck --lost-found`` finds them)."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "work"
        shutil.copytree(repo, work, symlinks=True)
        _write(work, files)
        _git(work, "add", "-A")
        return _git(work, "diff", "--cached", "--binary", "HEAD")


@cache
def _tasks() -> dict[str, dict[str, Any]]:
    return {t["instance_id"]: t for t in json.loads(TASKS.read_text())}


def materialize(instance_id: str) -> tuple[dict[str, Any], Path]:
    """The task's row and a directory holding ``testbed/``, its repository with only the base commit."""
    task = _tasks().get(instance_id)
    if task is None:
        raise DatasetError(f"example-kata has no task {instance_id!r}")
    digest = hashlib.sha256(json.dumps(task, sort_keys=True).encode()).hexdigest()[:16]
    out = cache_dir() / "plugins" / "example-kata" / f"{instance_id}-{digest}"
    if (out / "row.json").is_file():
        return json.loads((out / "row.json").read_text()), out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{instance_id}-", dir=out.parent))
    try:
        repo = tmp / "testbed"
        repo.mkdir()
        _write(repo, task["base"])
        _git(repo, "init", "-q", "-b", "main")
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", "base")
        row = {k: task[k] for k in _ROW_FIELDS}
        row |= {
            "base_commit": _git(repo, "rev-parse", "HEAD").strip(),
            "patch": _patch(repo, task["fix"]),
            "test_patch": _patch(repo, task["tests"]),
            "version": "1",
        }
        (tmp / "row.json").write_text(json.dumps(row, indent=1))
        try:
            os.rename(tmp, out)  # whole or not at all: another process may be making the same
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return json.loads((out / "row.json").read_text()), out


class KataBenchmark(Benchmark):
    name: ClassVar[str] = "example-kata"
    aliases: ClassVar[tuple[str, ...]] = ("kata",)
    harness: ClassVar[str] = "pytest"
    builds_images: ClassVar[bool] = True

    def rows(self) -> list[dict[str, Any]]:
        return [materialize(instance_id)[0] for instance_id in _tasks()]

    def build_context(self, instance_id: str, base_image: str) -> tuple[Path, str]:
        _, out = materialize(instance_id)
        dockerfile = f"FROM {base_image}\nCOPY testbed /testbed\nWORKDIR /testbed\n"
        path = out / "Dockerfile"
        if not path.is_file() or path.read_text() != dockerfile:
            # Renamed into place: another process's build may be reading the one there now.
            fd, tmp = tempfile.mkstemp(prefix=".Dockerfile-", dir=out)
            with os.fdopen(fd, "w") as fh:
                fh.write(dockerfile)
            os.replace(tmp, path)
        tag = hashlib.sha256(f"{out.name}\0{dockerfile}".encode()).hexdigest()[:12]
        return path, f"anyswe-example/{instance_id.replace('__', '_1776_').lower()}:{tag}"
