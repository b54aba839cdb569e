"""The one module through which anyswe uses swebench: its log parsers, eval scripts and verdict rules.

anyswe never re-implements SWE-bench's pass/fail rules; every verdict comes from swebench 4.1.0's
own ``get_eval_report``, so a resolve rate here means what it means on the official leaderboard.
swebench is imported lazily, and only the parts grading needs (by ``_swebench_lean``, this module's
private loader: swebench's package ``__init__`` would import docker, Modal and ``datasets``, about 3 s).
Its version is checked before first use: grading a SWE-bench instance with another version stops with
:class:`GradingError`, never falls back.
"""

from __future__ import annotations

import json
import re
import shlex
import tempfile
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from anyswe.errors import GradingError
from anyswe.grading import _swebench_lean

if TYPE_CHECKING:
    from anyswe.datasets.instance import Instance

REQUIRED_VERSION = "4.1.0"

# Eval-script markers, mirrored from swebench (checked equal on first use).
START_TEST_OUTPUT = ">>>>> Start Test Output"
END_TEST_OUTPUT = ">>>>> End Test Output"
APPLY_PATCH_FAIL = ">>>>> Patch Apply Failed"
APPLY_PATCH_PASS = ">>>>> Applied Patch"
TESTS_TIMEOUT = ">>>>> Tests Timed Out"


@cache
def _swebench() -> ModuleType:
    try:
        swebench = _swebench_lean.load()
    except ImportError as exc:
        raise GradingError(
            f"swebench is not installed or cannot be imported ({exc}); grading needs swebench=={REQUIRED_VERSION} "
            "(uv sync)"
        ) from exc
    version = getattr(swebench, "__version__", "unknown")
    if version != REQUIRED_VERSION:
        raise GradingError(
            f"swebench {version} is installed, but grading needs exactly {REQUIRED_VERSION}: "
            "verdicts depend on its log parsers and eval scripts"
        )
    from swebench.harness import constants

    for name, mine in (
        ("START_TEST_OUTPUT", START_TEST_OUTPUT),
        ("END_TEST_OUTPUT", END_TEST_OUTPUT),
        ("APPLY_PATCH_FAIL", APPLY_PATCH_FAIL),
        ("APPLY_PATCH_PASS", APPLY_PATCH_PASS),
        ("TESTS_TIMEOUT", TESTS_TIMEOUT),
    ):
        if getattr(constants, name, None) != mine:
            raise GradingError(f"swebench's {name} is not {mine!r}: the eval-script markers anyswe relies on changed")
    return swebench


def version() -> str:
    return str(_swebench().__version__)


def patch_apply_ladder() -> list[str]:
    """swebench's ``GIT_APPLY_CMDS``, in order; each takes the patch path as its last argument."""
    return list(_git_apply_cmds())


@cache
def _git_apply_cmds() -> tuple[str, ...]:
    # Read from run_evaluation's source, not imported: that module imports the docker SDK.
    _swebench()
    try:
        return tuple(_swebench_lean.git_apply_cmds())
    except (LookupError, OSError, SyntaxError) as exc:
        raise GradingError(f"swebench's patch-apply ladder (GIT_APPLY_CMDS) could not be read: {exc}") from exc


def known_repo(repo: str) -> bool:
    _swebench()
    from swebench.harness.constants import MAP_REPO_VERSION_TO_SPECS

    return repo in MAP_REPO_VERSION_TO_SPECS


def repo_version_specs() -> dict[str, dict[str, Any]]:
    """swebench's repo -> version -> install/test spec table (what an eval script is made from)."""
    _swebench()
    from swebench.harness.constants import MAP_REPO_VERSION_TO_SPECS

    return dict(MAP_REPO_VERSION_TO_SPECS)


