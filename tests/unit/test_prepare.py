"""`anyswe prepare dataset`, the exclusion lists, the disk check, registry references and provenance
in the comparison: everything of the preparation that needs no container."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from anyswe.datasets.exclusions import ExcludedInstance, ExclusionList, read_exclusions
from anyswe.errors import DatasetError, InsufficientDisk
from anyswe.grading import swebench as sb
from anyswe.plan import make_plan
from anyswe.prepare import prepare_dataset
from anyswe.prepare.disk import check_disk
from anyswe.prepare.images import ImageJob
from anyswe.prepare.registry import Reference
from anyswe.spec import load_spec

ANYSWE = [sys.executable, "-m", "anyswe"]


def test_all_verified_rows_validate_and_map_to_swebench_own_image_names(shared_swebench: Path) -> None:
    prepared = prepare_dataset(str(shared_swebench / "verified.jsonl"))
    assert prepared.validated == 500 and len(prepared.rows) == 500
    # The official name, from swebench's own TestSpec.instance_image_key, for every row.
    wrong = {i: img for i, img in prepared.images.items() if img != sb.official_image(i)}
    assert len(prepared.images) == 500 and not wrong
    assert len(prepared.by_repo()) == 12


def test_filters_and_the_written_file_round_trips(shared_swebench: Path, tmp_path: Path) -> None:
    src = shared_swebench / "verified.jsonl"
    out = tmp_path / "sel.jsonl"
    r = subprocess.run(
        [*ANYSWE, "prepare", "dataset", str(src), "-o", str(out), "--repos", "django/django", "--limit", "7",
         "--seed", "3", "--images-out", str(tmp_path / "images.tsv")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "500 rows valid, 7 selected" in r.stdout
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    originals = {json.loads(line)["instance_id"]: json.loads(line) for line in src.read_text().splitlines()}
    assert len(rows) == 7 and all(r["repo"] == "django/django" for r in rows)
    assert all(r == originals[r["instance_id"]] for r in rows)  # rows written as they were, field for field
    images = dict(line.split("\t") for line in (tmp_path / "images.tsv").read_text().splitlines())
    assert set(images) == {r["instance_id"] for r in rows}
    again = prepare_dataset(str(out))
    assert [i.instance_id for i in again.instances] == [r["instance_id"] for r in rows]


def test_every_bad_row_is_named_with_its_field(shared_swebench: Path, tmp_path: Path) -> None:
    rows = [json.loads(line) for line in (shared_swebench / "verified.jsonl").read_text().splitlines()]
    rows[3]["FAIL_TO_PASS"] = "not json"
    rows[7]["version"] = "99.9"
    del rows[9]["base_commit"]
    rows[11]["instance_id"] = rows[12]["instance_id"]
    rows[20]["instance_id"] = "x/../../etc"
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "never.jsonl"
    r = subprocess.run([*ANYSWE, "prepare", "dataset", str(bad), "-o", str(out)], capture_output=True, text=True)
    assert r.returncode == 2 and not out.exists()
    err = r.stderr
    assert "5 of 500 rows are not valid" in err
    assert "row 21 (x/../../etc): field 'instance_id': Value error, 'x/../../etc' may hold only letters" in err
    assert f"row 4 ({rows[3]['instance_id']}): field 'FAIL_TO_PASS': Value error, expected a JSON list" in err
    assert f"row 8 ({rows[7]['instance_id']}): field 'version': '99.9' has no swebench spec" in err
    assert f"row 10 ({rows[9]['instance_id']}): field 'base_commit': Field required" in err
    assert f"row 13 ({rows[12]['instance_id']}): duplicate instance_id (first at row 12)" in err


def test_demo_rows_written_and_edited_drive_the_demo_tasks(tmp_path: Path) -> None:
    out = tmp_path / "demo.jsonl"
    prepare_dataset("demo-swebench").write(out)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    rows[0]["patch"] = "broken on purpose"
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = tmp_path / "s.yaml"
    spec.write_text(
        f"name: s\ndataset: {{name: demo-swebench, path: {out.name}}}\nagents: {{g: {{type: gold}}}}\n"
        "providers: {d: {type: docker}}\n"
    )
    plan = make_plan(load_spec(spec))
    assert plan.dataset.builds_images and plan.instance(rows[0]["instance_id"]).patch == "broken on purpose"


def test_a_row_holding_a_lone_surrogate_is_written_and_reads_back(tmp_path: Path) -> None:
    """Issue 31, item 4: JSON rows can say \\ud800; the selection writes it as its escape (UTF-8)."""
    source = tmp_path / "rows.jsonl"
    rows = [dict(prepare_dataset("demo-swebench").rows[0])]
    rows[0]["problem_statement"] = "fix \ud800 é"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out.jsonl"
    prepare_dataset(str(source)).write(out)
    (line,) = out.read_bytes().decode().splitlines()  # strict UTF-8
    assert json.loads(line)["problem_statement"] == "fix \ud800 é" and "é" in line


def _exclusions(tmp_path: Path, ids: list[str]) -> Path:
    path = tmp_path / "exclusions.yaml"
    ExclusionList(
        dataset="demo",
        checked_on=["docker"],
        exclude=[ExcludedInstance(instance_id=i, reason="gold fails", failing={"docker": ["t::x"]}) for i in ids],
    ).write(path)
    return path


def test_exclusions_apply_before_the_limit_and_are_in_the_plan(tmp_path: Path) -> None:
    file = _exclusions(tmp_path, ["demo__calc-1", "demo__slug-2"])
    assert read_exclusions(file).exclude[0].failing == {"docker": ["t::x"]}
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "name: s\ndataset: {name: demo, limit: 5, exclude: [demo__leap-5], exclude_file: exclusions.yaml}\n"
        "agents: {g: {type: gold}}\nproviders: {d: {type: docker}}\n"
    )
    plan = make_plan(load_spec(spec))
    ids = {i.instance_id for i in plan.instances}
    assert len(ids) == 5 and not ids & {"demo__calc-1", "demo__slug-2", "demo__leap-5"}
    assert plan.to_json()["excluded"] == {
        "demo__calc-1": "gold fails",
        "demo__slug-2": "gold fails",
        "demo__leap-5": "dataset.exclude",
    }
    r = subprocess.run([*ANYSWE, "plan", str(spec)], capture_output=True, text=True)
    assert "excluded on every provider: 3 instance(s): demo__calc-1, demo__leap-5, demo__slug-2" in r.stdout


def test_a_bad_exclusion_list_is_named(tmp_path: Path) -> None:
    file = tmp_path / "ex.yaml"
    file.write_text("exclude:\n  - reason: no id\n")
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "name: s\ndataset: {name: demo, exclude_file: ex.yaml}\nagents: {g: {type: gold}}\n"
        "providers: {d: {type: docker}}\n"
    )
    with pytest.raises(DatasetError, match=r"ex.yaml: exclude.0.instance_id: Field required"):
        make_plan(load_spec(spec))
    spec.write_text(spec.read_text().replace("ex.yaml", "missing.yaml"))
    with pytest.raises(DatasetError, match=r"exclusion list not found: .*missing\.yaml"):
        make_plan(load_spec(spec))


@pytest.mark.parametrize(
    ("ref", "parsed", "insecure"),
    [
        ("swebench/sweb.eval.x86_64.a_1776_b:latest", (None, "swebench/sweb.eval.x86_64.a_1776_b", "latest"), False),
        ("localhost:5000/ns/img:v1", ("localhost:5000", "ns/img", "v1"), True),
        ("127.0.0.1:41234/ns/img", ("127.0.0.1:41234", "ns/img", "latest"), True),
        ("mirror.example.org/swebench/x:tag", ("mirror.example.org", "swebench/x", "tag"), False),
        ("ns/img@sha256:abc", (None, "ns/img", "sha256:abc"), False),
    ],
)
def test_references(ref: str, parsed: tuple[str | None, str, str], insecure: bool) -> None:
    r = Reference.parse(ref)
    assert (r.registry, r.repository, r.tag) == parsed and r.insecure == insecure


def test_disk_check_refuses_over_budget_naming_the_filesystem(tmp_path: Path) -> None:
    import asyncio

    from anyswe.sandbox.sif import SifArtefacts

    kind = SifArtefacts()
    jobs = [
        ImageJob("sif", "x", str(tmp_path / f"{i}.sif"), f"i{i}", kind=kind, needs=300 * 2**20, transient=2**30)
        for i in range(3)
    ]
    rows = asyncio.run(check_disk(jobs, store_available=False, jobs_in_parallel=2))
    assert rows and sum(r["needed_mb"] for r in rows) >= 900 + 2 * 1024
    with pytest.raises(InsufficientDisk, match=r"needs about [\d,]+ MB, 10 MB within the budget of 10 MB"):
        asyncio.run(check_disk(jobs, store_available=False, budget=10 * 2**20))
    for j in jobs:
        j.status = "present"  # what exists needs nothing
    assert all(r["needed_mb"] == 0 for r in asyncio.run(check_disk(jobs, store_available=False, budget=1)))


def test_diff_warns_when_the_sides_ran_different_images() -> None:
    import polars as pl

    from anyswe.results.compare import compare_by
    from anyswe.results.schema import TaskResult, results_frame

    def row(provider: str, kind: str, iid: str, art: str, src: str) -> TaskResult:
        return TaskResult(
            key=f"{provider}{iid}", cell=f"g.none.{provider}", agent="g", provider=provider, provider_type=kind,
            instance_id=iid, resolved=True, image_digest=art, image_source_digest=src,
        )  # fmt: skip

    rows = [
        row("docker", "docker", "a", "sha256:1", "sha256:1"),
        row("apptainer", "apptainer", "a", "sha256:sif-a", "sha256:1"),
        row("docker", "docker", "b", "sha256:2", "sha256:2"),
        row("apptainer", "apptainer", "b", "sha256:sif-b", "sha256:9"),  # built from another image
    ]
    (c,) = compare_by(results_frame(rows), "provider")
    assert c.image_mismatch == ["b"]
    assert "1 instance(s) ran on different image digests" in c.warnings[0] and c.warnings[0].endswith(": b")
    same = (
        results_frame(rows[:2])
        .vstack(results_frame(rows[2:3]))
        .vstack(
            pl.DataFrame(
                [rows[1].model_dump(mode="json") | {"instance_id": "b", "key": "x"}], schema=results_frame([]).schema
            )
        )
    )
    (c2,) = compare_by(same, "provider")
    assert c2.image_mismatch == ["b"]  # a's digests agree; b's sides still differ (sha256:2 vs sha256:1)


def test_old_rows_migrate_without_provenance() -> None:
    from anyswe.results.schema import SCHEMA_VERSION, parse_row

    row = {
        "schema_version": 2,
        "key": "0123456789abcdef__i",
        "cell": "c",
        "agent": "a",
        "provider": "p",
        "instance_id": "i",
    }
    r = parse_row(row, "results.jsonl:1")
    assert r.schema_version == SCHEMA_VERSION and r.image_digest is None and r.swebench_version is None
    # Schema 3 knew no permanent infra errors: its infra rows read as transient.
    v3 = {**row, "schema_version": 3, "error_kind": "infra", "error": "SandboxLost: gone", "mask_sample": True}
    assert parse_row(v3, "results.jsonl:2").error_permanent is False


def test_rows_of_instances_excluded_after_they_ran_count_nowhere(tmp_path: Path) -> None:
    from anyswe.results.schema import TaskResult
    from anyswe.results.tables import cell_table, task_frame

    rows = [
        TaskResult(key=f"0123456789abcdef__{i}", cell="g.none.d", agent="g", provider="d", instance_id=i, resolved=True)
        for i in ("a", "b", "c")
    ]
    (tmp_path / "results.jsonl").write_bytes(b"".join(r.to_json_line() for r in rows))
    (tmp_path / "plan.json").write_text(json.dumps({"excluded": {"b": "gold patch does not resolve on d"}}))
    tasks = task_frame(tmp_path)
    assert sorted(tasks["instance_id"].to_list()) == ["a", "c"]
    assert cell_table(tasks)["tasks"].to_list() == [2]


def test_stale_half_builds_of_dead_processes_are_removed(tmp_path: Path) -> None:
    import os

    from anyswe.sandbox.sif import remove_stale_parts

    dead = 2**22 + 12345  # above pid_max's default: no such process
    (tmp_path / f"a.sif.part-{dead}").write_bytes(b"half")
    (tmp_path / f"a.sif.work-{dead}").mkdir()
    (tmp_path / f"a.sif.work-{dead}" / "image.tar").write_bytes(b"archive")
    (tmp_path / f"b.sif.part-{os.getpid()}").write_bytes(b"being built")  # a live build: kept
    (tmp_path / "c.sif").write_bytes(b"done")
    removed = remove_stale_parts(tmp_path)
    assert sorted(Path(p).name for p in removed) == [f"a.sif.part-{dead}", f"a.sif.work-{dead}"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"b.sif.part-{os.getpid()}", "c.sif"]
