"""Local dataset files: clear errors that name the file, row and field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from anyswe.datasets import filter_instances, load_dataset
from anyswe.errors import DatasetError
from anyswe.grading import harness_for

ROW = {
    "instance_id": "me__x-1",
    "repo": "me/x",
    "base_commit": "abc",
    "patch": "",
    "test_patch": "t",
    "FAIL_TO_PASS": '["a"]',
    "PASS_TO_PASS": "[]",
    "version": 1.0,
}


def write(tmp_path: Path, rows: list[object], name: str = "rows.jsonl") -> Path:
    p = tmp_path / name
    p.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return p


def test_rows_load_and_json_string_lists_parse(tmp_path: Path) -> None:
    ds = load_dataset(path=write(tmp_path, [ROW]))
    (inst,) = ds.instances
    assert inst.FAIL_TO_PASS == ["a"] and inst.version == "1.0" and ds.harness == "auto"
    assert harness_for(inst, spec_harness=None, dataset_harness=ds.harness) == "pytest"


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([ROW, "{not json"], r"rows\.jsonl:2:2: not valid JSON"),
        ([{k: v for k, v in ROW.items() if k != "repo"}], r"rows\.jsonl: row 1: field 'repo': Field required"),
        ([ROW, ROW], r"row 2: duplicate instance_id 'me__x-1'"),
        ([{**ROW, "FAIL_TO_PASS": 3}], r"row 1: field 'FAIL_TO_PASS'"),
    ],
)
def test_bad_rows_name_file_row_and_field(tmp_path: Path, rows: list[object], message: str) -> None:
    with pytest.raises(DatasetError, match=message):
        load_dataset(path=write(tmp_path, rows))


def test_missing_file_and_unknown_ids(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="dataset file not found"):
        load_dataset(path=tmp_path / "nope.jsonl")
    ds = load_dataset(path=write(tmp_path, [ROW]))
    with pytest.raises(DatasetError, match="not in the dataset: me__y-2"):
        filter_instances(ds.instances, instance_ids=["me__y-2"])


def test_parquet_and_json_list(tmp_path: Path) -> None:
    import polars as pl

    pl.DataFrame([ROW]).write_parquet(tmp_path / "rows.parquet")
    assert load_dataset(path=tmp_path / "rows.parquet").instances[0].instance_id == "me__x-1"
    (tmp_path / "rows.json").write_text(json.dumps([ROW]))
    assert load_dataset(path=tmp_path / "rows.json").instances[0].repo == "me/x"


@pytest.mark.parametrize(
    ("instance_id", "why"),
    [
        ("me__x-1/../../../../tmp/x", r"may hold only letters, digits, '\.', '_' and '-', not '/'"),
        ("..", r"may not start with '\.'"),
        (".hidden", r"may not start with '\.'"),
        ("me x", r"not ' '"),
        ("a" * 201, r"at most 200"),
    ],
)
def test_an_id_that_is_not_one_path_component_is_refused_at_its_row(tmp_path: Path, instance_id: str, why: str) -> None:
    with pytest.raises(DatasetError, match=rf"rows\.jsonl: row 2: field 'instance_id': .*{why}"):
        load_dataset(path=write(tmp_path, [ROW, {**ROW, "instance_id": instance_id}]))


def test_every_real_swebench_id_is_a_valid_name(shared_swebench: Path) -> None:
    verified = load_dataset(path=shared_swebench / "verified.jsonl")
    multimodal = load_dataset(path=shared_swebench / "multimodal_fail_only.jsonl")
    assert len(verified.instances) == 500 and len(multimodal.instances) == 54
