"""`anyswe prepare images` against a real registry on localhost: docker pulls, SIFs built from
``docker://``, a build killed part-way and resumed, a disk budget refused, a missing image reported
without stopping the others; then a run on the prepared images carries its provenance."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from anyswe.config import base_image
from anyswe.datasets import format_image, image_builder, load_dataset

pytestmark = [pytest.mark.containers, pytest.mark.usefixtures("runtimes")]

ANYSWE = [sys.executable, "-m", "anyswe"]
TEMPLATE = "{registry}/swebench-{nonce}/sweb.eval.x86_64.{{instance_id_docker}}:latest"
IDS = ["demo__calc-1", "demo__slug-2", "demo__inventory-4"]


def _docker(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check)


@pytest.fixture(scope="module")
def pushed(registry: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The SWE-bench-shaped demo images of IDS[:2] in the registry (IDS[2] is not pushed), each with a
    layer of its own so a pull downloads it; none of them left in the local daemon. Yields the template."""
    import asyncio

    from anyswe.sandbox.store import build_image

    nonce = uuid.uuid4().hex[:10]
    template = TEMPLATE.format(registry=registry, nonce=nonce)
    ds = load_dataset("demo-swebench")
    build = image_builder("demo-swebench")
    work = tmp_path_factory.mktemp("push")
    refs = []
    for inst in ds.instances:
        if inst.instance_id not in IDS[:2]:
            continue
        dockerfile, tag = build(inst.instance_id, base_image())
        asyncio.run(build_image(dockerfile, tag))
        ctx = work / inst.instance_id
        ctx.mkdir()
        (ctx / "nonce").write_text(f"{nonce} {inst.instance_id}\n")
        (ctx / "Dockerfile").write_text(f"FROM {tag}\nCOPY nonce /etc/anyswe-registry-nonce\n")
        local = f"anyswe-test/pushed-{nonce}:{inst.instance_id.replace('__', '-')}"
        asyncio.run(build_image(ctx / "Dockerfile", local))
        ref = format_image(template, inst)
        _docker("tag", local, ref)
        _docker("push", "--quiet", ref)
        _docker("rmi", local, ref)
        refs.append(ref)
    try:
        yield template
    finally:
        for ref in refs:
            _docker("rmi", "--force", ref, check=False)


def _spec(tmp_path: Path, template: str, ids: list[str], *, docker: bool = True, sif_dir: str = "sifs") -> Path:
    providers = {"apptainer": {"type": "apptainer", "image": template, "sif": f"{sif_dir}/{{instance_id_docker}}.sif"}}
    if docker:
        providers = {"docker": {"type": "docker", "image": template}, **providers}
    spec = {
        "name": "prepared",
        "dataset": {"name": "demo-swebench", "instance_ids": ids},
        "agents": {"gold": {"type": "gold"}},
        "providers": providers,
        "output_dir": str(tmp_path / "run"),
    }
    path = tmp_path / "spec.yaml"
    path.write_text(json.dumps(spec))  # JSON is YAML
    return path


def _prepare(spec: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ANYSWE, "prepare", "images", str(spec), "--sif-source", "registry", *extra],
        capture_output=True,
        text=True,
        timeout=900,
    )


def _sif_ok(sif: Path) -> bool:
    r = subprocess.run(["apptainer", "sif", "list", str(sif)], capture_output=True, text=True)
    return r.returncode == 0 and "Squashfs" in r.stdout


