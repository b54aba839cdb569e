"""The starting point of a task: the commit the image's HEAD is at, judged against the instance.

The repositories are real: sphinx at the base commit of a Verified instance (``../shared``), set up
the way swebench 4.1.0's repo script sets up an official image (reset to the base, the spec's
``pre_install`` edit of tox.ini, ``git commit --allow-empty -am SWE-bench``). Only the steps that
need the network or an environment (the clone from GitHub, ``pip install -e .``) are left out; the
seal script runs with bash and git on the host rather than in a sandbox.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from anyswe.datasets import load_dataset
from anyswe.datasets.instance import Instance
from anyswe.errors import InfraError, WrongImage
from anyswe.execute.capture import _CAPTURE
from anyswe.execute.seal import _BASELINE, _SEAL, Seal, check_starting_point, parse_seal
from anyswe.execute.task import forbidden_files
from anyswe.grading import diffs
from tests.conftest import SHARED

INSTANCE = "sphinx-doc__sphinx-10323"
GIT = ["git", "-c", "user.name=SWE-bench", "-c", "user.email=setup@swebench.config"]


def _row() -> Instance:
    return load_dataset(path=SHARED / "swebench" / "verified.jsonl").by_id()[INSTANCE]


def _git(repo: Path, *args: str) -> str:
    return subprocess.run([*GIT, *args], cwd=repo, check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def instance() -> Instance:
    return _row()


@pytest.fixture
def repo(tmp_path: Path, instance: Instance) -> Path:
    """/testbed as swebench's repo script leaves it, before its setup commit."""
    mirror = tmp_path / "sphinx.git"
    shutil.copytree(SHARED / "swebench" / "repos" / "sphinx.git", mirror)
    # The shared copy is read-only and so is its copy: writable first, or only root (who ignores the
    # mode) could add refs/ and let git write in it.
    subprocess.run(["chmod", "-R", "u+w", str(mirror)], check=True)
    (mirror / "refs").mkdir(exist_ok=True)  # the shared copy lost git's empty refs/ directory
    testbed = tmp_path / "testbed"
    subprocess.run(["git", "clone", "-q", "-o", "origin", str(mirror), str(testbed)], check=True)
    _git(testbed, "reset", "-q", "--hard", instance.base_commit)
    _git(testbed, "remote", "remove", "origin")
    _git(testbed, "reflog", "expire", "--expire=now", "--all")
    _git(testbed, "gc", "-q", "--prune=now")
    return testbed


def _setup_commit(repo: Path) -> str:
    _git(repo, "commit", "-q", "--allow-empty", "-am", "SWE-bench")
    return _git(repo, "rev-parse", "HEAD").strip()


def _seal(repo: Path, base: str) -> Seal:
    r = subprocess.run(["bash", "-c", _SEAL, "seal", base], cwd=repo, capture_output=True, text=True, check=True)
    return parse_seal(r.stdout, "/testbed", base)


def test_an_official_setup_commit_is_the_starting_point(repo: Path, instance: Instance) -> None:
    # sphinx's pre_install in swebench 4.1.0's spec for 5.0.
    tox = (repo / "tox.ini").read_text()
    (repo / "tox.ini").write_text(tox.replace("pytest", "pytest -rA"))
    head = _setup_commit(repo)
    seal = _seal(repo, instance.base_commit)
    assert seal.head == head != instance.base_commit
    assert seal.files == ("tox.ini",) and len(seal.commits) == 1 and seal.commits[0].endswith(" SWE-bench")
    assert "tox.ini" not in forbidden_files(instance)
    check_starting_point(seal, instance.base_commit, forbidden_files(instance))  # accepted


def test_an_empty_setup_commit_and_the_base_itself_are_accepted(repo: Path, instance: Instance) -> None:
    at_base = _seal(repo, instance.base_commit)
    assert at_base.head == instance.base_commit and at_base.commits == () and at_base.files == ()
    _setup_commit(repo)
    empty = _seal(repo, instance.base_commit)
    assert empty.files == () and len(empty.commits) == 1
    check_starting_point(empty, instance.base_commit, forbidden_files(instance))


def test_a_setup_commit_touching_a_file_of_the_reference_patch_is_refused(repo: Path, instance: Instance) -> None:
    fixed = sorted(forbidden_files(instance) - {"tests/test_directive_code.py"})
    assert fixed, "the reference patch touches a file"
    (repo / fixed[0]).write_text((repo / fixed[0]).read_text() + "\n# edited by the image's setup\n")
    head = _setup_commit(repo)
    seal = _seal(repo, instance.base_commit)
    with pytest.raises(WrongImage) as err:
        check_starting_point(seal, instance.base_commit, forbidden_files(instance))
    assert err.value.permanent
    message = str(err.value)
    assert head in message and instance.base_commit in message and fixed[0] in message and "SWE-bench" in message


def test_a_setup_commit_touching_a_test_file_is_refused(repo: Path, instance: Instance) -> None:
    test_file = next(f for f in forbidden_files(instance) if f.startswith("tests/"))
    (repo / test_file).write_text("# the image's own version of the tests\n")
    _setup_commit(repo)
    with pytest.raises(WrongImage, match=test_file):
        check_starting_point(_seal(repo, instance.base_commit), instance.base_commit, forbidden_files(instance))