def official_image(instance_id: str, namespace: str = "swebench", tag: str = "latest") -> str:
    """The instance image name swebench itself gives (``TestSpec.instance_image_key``), built offline."""
    _swebench()
    from swebench.harness.test_spec.test_spec import TestSpec

    spec = TestSpec(
        instance_id=instance_id,
        repo="",
        version="",
        repo_script_list=[],
        eval_script_list=[],
        env_script_list=[],
        arch="x86_64",
        FAIL_TO_PASS=[],
        PASS_TO_PASS=[],
        language="py",
        docker_specs={},
        namespace=namespace,
        instance_image_tag=tag,
    )
    return str(spec.instance_image_key)


def register_custom_repo(repo: str, version: str, *, test_cmd: str, parser: str = "pytest", **specs: Any) -> None:
    """Make ``repo``/``version`` known to swebench (its spec maps), graded by a named log parser.

    This is how datasets outside SWE-bench (the demo benchmark, local JSONL) are graded through the
    very same ``get_eval_report`` as SWE-bench itself.
    """
    _swebench()
    from swebench.harness.constants import MAP_REPO_TO_EXT, MAP_REPO_VERSION_TO_SPECS
    from swebench.harness.log_parsers import MAP_REPO_TO_PARSER
    from swebench.harness.log_parsers.python import parse_log_pytest

    parsers = {"pytest": parse_log_pytest}
    if parser not in parsers:
        raise GradingError(f"unknown log parser {parser!r}; known: {', '.join(parsers)}")
    MAP_REPO_VERSION_TO_SPECS.setdefault(repo, {})[version] = {"test_cmd": test_cmd, **specs}
    MAP_REPO_TO_PARSER[repo] = parsers[parser]
    MAP_REPO_TO_EXT.setdefault(repo, "py")


def _row(instance: Instance) -> dict[str, Any]:
    row = instance.model_dump()
    row["FAIL_TO_PASS"] = json.dumps(instance.FAIL_TO_PASS)
    row["PASS_TO_PASS"] = json.dumps(instance.PASS_TO_PASS)
    return row


def eval_script(instance: Instance) -> str:
    """The eval script swebench's ``make_eval_script_list`` builds for ``instance``, offline.

    ``make_test_spec`` would also build the environment script, which downloads requirement files
    for many instances; grading needs only the eval script.
    """
    specs = instance_specs(instance)
    from swebench.harness.test_spec.create_scripts import make_eval_script_list

    lines = make_eval_script_list(
        _row(instance), specs, "testbed", "/testbed", instance.base_commit, instance.test_patch
    )
    return "\n".join(["#!/bin/bash", "set -uxo pipefail", *lines]) + "\n"


def instance_specs(instance: Instance) -> dict[str, Any]:
    """swebench's spec (python, install, pre_install, test_cmd, ...) for ``instance``'s repo and version."""
    _swebench()
    from swebench.harness.constants import MAP_REPO_VERSION_TO_SPECS

    try:
        return dict(MAP_REPO_VERSION_TO_SPECS[instance.repo][instance.version])
    except KeyError:
        raise GradingError(
            f"{instance.instance_id}: swebench {REQUIRED_VERSION} has no spec for repo {instance.repo!r} "
            f"version {instance.version!r}"
        ) from None


def repo_script(instance: Instance, *, clone_from: str | None = None) -> str:
    """The instance image's repository setup, as swebench's ``make_repo_script_list`` writes it.

    Clone, ``git reset --hard <base_commit>``, remote and later tags removed, the spec's
    ``pre_install`` and ``install``, then ``git commit --allow-empty -am SWE-bench``: the setup
    commit every official image's HEAD is at. ``clone_from`` (a local repository) replaces only the
    clone from GitHub, for builds with no network but the package index; every other line is
    swebench's own.
    """
    _swebench()
    from swebench.harness.test_spec.create_scripts import make_repo_script_list

    lines = make_repo_script_list(instance_specs(instance), instance.repo, "/testbed", instance.base_commit, "testbed")
    if clone_from is not None:
        url = f"https://github.com/{instance.repo}"
        at = next((n for n, line in enumerate(lines) if line.startswith("git clone ") and url in line), None)
        if at is None:
            raise GradingError(f"{instance.instance_id}: swebench's repo script has no clone of {url} to replace")
        # All branches of the mirror (each base commit is on one); swebench clones one branch of
        # GitHub's. The remote, and every ref it brought, is removed a few lines later as swebench does.
        lines[at] = f"git clone -o origin {shlex.quote(clone_from)} /testbed"
    return "\n".join(["#!/bin/bash", "set -euxo pipefail", *lines]) + "\n"


