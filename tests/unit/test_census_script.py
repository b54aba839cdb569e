"""scripts/census.py (`just census`): the table it writes from each tier's census.jsonl, and where."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "census.py"


@pytest.fixture(scope="module")
def census() -> ModuleType:
    spec = importlib.util.spec_from_file_location("census_script", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def _line(iid: str, provider: str, bucket: str, gold: list[str], empty: list[str], **more: object) -> str:
    entry = {"instance_id": iid, "provider": provider, "bucket": bucket, "why": None, "gold": gold, "empty": empty}
    return json.dumps({**entry, "failing": [], **more})


def test_the_table_has_every_instance_and_runtime_and_says_why_one_is_not_supported(
    census: ModuleType, tmp_path: Path
) -> None:
    pro = "instance_ansible__ansible-5f4e332e3762999d94af27746db29ff1729252c1-v0f01c69f1e2528b935359cfe578530722bca2c59"
    lines = [
        _line("a__b-1", "docker", "supported", ["resolved"] * 2, ["unresolved"] * 2),
        _line("a__b-1", "apptainer", "supported", ["resolved"] * 2, ["unresolved"] * 2),
        _line(
            "a__b-2",
            "docker",
            "broken",
            ["unresolved"] * 2,
            ["unresolved"] * 2,
            why="gold patch does not resolve",
            failing=["t1", "t2", "t3", "t4", "t5"],
        ),
        _line("a__b-2", "apptainer", "no-verdict", ["error: infra", "resolved"], ["unresolved"] * 2),
        _line(pro, "docker", "flaky", ["resolved", "unresolved"], ["unresolved"] * 2, why="flaky: gold resolved 1/2"),
    ]
    (tmp_path / "census.jsonl").write_text("\n".join(lines) + "\n")
    gold = {"instance_id": "a__b-1", "provider": "docker", "flags": ["runner_tamper"], "test_record": "compared"}
    (tmp_path / "results.jsonl").write_text(json.dumps(gold) + "\n")
    found = census.evidence_rows(tmp_path / "census.jsonl")
    tier = census.TIERS[0]
    text = census.table([(tier, found)])
    rows = text.splitlines()[2:]
    assert len(rows) == 3
    assert rows[0].startswith(
        "| Verified | a__b-1 | supported | supported | 2/2 / 2/2 | 0/2 / 0/2 | compared | runner_tamper | - |"
    )
    assert "| broken | no-verdict |" in rows[1]
    assert "docker: gold patch does not resolve (`t1`, `t2`, `t3`, `t4` and 1 more)" in rows[1]
    assert "apptainer: error: infra" in rows[1]
    # Pro's long ids by repository and commit; a runtime it did not run on says so.
    assert rows[2].startswith("| Verified | ansible-5f4e332e | flaky | not run | 1/2 / 0/0 |"), rows[2]
    said = census.summary([(tier, found)])
    assert "Verified on docker: 1 supported, 1 broken, 1 flaky" in said
    assert "Verified on apptainer: 1 supported, 1 no-verdict, 1 not run" in said


def test_the_table_goes_between_the_markers_and_nothing_else_changes(census: ModuleType, tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(f"# head\n\n{census.BEGIN}\nold table\n{census.END}\n\ntail\n")
    census.write_doc("new table", doc)
    census.write_doc("newer table", doc)
    assert doc.read_text() == f"# head\n\n{census.BEGIN}\nnewer table\n{census.END}\n\ntail\n"
    doc.write_text("no markers\n")
    with pytest.raises(SystemExit, match="no census markers"):
        census.write_doc("x", doc)


def test_the_real_images_doc_has_the_markers(census: ModuleType) -> None:
    text = census.DOC.read_text()
    assert text.count(census.BEGIN) == 1 and text.count(census.END) == 1


def test_the_verified_doc_has_the_markers_for_the_census_at_scale(census: ModuleType) -> None:
    text = census.SCALE_DOC.read_text()
    assert text.count(census.BEGIN) == 1 and text.count(census.END) == 1


def test_a_chunk_counts_as_done_only_with_every_instance_on_every_runtime(census: ModuleType, tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert not census.chunk_done(tmp_path, ["a__b-1"])
    run.mkdir()
    (run / "census.jsonl").write_text(_line("a__b-1", "docker", "supported", [], []) + "\n")
    assert not census.chunk_done(tmp_path, ["a__b-1"])  # a chunk stopped before apptainer: run again
    (run / "census.jsonl").write_text("".join(_line("a__b-1", p, "supported", [], []) + "\n" for p in census.PROVIDERS))
    assert census.chunk_done(tmp_path, ["a__b-1"]) and not census.chunk_done(tmp_path, ["a__b-1", "a__b-2"])


def test_the_scale_census_reads_every_chunk_and_names_each_commit(
    census: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chunks done in earlier sessions (at other commits) are read, not run again: nothing is built here."""
    ids = ["a__b-1", "a__b-2", "a__b-3"]
    monkeypatch.setattr(census, "buildable_rows", lambda tier: ids)
    monkeypatch.setattr(census, "fixed_tier_ids", set)
    for n, (part, at) in enumerate(((ids[:2], "1111111"), (ids[2:], "2222222"))):
        chunk = tmp_path / census.SCALE.name / f"chunk-{n:03d}"
        (chunk / "run").mkdir(parents=True)
        (chunk / "commit").write_text(at)
        lines = [_line(i, p, "supported", ["resolved"], ["unresolved"]) for i in part for p in census.PROVIDERS]
        (chunk / "run" / "census.jsonl").write_text("\n".join(lines) + "\n")
    found, commits, failed = census.run_scale(census.SCALE, tmp_path, 1, 2, keep_images=True)
    assert sorted(found) == ids and commits == ["1111111", "2222222"] and failed == []
