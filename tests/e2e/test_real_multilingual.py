"""Real SWE-bench Multilingual C, C++ and JavaScript instance images, built here offline, graded by hand
with swebench's own tools and by anyswe on docker and apptainer (its gold census and ``anyswe apply``).

The images come from ``anyswe prepare images specs/multilingual.yaml --build --repo-mirror
../shared/swebench/repos`` (swebench 4.1.0's C and js_2 chains on Debian 12:
anyswe/images/multilingual_build.py). The reference for every verdict is swebench's own procedure run
with plain docker (tests/e2e/realkit.py): the patch by ``git apply -v``, swebench's eval script (which
rebuilds a C project: ``make``, ``cmake --build``; runs mocha, or karma in chromium), its log parser and
``get_eval_report``.
"""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from realkit import (
    ByHandRun,
    apply_spec,
    assert_census,
    census_cli,
    census_empty,
    census_gold_rows,
    docker,
    run_by_hand,
)

from anyswe.datasets.instance import Instance
from anyswe.grading import diffs
from anyswe.grading import swebench as sb
from anyswe.results.schema import TaskResult

# A session fixture's setup counts to its first test's timeout: the census grades every instance twice
# per runtime (redis's eval rebuilds it: 89 s idle), far past the default 900 s on busy CPUs.
pytestmark = [pytest.mark.containers, pytest.mark.real_images, pytest.mark.timeout(3600)]

REPO_ROOT = Path(__file__).resolve().parents[2]
SPEC = REPO_ROOT / "specs" / "multilingual.yaml"
C_IDS = ("jqlang__jq-2839", "fmtlib__fmt-3248", "redis__redis-12472")
JS_IDS = ("axios__axios-6539", "preactjs__preact-4152")
IDS = C_IDS + JS_IDS
PROVIDERS = ("docker", "apptainer")


@pytest.fixture(scope="session")
def ml_instances(shared_swebench: Path) -> dict[str, Instance]:
    from anyswe.plan import make_plan
    from anyswe.spec import load_spec

    plan = make_plan(load_spec(SPEC))
    found = {i.instance_id: i for i in plan.instances}
    assert sorted(found) == sorted(IDS)
    return found


@pytest.fixture(scope="session")
def ml_images(ml_instances: dict[str, Instance], repo_mirror: Path, docker_image: str) -> dict[str, str]:
    """instance_id -> its docker image, by the code path of `prepare images --build` (docker only)."""
    from anyswe.plan import make_plan
    from anyswe.prepare.images import prepare_images_async
    from anyswe.spec import load_spec

    plan = make_plan(load_spec(SPEC, ["matrix.providers=[docker]"]))
    report = asyncio.run(prepare_images_async(plan, jobs=1, build=True, repo_mirror=repo_mirror, progress=False))
    assert not report.failed, "\n".join(f"{j.ref}: {j.error}" for j in report.failed)
    return {i: sb.official_image(i) for i in ml_instances}


@pytest.fixture(scope="session")
def ml_by_hand(ml_images: dict[str, str], ml_instances: dict[str, Instance]) -> dict[str, dict[str, ByHandRun]]:
    """instance_id -> {"gold": run, "empty": run}: swebench's procedure with plain docker."""
    work = [(i, kind) for i in ml_images for kind in ("gold", "empty")]

    def one(item: tuple[str, str]) -> ByHandRun:
        i, kind = item
        return run_by_hand(ml_images[i], ml_instances[i], ml_instances[i].patch if kind == "gold" else "")

    with ThreadPoolExecutor(max_workers=2) as pool:
        runs = list(pool.map(one, work))
    out: dict[str, dict[str, ByHandRun]] = {}
    for (i, kind), run in zip(work, runs, strict=True):
        out.setdefault(i, {})[kind] = run
    return out


