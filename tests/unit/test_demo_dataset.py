"""The embedded demo benchmark: schema, the traits it promises, deterministic rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from anyswe.datasets import demo, load_dataset
from anyswe.grading import diffs
from anyswe.grading import swebench as sb


@pytest.fixture(scope="module")
def rows() -> dict[str, object]:
    return {i.instance_id: i for i in load_dataset("demo").instances}


def test_schema(rows: dict[str, object]) -> None:
    assert len(rows) >= 8
    for inst in rows.values():
        assert inst.repo and inst.version and inst.problem_statement
        assert len(inst.base_commit) == 40
        assert inst.patch.startswith("diff --git") and inst.test_patch.startswith("diff --git")
        assert inst.FAIL_TO_PASS
        # The fix never touches tests and the test patch never touches the fix.
        assert not set(diffs.patch_targets(inst.patch)) & set(diffs.patch_targets(inst.test_patch))


def test_traits(rows: dict[str, object]) -> None:
    calc, slug, settings = rows["demo__calc-1"], rows["demo__slug-2"], rows["demo__settings-3"]
    inventory, leap, wrap, retry = (
        rows["demo__inventory-4"],
        rows["demo__leap-5"],
        rows["demo__wrap-6"],
        rows["demo__retry-7"],
    )
    assert any("[" in t for t in calc.FAIL_TO_PASS)
    assert len(diffs.patch_targets(slug.patch)) == 2
    assert "new file mode" in settings.patch
    # The test patch edits one existing test file and adds another.
    assert sb.modified_files(inventory.test_patch) == ["tests/test_inventory.py"]
    assert sorted(diffs.patch_targets(inventory.test_patch)) == ["tests/test_inventory.py", "tests/test_limits.py"]
    assert leap.sloppy_patch and leap.PASS_TO_PASS
    assert (
        "pytest.mark.skip" in wrap.test_patch
        or "pytest.mark.skip" in (demo.task_dirs()["demo__wrap-6"] / "base" / "tests" / "test_wrap.py").read_text()
    )
    assert "time.sleep(10)" in (demo.task_dirs()["demo__retry-7"] / "base" / "tests" / "test_retry.py").read_text()
    assert retry.PASS_TO_PASS


def test_rows_are_deterministic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rows: dict[str, object]) -> None:
    monkeypatch.setenv("ANYSWE_CACHE", str(tmp_path))
    again = {i.instance_id: i for i in demo.load()}
    assert {k: v.base_commit for k, v in again.items()} == {k: v.base_commit for k, v in rows.items()}
    assert {k: v.patch for k, v in again.items()} == {k: v.patch for k, v in rows.items()}


def test_agent_view_hides_answers(rows: dict[str, object]) -> None:
    view = rows["demo__calc-1"].agent_view()
    dumped = view.model_dump()
    assert set(dumped) == {"instance_id", "repo", "base_commit", "problem_statement"}
    assert "a + b" not in str(dumped)


def _context_of(args: tuple[str, str, bool]) -> tuple[str, str, dict[str, str]]:
    """In a fresh process: build ``instance``'s context and read it back whole."""
    import os

    cache, instance, shaped = args
    os.environ["ANYSWE_CACHE"] = cache
    dockerfile, tag = demo.build_context(instance, "anyswe-base:test", swebench_shaped=shaped)
    files = {
        str(p.relative_to(dockerfile.parent)): p.read_text()
        for p in sorted(dockerfile.parent.rglob("*"))
        if p.is_file() and not p.is_symlink() and ".git/" not in str(p)
    }
    return str(dockerfile), tag, files


@pytest.mark.parametrize("shaped", [False, True], ids=["plain", "swebench-shaped"])
def test_build_context_from_several_processes_at_once(tmp_path: Path, shaped: bool) -> None:
    """Two CI workers built one task's context at once: one rebuilt it in place while the other's
    docker build read it (EEXIST, and once an image from a half-copied context under a good tag).
    Each process gets the same whole context, and a cached one is reused, never rebuilt."""
    import multiprocessing

    jobs = [(str(tmp_path), "demo__calc-1", shaped)] * 8
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        got = pool.map(_context_of, jobs)
    assert len({(d, t) for d, t, _ in got}) == 1
    files = got[0][2]
    assert "Dockerfile" in files and all(f == files for _, _, f in got)
    if shaped:
        assert {"setup_repo.sh", "activate", "testbed-env/bin/pytest"} <= set(files)
        assert not list(Path(got[0][0]).parent.parent.glob(".swebench-*"))  # no staging dir left
    again = _context_of(jobs[0])
    assert again == got[0]


def test_compiled_bytecode_beside_a_task_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``__pycache__`` in a task's directories (``compileall`` over the package made them once, in
    CI) is not part of the task: not in its hash, its scripts, its rows or its images' contexts."""
    import shutil

    before_scripts, before_hash = demo.scripts(), {i: demo.content_hash(d) for i, d in demo.task_dirs().items()}
    tasks = tmp_path / "tasks"
    shutil.copytree(demo.TASKS_DIR, tasks)
    for sub in ("base", "fix", "tests"):
        cache = tasks / "calc" / sub / "__pycache__"
        cache.mkdir(exist_ok=True)
        (cache / "calc.cpython-311.pyc").write_bytes(b"\xa7\r\r\n\x00\x00\x00\x00")
    monkeypatch.setattr(demo, "TASKS_DIR", tasks)
    demo.task_dirs.cache_clear()
    try:
        assert demo.scripts() == before_scripts
        assert {i: demo.content_hash(d) for i, d in demo.task_dirs().items()} == before_hash
    finally:
        demo.task_dirs.cache_clear()