def test_pull_build_run_with_provenance(pushed: str, tmp_path: Path) -> None:
    spec = _spec(tmp_path, pushed, IDS[:2])
    refs = [pushed.replace("{instance_id_docker}", i.replace("__", "_1776_")) for i in IDS[:2]]
    assert all(_docker("image", "inspect", r, check=False).returncode != 0 for r in refs)

    r = _prepare(spec, "--jobs", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 built, 2 pulled" in r.stdout, r.stdout
    sifs = sorted((tmp_path / "sifs").glob("*.sif"))
    assert len(sifs) == 2 and all(_sif_ok(s) for s in sifs)
    assert not list((tmp_path / "sifs").glob("*.part-*"))
    # Again: everything is there, nothing is made twice.
    again = _prepare(spec)
    assert again.returncode == 0 and "4 present" in again.stdout, again.stdout

    run = subprocess.run([*ANYSWE, "apply", str(spec)], capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout + run.stderr
    rows = [json.loads(line) for line in (tmp_path / "run" / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(r["resolved"] for r in rows)
    by = {(r["provider"], r["instance_id"]): r for r in rows}
    for iid, ref in zip(IDS[:2], refs, strict=True):
        d, a = by[("docker", iid)], by[("apptainer", iid)]
        image_id = _docker("image", "inspect", "--format", "{{.Id}}", ref).stdout.strip()
        sif = Path(a["image"])
        assert d["image_digest"] == d["image_source_digest"] == image_id
        assert a["image_source_digest"] == image_id  # the SIF records the image it was built from
        assert a["image_digest"] == "sha256:" + hashlib.sha256(sif.read_bytes()).hexdigest()
        for r in (d, a):
            eval_sh = (tmp_path / "run" / "tasks" / r["key"] / "eval.sh").read_bytes()
            assert r["eval_script_sha256"] == hashlib.sha256(eval_sh).hexdigest()
            assert r["swebench_version"] == "4.1.0"
    diff = subprocess.run([*ANYSWE, "diff", str(tmp_path / "run")], capture_output=True, text=True)
    assert diff.returncode == 0 and "agreement 1.000" in diff.stdout and "warning" not in diff.stderr


def test_a_missing_image_is_reported_and_the_others_are_made(pushed: str, tmp_path: Path) -> None:
    spec = _spec(tmp_path, pushed, [IDS[0], IDS[2]], docker=False)
    r = _prepare(spec)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "1 built, 1 failed" in r.stdout
    assert (tmp_path / "sifs" / "demo_1776_calc-1.sif").is_file()
    assert not (tmp_path / "sifs" / "demo_1776_inventory-4.sif").exists()
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("failed: ")]
    assert "demo_1776_inventory-4.sif" in line and "apptainer build" in line


def test_a_disk_budget_too_small_refuses_before_anything(pushed: str, tmp_path: Path) -> None:
    spec = _spec(tmp_path, pushed, IDS[:2])
    ref = pushed.replace("{instance_id_docker}", "demo_1776_calc-1")
    _docker("rmi", ref, check=False)  # an earlier test pulled it
    r = _prepare(spec, "--disk-budget", "50MB")
    assert r.returncode == 2
    assert "not enough disk to prepare these images; nothing was pulled or built" in r.stderr
    assert "within the budget of 50 MB" in r.stderr
    assert _docker("image", "inspect", ref, check=False).returncode != 0
    assert not (tmp_path / "sifs").exists() or not list((tmp_path / "sifs").iterdir())


def test_killed_mid_build_resumes_and_never_counts_half_a_sif(pushed: str, tmp_path: Path) -> None:
    spec = _spec(tmp_path, pushed, IDS[:2], docker=False)
    sif_dir = tmp_path / "sifs"
    proc = subprocess.Popen(
        [*ANYSWE, "prepare", "images", str(spec), "--sif-source", "registry", "--sif-jobs", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # killed with its children, as when the node goes away
    )
    deadline = time.monotonic() + 300
    try:
        # Wait until the first SIF build is under way (its apptainer build names the part file).
        while time.monotonic() < deadline:
            found = subprocess.run(["pgrep", "-f", f"part-{proc.pid}"], capture_output=True, text=True)
            if found.stdout.strip():
                break
            assert proc.poll() is None, "prepare ended before a build was seen"
            time.sleep(0.1)
        else:
            pytest.fail("no SIF build started")
        time.sleep(1.0)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    built = list(sif_dir.glob("*.sif"))
    assert len(built) < 2, "the kill came too late to test a resume"
    assert all(_sif_ok(s) for s in built)  # whatever has its final name is a whole, checked SIF

    r = _prepare(spec, "--sif-jobs", "1")
    assert r.returncode == 0, r.stdout + r.stderr
    sifs = sorted(sif_dir.glob("*.sif"))
    assert [s.name for s in sifs] == ["demo_1776_calc-1.sif", "demo_1776_slug-2.sif"]
    assert all(_sif_ok(s) for s in sifs)
    assert not list(sif_dir.glob("*.part-*"))  # the dead build's part file is gone (work dirs: unit test)
    for s in sifs:
        record = json.loads(s.with_name(s.name + ".json").read_text())
        assert record["sha256"] == "sha256:" + hashlib.sha256(s.read_bytes()).hexdigest()
        assert record["built_from"] == "registry" and record["source_digest"].startswith("sha256:")
