"""The SWE-bench image build's offline decisions: mirrors, bases, refused rows, tags, prepare's jobs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from anyswe.datasets.instance import Instance
from anyswe.errors import ImageBuildError
from anyswe.images import swebench_build as sbb
from anyswe.images import swebench_env as se


def _rows(shared: Path, *ids: str) -> list[Instance]:
    rows = {r["instance_id"]: r for r in map(json.loads, (shared / "verified.jsonl").read_text().splitlines())}
    return [Instance.model_validate(rows[i]) for i in ids]


def test_the_mirror_is_found_under_each_accepted_name_and_a_missing_one_names_the_paths(tmp_path: Path) -> None:
    with pytest.raises(ImageBuildError) as exc:
        sbb.find_mirror(tmp_path, "pytest-dev/pytest")
    for tried in ("pytest.git", "pytest-dev__pytest.git", "pytest-dev/pytest.git"):
        assert str(tmp_path / tried) in str(exc.value)
    (tmp_path / "pytest-dev").mkdir()
    (tmp_path / "pytest-dev" / "pytest.git").mkdir()
    assert sbb.find_mirror(tmp_path, "pytest-dev/pytest") == tmp_path / "pytest-dev" / "pytest.git"
    (tmp_path / "pytest.git").mkdir()
    assert sbb.find_mirror(tmp_path, "pytest-dev/pytest") == tmp_path / "pytest.git"


def test_rows_whose_env_script_downloads_from_github_are_refused(shared_swebench: Path) -> None:
    (django,) = _rows(shared_swebench, "django__django-14725")
    with pytest.raises(ImageBuildError, match=r"requirements\.txt.*GitHub"):
        se.env_setup_script(django)
    (xarray,) = _rows(shared_swebench, "pydata__xarray-2905")
    with pytest.raises(ImageBuildError, match=r"environment\.yml"):
        se.env_setup_script(xarray)


def test_the_base_follows_the_spec_python(shared_swebench: Path) -> None:
    pytest_row, astropy = _rows(shared_swebench, "pytest-dev__pytest-8399", "astropy__astropy-7166")
    assert se.debian_release(pytest_row) == "bullseye"
    with pytest.raises(ImageBuildError, match=r"python 3\.6"):
        se.debian_release(astropy)


def test_env_tags_follow_the_script_and_the_base(shared_swebench: Path) -> None:
    a, b, c = _rows(shared_swebench, "sphinx-doc__sphinx-10323", "sphinx-doc__sphinx-11445", "pytest-dev__pytest-8399")
    base = sbb.base_tag("bullseye")
    assert base.startswith("anyswe/sweb.base.py.x86_64.bullseye-") and base != sbb.base_tag("bookworm")
    # The three sphinx rows share one env script, as swebench's env_image_key shares their image.
    assert sbb.env_tag(se.env_setup_script(a), base) == sbb.env_tag(se.env_setup_script(b), base)
    assert sbb.env_tag(se.env_setup_script(a), base) != sbb.env_tag(se.env_setup_script(c), base)
    assert sbb.env_tag(se.env_setup_script(a), base) != sbb.env_tag(se.env_setup_script(a), "other:latest")


def test_prepare_with_build_plans_local_builds_and_no_registry_sifs(shared_swebench: Path) -> None:
    from anyswe.plan import make_plan
    from anyswe.prepare.images import image_jobs
    from anyswe.spec import load_spec

    spec = Path(__file__).resolve().parents[2] / "specs" / "real_images.yaml"
    plan = make_plan(load_spec(spec))
    jobs = image_jobs(plan, artefact_source="registry", store_available=True, build=True)
    docker_jobs = [j for j in jobs if j.phase == "image"]
    assert len(docker_jobs) == 11 and all(j.build_instance is not None for j in docker_jobs)
    # The benchmark's own recipe builds them (Benchmark.build_instance), not a chain prepare knows.
    assert {j.build_by.name for j in docker_jobs if j.build_by is not None} == {"swe-bench-verified"}
    assert {j.ref for j in docker_jobs} == {f"swebench/sweb.eval.x86_64.{i.instance_id.replace('__', '_1776_')}:latest"
                                           for i in plan.instances}  # fmt: skip
    sifs = [j for j in jobs if j.phase == "sif"]
    assert len(sifs) == 11 and not any(j.from_registry for j in sifs)
    assert not any(j.build_instance for j in image_jobs(plan, store_available=True))


def test_build_needs_a_benchmark_with_an_offline_recipe(shared_swebench: Path, tmp_path: Path) -> None:
    """Rows from a plain file are of no benchmark: `--build` says to name one rather than guess a recipe."""
    from anyswe.errors import DatasetError
    from anyswe.plan import make_plan
    from anyswe.prepare.images import image_jobs
    from anyswe.spec import load_spec

    # A file of rows named after nothing known (`verified.jsonl` would route to Verified by its alias).
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        next(x for x in (shared_swebench / "verified.jsonl").read_text().splitlines() if "pytest-dev__pytest-8399" in x)
    )
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        f"name: s\ndataset: {{path: {rows}}}\n"
        "agents:\n  g: {type: gold}\nproviders:\n  d: {type: docker, image: 'swebench/x:{instance_id}'}\n"
    )
    plan = make_plan(load_spec(spec))
    with pytest.raises(DatasetError, match="--build: dataset 'rows' has no recipe that builds its images offline"):
        image_jobs(plan, store_available=True, build=True)
    assert [j.build_by for j in image_jobs(plan, store_available=True)] == [None]
