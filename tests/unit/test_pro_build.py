"""SWE-bench Pro's own Dockerfiles as anyswe builds them offline (anyswe/images/pro_build.py), over every
instance of the shared assets: what each substitution leaves, and what it refuses. The images themselves
are built and graded in tests/e2e/test_real_pro.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from anyswe.errors import ImageBuildError
from anyswe.images.pro_build import base_dockerfile, instance_dockerfile


@pytest.fixture(scope="module")
def dockerfiles(shared_swebench: Path) -> dict[str, tuple[str, str]]:
    root = shared_swebench.parent / "swebench_pro" / "assets" / "dockerfiles"
    if not root.is_dir():
        pytest.skip("../shared/swebench_pro is not here")
    return {
        d.name: (
            d.joinpath("Dockerfile").read_text(),
            (root / "instance_dockerfile" / d.name / "Dockerfile").read_text(),
        )
        for d in sorted((root / "base_dockerfile").iterdir())
    }


def test_python_bases_build_on_debian_from_the_mirror_and_others_say_they_cannot(
    dockerfiles: dict[str, tuple[str, str]],
) -> None:
    built = refused = 0
    for iid, (base, _) in dockerfiles.items():
        source = base.split("FROM ", 1)[1].split()[0]
        if not source.startswith("python:3.11"):
            with pytest.raises(ImageBuildError, match=f"its base is {re.escape(source)}"):
                base_dockerfile(base, "git://mirror/x.git")
            refused += 1
            continue
        text, repo = base_dockerfile(base, "git://mirror/x.git")
        assert "FROM anyswe/base:bookworm" in text and "python:3.11" not in text.split("\n", 1)[0]
        assert "github.com" not in text.split("git remote set-url")[0], iid  # cloned from the mirror only
        assert f"git remote set-url origin https://github.com/{repo}.git" in text
        built += 1
    assert built and refused  # both kinds are among the 100


def test_the_instance_build_keeps_every_step_but_the_proxy(dockerfiles: dict[str, tuple[str, str]]) -> None:
    for iid, (_, instance) in dockerfiles.items():
        text, files = instance_dockerfile(instance, "anyswe/sweap-base:x")
        assert text.startswith("FROM anyswe/sweap-base:x\n") and "<<" not in text, iid
        copied = re.search(r"^COPY \./(heredoc-\d+) /build\.sh$", text, re.M)
        build = files[copied.group(1)] if copied else None
        dates = re.findall(r"pypi-timemachine (\S+) ", instance)
        if dates:
            assert build is not None, iid
            assert "pypi-timemachine" not in build.replace("# anyswe: for pypi-timemachine", "")
            assert f"export PIP_UPLOADED_PRIOR_TO={dates[0]}" in build
            assert "127.0.0.1:9876" not in build
        # Every other line of every heredoc is there, word for word.
        for block in re.findall(r"<<'?(\w+)'? > \S+\n(.*?)\n\1\n", instance, re.S):
            kept = [line for line in block[1].split("\n") if "timemachine" not in line and "9876" not in line]
            assert any(all(line in body for line in kept if line.strip() != "sleep 3") for body in files.values()), iid