def env_script(instance: Instance) -> str:
    """The environment image's setup script, as swebench's ``make_env_script_list`` writes it.

    For specs whose packages come from the repository's requirements or environment file,
    swebench downloads that file here (from GitHub): only the package index is reachable on an
    air-gapped host, so those rows need their env images from elsewhere.
    """
    _swebench()
    from swebench.harness.test_spec.create_scripts import make_env_script_list

    lines = make_env_script_list(_row(instance), instance_specs(instance), "testbed")
    return "\n".join(["#!/bin/bash", "set -euxo pipefail", *lines]) + "\n"


def _test_spec(instance: Instance) -> Any:
    _swebench()
    from swebench.harness.constants import MAP_REPO_TO_EXT
    from swebench.harness.test_spec.test_spec import TestSpec

    return TestSpec(
        instance_id=instance.instance_id,
        repo=instance.repo,
        version=instance.version,
        repo_script_list=[],
        eval_script_list=[],
        env_script_list=[],
        arch="x86_64",
        FAIL_TO_PASS=instance.FAIL_TO_PASS,
        PASS_TO_PASS=instance.PASS_TO_PASS,
        language=MAP_REPO_TO_EXT.get(instance.repo, "py"),
        docker_specs={},
        namespace=None,
    )


def eval_report(instance: Instance, test_output: str, *, model_patch: str | None = "x") -> dict[str, Any]:
    """swebench's ``get_eval_report`` for a test log: ``{resolved, patch_successfully_applied, tests_status,...}``.

    Includes swebench's fallback to the whole log when the marked span has no results.
    """
    _swebench()
    from swebench.harness.grading import get_eval_report
    from swebench.harness.log_parsers import MAP_REPO_TO_PARSER

    if instance.repo not in MAP_REPO_TO_PARSER:
        raise GradingError(f"{instance.instance_id}: swebench has no log parser for repo {instance.repo!r}")
    with tempfile.TemporaryDirectory(prefix="anyswe-grade-") as tmp:
        log_path = Path(tmp) / "test_output.txt"
        log_path.write_text(test_output)
        prediction = {"instance_id": instance.instance_id, "model_name_or_path": "anyswe", "model_patch": model_patch}
        try:
            report = get_eval_report(_test_spec(instance), prediction, str(log_path), include_tests_status=True)
        except Exception as exc:  # a parser crash on a strange log is a grading error, not a verdict
            raise GradingError(f"{instance.instance_id}: swebench could not grade the log: {exc!r}") from exc
    result: dict[str, Any] = report[instance.instance_id]
    result.setdefault("tests_status", _empty_tests_status())
    return result


def _empty_tests_status() -> dict[str, dict[str, list[str]]]:
    return {k: {"success": [], "failure": []} for k in ("FAIL_TO_PASS", "PASS_TO_PASS", "FAIL_TO_FAIL", "PASS_TO_FAIL")}


def modified_files(patch: str) -> list[str]:
    """The files a diff touches, by swebench's own reading."""
    _swebench()
    from swebench.harness.utils import get_modified_files

    return list(get_modified_files(patch))


def patch_targets(patch: str) -> list[str]:
    """Every file a diff leaves behind (added and modified, not deleted), in diff order."""
    _swebench()
    from unidiff import PatchSet  # type: ignore[attr-defined]

    out = []
    for f in PatchSet(patch):
        if f.target_file != "/dev/null" and f.target_file.startswith("b/"):
            out.append(f.target_file[2:])
    return out


