"""Each kind of env script swebench 4.1.0 writes for a Python row, made here offline (images/swebench_env.py):
a requirements file read from the mirror through swebench's own functions, conda packages through the
stand-in's pip, an environment file refused by name; and the dry run's answer over all 500 Verified rows."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from anyswe.datasets.instance import Instance
from anyswe.errors import ImageBuildError
from anyswe.images import swebench_env as se
from anyswe.images.swebench_build import activate_script

ROOT = Path(__file__).resolve().parents[2]


def _rows(shared: Path) -> dict[str, Instance]:
    lines = (shared / "verified.jsonl").read_text().splitlines()
    return {r["instance_id"]: Instance.model_validate(r) for r in map(json.loads, lines)}


def test_a_requirements_file_is_read_from_the_mirror_as_swebench_reads_it_from_github(shared_swebench: Path) -> None:
    from swebench.harness.test_spec import python as py

    pylint = _rows(shared_swebench)["pylint-dev__pylint-7080"]
    assert se.env_kind(pylint) == "requirements.txt"
    mirror = shared_swebench / "repos" / "pylint.git"
    read = se.mirror_reader(mirror)
    top = read(pylint.environment_setup_commit, "requirements_test.txt")
    included = read(pylint.environment_setup_commit, "requirements_test_min.txt")
    assert top is not None and included is not None and "-r requirements_test_min.txt" in top
    script = se.env_setup_script(pylint, mirror)
    body = script.split("<<'EOF_59812759871' > $HOME/requirements.txt\n")[1].split("\nEOF_59812759871")[0]
    # swebench's own handling: the `-r` file's lines inlined, `-e .` and comments dropped, its yanked
    # package replaced (types-pkg_resources -> types-setuptools).
    assert "astroid==2.12.13  # Pinned to a specific version for tests" in body and "-r " not in body
    assert "types-setuptools" in body and "types-pkg_resources" not in body and "-e ." not in body
    assert "pytest-xdist~=2.5" in top and "pytest-xdist~=2.5" in body
    assert "conda create -n testbed python=3.9 -y" in script
    assert "python -m pip install -r $HOME/requirements.txt" in script
    assert py.requests.__name__ == "requests"  # swebench's own module is back after the call
    with pytest.raises(ImageBuildError, match=r"requirements\.txt.*--repo-mirror"):
        se.env_setup_script(pylint)
    # A commit without the file (a requests commit, in requests' mirror): swebench's own error, and where.
    requests = _rows(shared_swebench)["psf__requests-1724"]
    elsewhere = pylint.model_copy(update={"environment_setup_commit": requests.base_commit})
    with pytest.raises(ImageBuildError, match=r"Could not find requirements\.txt.*read from .*requests\.git"):
        se.env_setup_script(elsewhere, shared_swebench / "repos" / "requests.git")


def _pip_requirement(spec: str) -> str:
    script = activate_script().replace("_anyswe_conda_activate base\n", "") + f'\n_anyswe_pip_requirement "{spec}"\n'
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True, timeout=30).stdout


@pytest.mark.parametrize(
    ("conda", "pip"),
    [
        ("pytest", "pytest"),
        ("numpy=1.19", "numpy==1.19.*"),
        ("numpy==1.19.2", "numpy==1.19.2"),
        ("pandas<2.0.0", "pandas<2.0.0"),
        ("cython=3.0.*", "cython==3.0.*"),
        ("setuptools==38.2.4", "setuptools==38.2.4"),
        ("pytorch=2.1", "torch==2.1.*"),
    ],
)
def test_a_conda_package_of_the_create_line_is_asked_of_pip_by_its_meaning(conda: str, pip: str) -> None:
    assert _pip_requirement(conda) == pip


def test_the_dry_run_over_every_verified_row_refuses_none_of_the_96_with_a_mirror(shared_swebench: Path) -> None:
    """What ``prepare images --build --dry-run`` asks of each row's benchmark, over all 500 rows."""
    from anyswe.plan import make_plan
    from anyswe.prepare.images import _refuse_unbuildable, image_jobs
    from anyswe.spec import load_spec

    plan = make_plan(load_spec(ROOT / "specs" / "real_images.yaml", ["dataset.instance_ids=[]"]))
    jobs = [j for j in image_jobs(plan, store_available=True, build=True) if j.kind is None]
    assert len(jobs) == 500
    _refuse_unbuildable(jobs, shared_swebench / "repos", dry_run=True)
    buildable = {j.instance_id for j in jobs if j.status == "buildable"}
    mirrored = ("astropy__", "mwaskom__", "psf__", "pylint-dev__", "pytest-dev__", "sphinx-doc__")
    assert len(buildable) == 96 and all(i.startswith(mirrored) for i in buildable)
    reasons: dict[str, int] = {}
    for j in jobs:
        if j.status == "unbuildable":
            reasons[j.reason] = reasons.get(j.reason, 0) + 1
            assert j.instance_id.split("-")[0] in j.error or j.instance_id.split("__")[0] in j.error, j.error
    # 207 rows name a Python no Debian ships here; 27 (matplotlib, Python 3.11) an environment file; 165
    # have no mirror (django, matplotlib, scikit-learn, ...); 5 astropy base commits are not in the mirror.
    assert reasons == {"python": 207, "environment.yml": 27, "mirror": 165, "commit": 5}
