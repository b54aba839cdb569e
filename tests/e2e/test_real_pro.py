"""Real SWE-bench Pro instances (ansible, Python 3.11), their images built here offline from the benchmark's
own Dockerfiles, graded through ``anyswe apply`` on docker and apptainer and, as the reference, by Pro's
own procedure run with plain docker: its ``create_entryscript`` (read from ``swe_bench_pro_eval.py``
and run as written), the patch in ``/workspace/patch.diff``, its run script and parser, and its rule
(every FAIL_TO_PASS and PASS_TO_PASS test among those ``output.json`` says PASSED).
"""

from __future__ import annotations

import ast
import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from realkit import apply_spec, docker, kept_reference, task_report

from anyswe.datasets.instance import Instance
from anyswe.grading import diffs
from anyswe.results.schema import TaskResult

# A session fixture's setup counts to its first test's timeout: a cold run builds the images and runs
# Pro's procedure by hand before the first test, far past the default 900 s on busy CPUs.
pytestmark = [pytest.mark.containers, pytest.mark.real_images, pytest.mark.timeout(3600)]

REPO_ROOT = Path(__file__).resolve().parents[2]
SPEC = REPO_ROOT / "specs" / "pro.yaml"
IDS = (
    "instance_ansible__ansible-5f4e332e3762999d94af27746db29ff1729252c1-v0f01c69f1e2528b935359cfe578530722bca2c59",
    "instance_ansible__ansible-d62496fe416623e88b90139dc7917080cb04ce70-v0f01c69f1e2528b935359cfe578530722bca2c59",
)
PROVIDERS = ("docker", "apptainer")


@pytest.fixture(scope="session")
def pro_root(shared_swebench: Path) -> Path:
    return shared_swebench.parent / "swebench_pro"


@pytest.fixture(scope="session")
def pro_instances(pro_root: Path) -> dict[str, Instance]:
    from anyswe.plan import make_plan
    from anyswe.spec import load_spec

    found = {i.instance_id: i for i in make_plan(load_spec(SPEC)).instances}
    assert sorted(found) == sorted(IDS)
    return found


@pytest.fixture(scope="session")
def pro_images(pro_instances: dict[str, Instance], repo_mirror: Path, docker_image: str) -> dict[str, str]:
    from anyswe.plan import make_plan
    from anyswe.prepare.images import prepare_images_async
    from anyswe.spec import load_spec

    plan = make_plan(load_spec(SPEC, ["matrix.providers=[docker]"]))
    report = asyncio.run(prepare_images_async(plan, jobs=1, build=True, repo_mirror=repo_mirror, progress=False))
    assert not report.failed, "\n".join(f"{j.ref}: {j.error}" for j in report.failed)
    return {i: str((inst.model_extra or {})["docker_image"]) for i, inst in pro_instances.items()}


