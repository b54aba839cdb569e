"""SWE-bench Pro (Scale AI): long-horizon tasks in Python, Go, JavaScript and TypeScript, graded by the
benchmark's own evaluation (anyswe/grading/pro.py), not swebench's.

Its rows come from a file (``path:``) or the local hub cache (``ScaleAI/SWE-bench_Pro``), and are read
into SWE-bench's schema here:

* ``fail_to_pass``, ``pass_to_pass``, ``selected_test_files_to_run`` and the issue labels are lists
  written as JSON or, in about a third of the published rows, as a Python literal in a string
  (``"['a', 'b']"``, which Pro's own eval reads with ``eval``): read with ``json.loads``, else
  ``ast.literal_eval`` (never ``eval``);
* ``FAIL_TO_PASS`` and ``PASS_TO_PASS`` are those lists;
* ``docker_image`` is the official image, ``jefzda/sweap-images:<tag>``, the tag as Pro's
  ``helper_code/image_uri.py`` derives it from the id and repository;
* ``pro_assets`` holds what grading runs, from the benchmark's assets directory (the dataset block's
  ``assets:``, default ``assets/`` beside the rows file): the instance's ``run_script.sh`` and
  ``parser.py``, and the ``ENV`` lines of its two Dockerfiles as Pro's entry script exports them.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from anyswe._files import name_problem
from anyswe.datasets.registry import Benchmark
from anyswe.errors import DatasetError

if TYPE_CHECKING:
    from anyswe.datasets.instance import Instance

#: Pro's Docker Hub namespace and repository for its instance images (its README).
IMAGE_REPOSITORY = "jefzda/sweap-images"
_LISTS = ("fail_to_pass", "pass_to_pass", "selected_test_files_to_run", "issue_specificity", "issue_categories")


def literal_list(value: Any, field: str) -> list[str]:
    """A list field as Pro's rows write it: a list, a JSON list, or a Python literal list in a string."""
    if isinstance(value, list):
        return [str(v) for v in value]
    if not isinstance(value, str):
        raise DatasetError(f"field {field!r}: expected a list, found {type(value).__name__}")
    try:
        parsed = json.loads(value)
    except ValueError:
        try:
            parsed = ast.literal_eval(value)
        except (ValueError, SyntaxError) as exc:
            raise DatasetError(f"field {field!r}: neither a JSON list nor a Python list literal: {exc}") from None
    if not isinstance(parsed, list):
        raise DatasetError(f"field {field!r}: expected a list, found {type(parsed).__name__}")
    return [str(v) for v in parsed]


def image_tag(instance_id: str, repo: str) -> str:
    """Pro's ``get_dockerhub_image_uri`` tag: ``<owner>.<name>-<id without instance_ and -vnan>``, at most 128."""
    owner, name = repo.lower().split("/")
    hsh = instance_id.replace("instance_", "")
    if instance_id == "instance_element-hq__element-web-ec0f940ef0e8e3b61078f145f34dc40d1938e6c5-vnan":
        name = "element-web"
    elif "element-hq" in repo.lower() and "element-web" in repo.lower():
        name = "element"
        hsh = hsh.removesuffix("-vnan")
    else:
        hsh = hsh.removesuffix("-vnan")
    return f"{owner}.{name}-{hsh}"[:128]


def env_exports(*dockerfiles: str) -> list[str]:
    """The ``ENV`` lines of the Dockerfiles as Pro's ``create_entryscript`` turns them into ``export``s."""
    out = []
    for text in dockerfiles:
        for line in text.split("\n"):
            line = line.strip()
            if line.startswith("ENV"):
                out.append(line.replace("ENV", "export", 1))
    return out


def instance_assets(assets: Path, instance_id: str) -> dict[str, Any]:
    """What grading (and an offline build) needs of one instance from Pro's assets directory."""

    def read(*parts: str) -> str:
        path = assets.joinpath(*parts)
        try:
            return path.read_text()
        except OSError as exc:
            raise DatasetError(f"SWE-bench Pro assets: cannot read {path}: {exc.strerror or exc}") from None

    base = read("dockerfiles", "base_dockerfile", instance_id, "Dockerfile")
    instance = read("dockerfiles", "instance_dockerfile", instance_id, "Dockerfile")
    return {
        "run_script": read("run_scripts", instance_id, "run_script.sh"),
        "parser": read("run_scripts", instance_id, "parser.py"),
        "env": env_exports(base, instance),
        "base_dockerfile": base,
        "instance_dockerfile": instance,
    }


class SWEbenchPro(Benchmark):
    name: ClassVar[str] = "swe-bench-pro"
    hub_names: ClassVar[tuple[str, ...]] = ("ScaleAI/SWE-bench_Pro",)
    aliases: ClassVar[tuple[str, ...]] = ("pro", "swebench-pro")
    harness: ClassVar[str] = "swebench-pro"
    image_template: ClassVar[str | None] = "{docker_image}"
    # An ansible instance image adds its repository and installed requirements to a shared base.
    instance_build_bytes: ClassVar[int] = 1 << 30

    async def build_instance(self, instance: Instance, repo_mirror: Path) -> str:
        # Pro's own two Dockerfiles, with the substitutions anyswe/images/pro_build.py names.
        from anyswe.images.pro_build import build_pro_image

        return (await build_pro_image(instance, repo_mirror)).summary

    def row(self, raw: dict[str, Any], source: Path | None, assets: Path | None) -> dict[str, Any]:
        row = dict(raw)
        for field in _LISTS:
            if field in row:
                row[field] = literal_list(row[field], field)
        if "FAIL_TO_PASS" not in row:
            row["FAIL_TO_PASS"] = row.get("fail_to_pass", [])
            row["PASS_TO_PASS"] = row.get("pass_to_pass", [])
        iid, repo = str(row.get("instance_id", "")), str(row.get("repo", ""))
        if iid and (problem := name_problem(iid)) is not None:  # before it names a path or an image
            raise DatasetError(f"a SWE-bench Pro row's instance_id {iid[:80]!r} {problem}")
        if "docker_image" not in row and iid and repo.count("/") == 1:
            row["docker_image"] = f"{IMAGE_REPOSITORY}:{image_tag(iid, repo)}"
        where = assets or (source.parent / "assets" if source is not None else None)
        if "pro_assets" not in row and iid:
            if where is None:
                raise DatasetError(f"{iid}: SWE-bench Pro needs its assets directory: set the dataset's `assets:`")
            row["pro_assets"] = instance_assets(where, iid)
        return row


__all__ = ["IMAGE_REPOSITORY", "SWEbenchPro", "env_exports", "image_tag", "instance_assets", "literal_list"]