@pytest.fixture(scope="session")
def ml_verdicts(
    ml_by_hand: dict[str, dict[str, ByHandRun]], ml_instances: dict[str, Instance]
) -> dict[str, dict[str, dict[str, Any]]]:
    """instance_id -> {"gold"|"empty": {"resolved", "tests_status"}} by swebench's ``get_eval_report``."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for i, runs in ml_by_hand.items():
        for kind, run in runs.items():
            report = sb.eval_report(ml_instances[i], run.output, model_patch=run.patch)
            out.setdefault(i, {})[kind] = {"resolved": report["resolved"], "tests_status": report["tests_status"]}
    return out


# -- the images --------------------------------------------------------------------------------------


@pytest.mark.parametrize("instance_id", IDS)
def test_head_is_the_base_commit_with_nothing_after_it(
    instance_id: str, ml_images: dict[str, str], ml_instances: dict[str, Instance]
) -> None:
    from anyswe.images.multilingual_build import check_multilingual_image

    # swebench's C and JS chains make no setup commit: HEAD is the base commit, nothing after it is reachable.
    facts = asyncio.run(check_multilingual_image(ml_images[instance_id], ml_instances[instance_id]))
    assert facts["head"] == ml_instances[instance_id].base_commit and facts["after_base"] == []


def test_jqs_submodule_is_checked_out_at_its_gitlink_and_still_names_github(ml_images: dict[str, str]) -> None:
    script = (
        "cd /testbed && git submodule status && git config --get submodule.modules/oniguruma.url"
        " && git -C modules/oniguruma config --get remote.origin.url && test -f modules/oniguruma/src/oniguruma.h"
    )
    r = docker(
        "run", "--rm", "--network", "none", "--entrypoint", "/bin/bash", ml_images["jqlang__jq-2839"], "-c", script
    )
    assert r.returncode == 0, r.stderr
    # The gitlink of jq's base commit (../shared/swebench/repos/README.md), cloned from the mirror, with
    # the URL swebench's own image holds.
    assert r.stdout.split()[:2] == ["d2f1a14ced5d5d461acac0da0d477ab240a7ab5f", "modules/oniguruma"]
    assert r.stdout.split()[-2:] == ["https://github.com/kkos/oniguruma.git"] * 2


def test_each_image_names_what_differs_from_the_official_one(ml_images: dict[str, str]) -> None:
    for image in ml_images.values():
        r = docker("image", "inspect", "--format", '{{index .Config.Labels "org.anyswe.differs"}}', image)
        assert "Debian 12" in r.stdout and "local mirror" in r.stdout, (image, r.stdout, r.stderr)


@pytest.mark.parametrize("instance_id", JS_IDS)
def test_js_images_have_node_20_npm_and_chromium_where_swebenchs_have_them(
    instance_id: str, ml_images: dict[str, str]
) -> None:
    from anyswe.images.multilingual_build import NODE_VERSION, NPM_VERSION

    script = (
        "node -v; npm -v; command -v pnpm; $CHROME_BIN --version; echo $CHROME_PATH;"
        " test -d node_modules && echo node_modules; test -e /root/.anyswe-build-ca.crt || echo no-ca;"
        " echo ${NODE_EXTRA_CA_CERTS:-no-extra-ca}"
    )
    r = docker("run", "--rm", "--network", "none", "--entrypoint", "/bin/bash", ml_images[instance_id], "-c", script)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.split("\n")
    # corepack's pnpm shim is enabled (its first use fetches pnpm itself, as in swebench's image).
    assert lines[:3] == [f"v{NODE_VERSION}", NPM_VERSION, "/usr/local/bin/pnpm"], r.stdout
    assert lines[3].startswith("Chromium ") and lines[4] == "/usr/bin/chromium", r.stdout
    # The repo's packages are installed (`npm install` at build time); the build's CA is not in the image.
    assert lines[5:8] == ["node_modules", "no-ca", "no-extra-ca"], r.stdout


def test_no_copy_of_a_mirror_is_left_in_the_images(ml_images: dict[str, str]) -> None:
    for image in ml_images.values():
        r = docker(
            "run", "--rm", "--network", "none", "--entrypoint", "/bin/bash", image, "-c",
            "find / -xdev -name '*.git' -not -path '/testbed/*' -not -path /proc; ls /root",
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == ["setup_repo.sh"], f"{image}: {r.stdout}"


# -- by hand, with swebench's own eval script and get_eval_report ------------------------------------


@pytest.mark.parametrize("instance_id", IDS)
def test_gold_resolves_by_hand_and_an_empty_patch_does_not(
    instance_id: str, ml_by_hand: dict[str, Any], ml_verdicts: dict[str, Any]
) -> None:
    gold = ml_by_hand[instance_id]["gold"]
    assert gold.applied, gold.apply_output
    assert sb.END_TEST_OUTPUT in gold.output
    assert ml_verdicts[instance_id]["gold"]["resolved"] is True, ml_verdicts[instance_id]["gold"]["tests_status"]
    empty = ml_verdicts[instance_id]["empty"]
    assert empty["resolved"] is False and empty["tests_status"]["FAIL_TO_PASS"]["failure"]


# -- anyswe's own verdicts: the gold census (gold and empty passes), and `anyswe apply` --------------


@pytest.fixture(scope="session")
def ml_census(ml_images: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """``anyswe gold-check`` over the spec, one pass per provider: its directory and what it printed."""
    root = tmp_path_factory.mktemp("multilingual-census")
    r = census_cli(SPEC, root)
    return root / "census", r


@pytest.fixture(scope="session")
def ml_noop(
    ml_images: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> dict[tuple[str, str, str], TaskResult]:
    run_dir = tmp_path_factory.mktemp("multilingual-noop") / "run"
    return apply_spec(SPEC, run_dir, "matrix.agents=[noop]")


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("instance_id", IDS)
def test_anyswe_gold_and_empty_equal_swebench_by_hand(
    instance_id: str,
    provider: str,
    ml_census: tuple[Path, str],
    ml_noop: dict[tuple[str, str, str], TaskResult],
    ml_verdicts: dict[str, Any],
    ml_instances: dict[str, Instance],
) -> None:
    census, _ = ml_census
    gold = census_gold_rows(census)[instance_id, provider]
    assert gold.error_kind is None and not gold.mask_sample, gold.error
    assert gold.resolved is ml_verdicts[instance_id]["gold"]["resolved"]
    report = json.loads((census / "tasks" / gold.key / "report.json").read_text())[instance_id]
    assert report["tests_status"] == ml_verdicts[instance_id]["gold"]["tests_status"]
    # Captured against the base commit: the gold patch's files, no build output.
    assert diffs.touched_files(gold.model_patch) == diffs.touched_files(ml_instances[instance_id].patch)
    # The census's empty pass ran the tests on the image as built, as the by-hand empty run did.
    empty = census_empty(census)[instance_id, provider]
    assert empty["tests_status"] == ml_verdicts[instance_id]["empty"]["tests_status"]
    assert empty["verdict"] == "unresolved"
    # An agent's empty patch is unresolved without running anything, as swebench scores it.
    noop = ml_noop["noop", provider, instance_id]
    assert noop.error_kind is None and noop.model_patch == "" and noop.resolved is False, noop.error


def test_the_census_puts_every_instance_in_a_bucket_with_its_evidence(ml_census: tuple[Path, str]) -> None:
    census, printed = ml_census
    assert_census(census, IDS, PROVIDERS, printed)


# -- an agent ----------------------------------------------------------------------------------------

AGENT_SPEC = """\
name: multilingual-agent
dataset: {{name: swe-bench-multilingual, path: {rows}, instance_ids: [jqlang__jq-2839, axios__axios-6539]}}
agents:
  mini: {{type: mini-swe-agent, step_limit: 10}}
