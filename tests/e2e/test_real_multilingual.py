"""Real SWE-bench Multilingual C, C++ and JavaScript instance images, built here offline, graded by hand
with swebench's own tools, and an agent on them through ``anyswe apply`` on docker and apptainer.
anyswe's own gold and noop verdicts on the same images are tests/e2e/test_real_multilingual_verdicts.py (what the two
share: tests/e2e/mlkit.py).

The images come from ``anyswe prepare images specs/multilingual.yaml --build --repo-mirror
../shared/swebench/repos`` (swebench 4.1.0's C and js_2 chains on Debian 12:
anyswe/images/multilingual_build.py). The reference for every verdict is swebench's own procedure run
with plain docker (tests/e2e/realkit.py): the patch by ``git apply -v``, swebench's eval script (which
rebuilds a C project: ``make``, ``cmake --build``; runs mocha, or karma in chromium), its log parser and
``get_eval_report``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from mlkit import IDS, JS_IDS, PROVIDERS
from realkit import apply_spec, docker

from anyswe.datasets.instance import Instance
from anyswe.grading import diffs
from anyswe.grading import swebench as sb
from anyswe.results.schema import TaskResult

# The shared fixtures (ml_instances, ml_images, ml_by_hand, ml_verdicts) as a plugin of this module.
pytest_plugins = ["mlkit"]
# A session fixture's setup counts to its first test's timeout: on a cold machine the images are built
# (and swebench's evals run by hand: redis's rebuilds it, 94 s of one core) before the first test.
pytestmark = [pytest.mark.containers, pytest.mark.real_images, pytest.mark.timeout(3600)]


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