def _entryscript(pro_root: Path, raw: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> str:
    tree = ast.parse((pro_root / "assets" / "swe_bench_pro_eval.py").read_text())
    wanted = {"create_entryscript", "load_base_docker", "instance_docker"}
    module = ast.Module(
        body=[n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in wanted], type_ignores=[]
    )
    namespace: dict[str, Any] = {}
    exec(compile(module, "swe_bench_pro_eval.py", "exec"), namespace)
    with monkeypatch.context() as m:
        m.chdir(pro_root / "assets")  # Pro reads the Dockerfiles relative to its own directory
        return str(namespace["create_entryscript"](raw))


def by_hand(image: str, raw: dict[str, Any], pro_root: Path, patch: str, entry: str) -> dict[str, Any]:
    """Pro's procedure with plain docker; its verdict by its rule, and the tests output.json says PASSED
    (kept for the same image, patch and scripts, as realkit keeps swebench's: ``kept_reference``)."""
    scripts = pro_root / "assets" / "run_scripts" / raw["instance_id"]
    files = {
        "patch.diff": patch,
        "run_script.sh": (scripts / "run_script.sh").read_text(),
        "parser.py": (scripts / "parser.py").read_text(),
        "entryscript.sh": entry,
    }
    wanted = set(ast.literal_eval(raw["fail_to_pass"])) | set(ast.literal_eval(raw["pass_to_pass"]))

    def make() -> tuple[dict[str, Any], bool]:
        passed = _run_by_hand(image, files)
        return {"resolved": wanted <= passed, "passed": sorted(passed & wanted)}, True

    found = kept_reference(image, ("pro", *files.values()), make)
    return {"resolved": found["resolved"], "passed": set(found["passed"])}


def _run_by_hand(image: str, files: dict[str, str]) -> set[str]:
    """The tests ``output.json`` says PASSED after Pro's entry script ran in a fresh container of ``image``."""
    started = docker("run", "-d", "--network", "none", "--entrypoint", "sleep", image, "infinity")
    assert started.returncode == 0, started.stderr
    container = started.stdout.strip()
    try:
        for name, text in files.items():
            put = docker(
                "exec", "-i", container, "bash", "-c", f"mkdir -p /workspace && cat > /workspace/{name}", stdin=text
            )
            assert put.returncode == 0, put.stderr
        docker("exec", container, "bash", "/workspace/entryscript.sh", timeout=1800)
        out = docker("exec", container, "cat", "/workspace/output.json")
        output = json.loads(out.stdout) if out.returncode == 0 else {"tests": []}
    finally:
        docker("rm", "-f", container)
    return {t["name"] for t in output["tests"] if t["status"] == "PASSED"}


@pytest.fixture(scope="session")
def pro_by_hand(
    pro_images: dict[str, str], pro_root: Path, pro_instances: dict[str, Instance]
) -> dict[str, dict[str, dict[str, Any]]]:
    raw = {r["instance_id"]: r for r in map(json.loads, (pro_root / "rows.jsonl").read_text().splitlines())}
    out: dict[str, dict[str, dict[str, Any]]] = {}
    with pytest.MonkeyPatch.context() as m:
        for i in IDS:
            entry = _entryscript(pro_root, raw[i], m)
            for kind, patch in (("gold", raw[i]["patch"]), ("empty", "")):
                out.setdefault(i, {})[kind] = by_hand(pro_images[i], raw[i], pro_root, patch, entry)
    return out


@pytest.mark.parametrize("instance_id", IDS)
def test_the_image_is_at_the_base_commit_and_names_what_differs(
    instance_id: str, pro_images: dict[str, str], pro_instances: dict[str, Instance]
) -> None:
    from anyswe.images.pro_build import check_pro_image

    asyncio.run(check_pro_image(pro_images[instance_id], pro_instances[instance_id]))
    r = docker("run", "--rm", "--network", "none", "--entrypoint", "/bin/bash", pro_images[instance_id], "-c",
               "cd /app && git remote get-url origin && echo $PYTEST_ADDOPTS")  # fmt: skip
    assert r.stdout.split("\n")[:2] == [
        "https://github.com/ansible/ansible.git",
        "--tb=short -v --continue-on-collection-errors --reruns=3",
    ]
    label = docker(
        "image", "inspect", "--format", '{{index .Config.Labels "org.anyswe.differs"}}', pro_images[instance_id]
    )
    assert "pypi-timemachine" in label.stdout and "python:3.11-slim" in label.stdout


@pytest.mark.parametrize("instance_id", IDS)
def test_gold_resolves_by_pros_own_procedure_and_an_empty_patch_does_not(
    instance_id: str, pro_by_hand: dict[str, Any]
) -> None:
    assert pro_by_hand[instance_id]["gold"]["resolved"] is True
    assert pro_by_hand[instance_id]["empty"]["resolved"] is False


@pytest.fixture(scope="session")
def pro_run(
    pro_images: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, dict[tuple[str, str, str], TaskResult]]:
    """``anyswe apply specs/pro.yaml``: gold and noop on docker and apptainer; its directory and rows.
    (The census of these instances, gold and empty passes, is ``just census``'s.)"""
    run_dir = tmp_path_factory.mktemp("pro-run") / "run"
    return run_dir, apply_spec(SPEC, run_dir)


def _passed(status: dict[str, Any]) -> set[str]:
    return set(status["FAIL_TO_PASS"]["success"]) | set(status["PASS_TO_PASS"]["success"])


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("instance_id", IDS)
def test_anyswe_gold_and_noop_equal_pros_own_procedure(
    instance_id: str,
    provider: str,
    pro_run: tuple[Path, dict[tuple[str, str, str], TaskResult]],
    pro_by_hand: dict[str, Any],
    pro_instances: dict[str, Instance],
) -> None:
    run_dir, rows = pro_run
    gold = rows["gold", provider, instance_id]
    assert gold.error_kind is None and not gold.mask_sample, gold.error
    assert gold.resolved is pro_by_hand[instance_id]["gold"]["resolved"]
    assert _passed(task_report(run_dir, gold)["tests_status"]) == pro_by_hand[instance_id]["gold"]["passed"]
    assert gold.applied_by == "git apply -v"
    assert diffs.touched_files(gold.model_patch) == diffs.touched_files(pro_instances[instance_id].patch)
    # The noop agent's empty patch: unresolved without running anything; Pro's run script on the image
    # with no patch is the by-hand empty run's (test_gold_resolves_by_pros_own_procedure_...).
    noop = rows["noop", provider, instance_id]
    assert noop.error_kind is None and not noop.mask_sample, noop.error
    assert noop.resolved is pro_by_hand[instance_id]["empty"]["resolved"] is False


AGENT_SPEC = """\
name: pro-agent
dataset: {{name: swe-bench-pro, path: {rows}, assets: {assets}, instance_ids: [{iid}]}}
agents:
  mini: {{type: mini-swe-agent, step_limit: 10}}
models:
  scripted: {{api: scripted}}
providers:
  docker: {{type: docker, memory: 4g}}
  apptainer: {{type: apptainer, overlay_size_mb: 2048}}
concurrency: 2
retries: {{max_attempts: 1}}
timeouts: {{agent: 600, grading: 1800}}
"""


@pytest.fixture(scope="session")
def pro_agent_rows(
    pro_images: dict[str, str], pro_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[tuple[str, str, str], TaskResult]:
    root = tmp_path_factory.mktemp("pro-agent")
    spec = root / "spec.yaml"
    spec.write_text(AGENT_SPEC.format(rows=pro_root / "rows.jsonl", assets=pro_root / "assets", iid=IDS[1]))
    return apply_spec(spec, root / "run")


@pytest.mark.parametrize("provider", PROVIDERS)
def test_mini_swe_agent_with_the_oracle_resolves_a_pro_instance(
    provider: str, pro_agent_rows: dict[tuple[str, str, str], TaskResult], pro_instances: dict[str, Instance]
) -> None:
    row = pro_agent_rows["mini", provider, IDS[1]]
    assert row.error_kind is None and row.resolved and not row.mask_sample, (row.error, row.exit_reason)
    assert row.model_calls >= 2
    assert diffs.touched_files(row.model_patch) == diffs.touched_files(pro_instances[IDS[1]].patch)