models:
  scripted: {{api: scripted}}
providers:
  docker: {{type: docker, image: "{image}", memory: 4g}}
  apptainer: {{type: apptainer, image: "{image}", overlay_size_mb: 2048}}
concurrency: 2
retries: {{max_attempts: 1}}
timeouts: {{agent: 600, grading: 1800}}
"""


@pytest.fixture(scope="session")
def ml_agent_rows(
    ml_images: dict[str, str], shared_swebench: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[tuple[str, str, str], TaskResult]:
    """mini-swe-agent with the scripted oracle on jq-2839 (C) and axios-6539 (JS), docker and apptainer,
    through `anyswe apply`."""
    root = tmp_path_factory.mktemp("multilingual-agent")
    spec = root / "spec.yaml"
    image = "swebench/sweb.eval.x86_64.{instance_id_docker}:latest"
    spec.write_text(AGENT_SPEC.format(rows=shared_swebench / "multilingual.jsonl", image=image))
    return apply_spec(spec, root / "run")


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("instance_id", ["jqlang__jq-2839", "axios__axios-6539"])
def test_mini_swe_agent_with_the_oracle_resolves_a_c_and_a_js_instance(
    instance_id: str,
    provider: str,
    ml_agent_rows: dict[tuple[str, str, str], TaskResult],
    ml_instances: dict[str, Instance],
) -> None:
    row = ml_agent_rows["mini", provider, instance_id]
    assert row.error_kind is None and row.resolved and not row.mask_sample, (row.error, row.exit_reason)
    # Its edit of the source, and nothing the image's build left in the work tree (jq's submodule's
    # outputs, axios's node_modules).
    assert row.model_calls >= 2
    assert diffs.touched_files(row.model_patch) == diffs.touched_files(ml_instances[instance_id].patch)