def test_head_elsewhere_or_no_base_commit_is_a_wrong_image(repo: Path, instance: Instance) -> None:
    # An unrelated history: HEAD does not descend from the base commit.
    _git(repo, "checkout", "-q", "--orphan", "other")
    _git(repo, "commit", "-q", "-m", "unrelated")
    with pytest.raises(WrongImage, match="does not descend from the task's base commit") as err:
        _seal(repo, instance.base_commit)
    assert err.value.permanent
    with pytest.raises(WrongImage, match="no repository at /testbed holds the task's base commit 0000"):
        _seal(repo, "0" * 40)


def test_later_history_is_sealed_against_the_starting_point(repo: Path, instance: Instance) -> None:
    """A branch past the setup commit (the fix, say) is removed; the setup commit itself stays."""
    head = _setup_commit(repo)
    _git(repo, "checkout", "-q", "-b", "future")
    (repo / "leak.txt").write_text("the fix\n")
    _git(repo, "add", "leak.txt")
    _git(repo, "commit", "-q", "-m", "future")
    _git(repo, "checkout", "-q", "-")
    seal = _seal(repo, instance.base_commit)
    assert seal.finding == "cleaned" and seal.head == head
    assert _git(repo, "rev-list", "--all").split() == _git(repo, "rev-list", "HEAD").split()
    assert _seal(repo, instance.base_commit).finding == "sealed"


def test_an_unparseable_finding_is_a_transient_infra_error() -> None:
    with pytest.raises(InfraError) as err:
        parse_seal("head abc\nsomething else\n", "/testbed", "base")
    assert not err.value.permanent and not isinstance(err.value, WrongImage)


def test_a_reflog_of_the_starting_point_and_its_past_is_sealed(repo: Path, instance: Instance) -> None:
    """An official image's reflog (the reset to the base, the setup commit) reaches nothing HEAD does
    not: sealed, so its finding is remembered and no sandbox pays for a clean-up. A reflog that
    reaches a commit HEAD does not (one made, then reset away) is cleaned, and the commit is gone."""
    head = _setup_commit(repo)
    assert _git(repo, "reflog", "--all", "--format=%H").split()  # the setup commit's entry
    assert _seal(repo, instance.base_commit).finding == "sealed"
    (repo / "future.py").write_text("the fix\n")
    _git(repo, "add", "future.py")
    _git(repo, "commit", "-q", "-m", "future")
    future = _git(repo, "rev-parse", "HEAD").strip()
    _git(repo, "reset", "-q", "--hard", head)
    assert _seal(repo, instance.base_commit).finding == "cleaned"
    gone = subprocess.run(["git", "cat-file", "-e", future], cwd=repo, capture_output=True)
    assert gone.returncode != 0 and _seal(repo, instance.base_commit).finding == "sealed"


def _capture(repo: Path, start: str) -> str:
    r = subprocess.run(
        ["bash", "-c", _CAPTURE, "capture", start, "--", "."], cwd=repo, capture_output=True, text=True, check=True
    )
    return r.stdout


def test_what_the_image_itself_changed_is_the_baseline_of_the_capture(
    repo: Path, instance: Instance, tmp_path: Path
) -> None:
    """An image whose build regenerates a tracked file and leaves one no .gitignore names (jq's bison and
    flex outputs, in SWE-bench Multilingual's images): both belong to the starting point, recorded, and
    the agent's patch holds only its own change, which applies to a fresh copy of the image's work tree."""
    head = _setup_commit(repo)
    assert _seal(repo, instance.base_commit).baseline == ""  # as the commit has it: HEAD is the baseline
    (repo / "tox.ini").write_text((repo / "tox.ini").read_text() + "# regenerated by the build\n")
    (repo / "built.c").write_text("/* the build's output */\n")
    fresh = tmp_path / "fresh"  # another sandbox of the same image
    shutil.copytree(repo, fresh, symlinks=True)
    seal = _seal(repo, instance.base_commit)
    assert seal.head == head and seal.baseline and seal.start == seal.baseline
    assert sorted(seal.shipped) == ["built.c", "tox.ini"]
    # The agent's change, and what a capture against HEAD would have handed in besides it.
    fixed = repo / "sphinx" / "__init__.py"
    fixed.write_text(fixed.read_text() + "# the fix\n")
    assert sorted(diffs.touched_files(_capture(repo, seal.head))) == ["built.c", "sphinx/__init__.py", "tox.ini"]
    patch = _capture(repo, seal.start)
    assert diffs.touched_files(patch) == {"sphinx/__init__.py"}
    # Graded in a fresh sandbox, which has the build's changes already.
    subprocess.run(["git", "apply", "--check", "-"], cwd=fresh, input=patch, text=True, check=True)
    # A fresh sandbox given the stored finding writes the same tree into its own repository.
    r = subprocess.run(
        ["bash", "-c", _BASELINE, "baseline", seal.baseline], cwd=fresh, capture_output=True, text=True, check=True
    )
    assert r.stdout.split()[:2] == ["baseline", seal.baseline]
    assert _capture(fresh, seal.baseline) == ""