def touched_files(patch: str) -> set[str]:
    """Every path a diff reads or writes (old and new names of a rename, added and deleted files).

    By unidiff, as swebench reads diffs; a diff unidiff cannot parse falls back to its
    ``diff --git a/X b/Y`` headers, so a strange patch never yields an empty set by accident.
    """
    if not patch.strip():
        return set()
    _swebench()
    from unidiff import PatchSet  # type: ignore[attr-defined]
    from unidiff.errors import UnidiffParseError

    out: set[str] = set()
    try:
        for f in PatchSet(patch):
            for name in (f.source_file, f.target_file):
                if name and name != "/dev/null":
                    out.add(_without_prefix(name))
    except UnidiffParseError:
        pass
    for m in re.finditer(r"^diff --git a/(\S+) b/(\S+)$", patch, re.MULTILINE):
        out.update(m.groups())
    return out


def changed_lines(patch: str) -> dict[str, tuple[list[str], list[str]]]:
    """Per file a diff writes (its new name; a deleted file by its old one): the lines it adds and removes.

    By unidiff, as swebench reads diffs; a patch unidiff cannot parse has none.
    """
    if not patch.strip():
        return {}
    _swebench()
    from unidiff import PatchSet  # type: ignore[attr-defined]
    from unidiff.errors import UnidiffParseError

    out: dict[str, tuple[list[str], list[str]]] = {}
    try:
        for f in PatchSet(patch):
            name = f.target_file if f.target_file != "/dev/null" else f.source_file
            added = [line.value for hunk in f for line in hunk if line.is_added]
            removed = [line.value for hunk in f for line in hunk if line.is_removed]
            out[_without_prefix(name)] = (added, removed)
    except UnidiffParseError:
        return {}
    return out


def new_files(patch: str) -> set[str]:
    """The paths a diff creates: added files, and the new names of renamed or copied ones (a path that
    did not exist before the patch). By unidiff, as :func:`changed_lines`; a patch unidiff cannot parse
    has none."""
    if not patch.strip():
        return set()
    _swebench()
    from unidiff import PatchSet  # type: ignore[attr-defined]
    from unidiff.errors import UnidiffParseError

    out: set[str] = set()
    try:
        for f in PatchSet(patch):
            source, target = _without_prefix(f.source_file), _without_prefix(f.target_file)
            if f.target_file != "/dev/null" and (f.is_added_file or source != target):
                out.add(target)
    except UnidiffParseError:
        return set()
    return out


def changed_in_context(patch: str) -> dict[str, list[tuple[str, str, str]]]:
    """Per file a diff writes: each line it adds or removes with the last section header (``[...]``)
    and the last unindented key (``name =`` / ``name:``) before it, as far as its hunk shows them (its
    context lines and git's hunk header; "" where they do not): a continuation line of a multi-line
    INI or TOML value is read as part of its key. By unidiff, as :func:`changed_lines`."""
    if not patch.strip():
        return {}
    _swebench()
    from unidiff import PatchSet  # type: ignore[attr-defined]
    from unidiff.errors import UnidiffParseError

    out: dict[str, list[tuple[str, str, str]]] = {}
    try:
        for f in PatchSet(patch):
            name = f.target_file if f.target_file != "/dev/null" else f.source_file
            seen = out.setdefault(_without_prefix(name), [])
            for hunk in f:
                # git's hunk header names the last line before the hunk that starts with a letter (its
                # default funcname): for a config file, often the key a multi-line value belongs to.
                head = _KEY.match(hunk.section_header or "")
                section, key = "", head.group(1) if head else ""
                for line in hunk:
                    text = line.value.rstrip("\n")
                    if line.is_added or line.is_removed:
                        seen.append((section, key, text))
                    if _SECTION.match(text):
                        section, key = text.strip(), ""
                    elif _KEY.match(text):
                        key = _KEY.match(text).group(1)  # type: ignore[union-attr]
    except UnidiffParseError:
        return {}
    return out


_SECTION = re.compile(r"^\s*\[[^\]]+\]\s*$")
_KEY = re.compile(r"^([A-Za-z_][\w.-]*)\s*[=:]")


def _without_prefix(name: str) -> str:
    """A diff's file name without git's ``a/`` or ``b/``."""
    return name[2:] if name[:2] in ("a/", "b/") else name
