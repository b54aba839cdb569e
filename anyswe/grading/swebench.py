"""The one module through which anyswe uses swebench: its log parsers, eval scripts and verdict rules.

anyswe never re-implements SWE-bench's pass/fail rules; every verdict comes from swebench 4.1.0's
own ``get_eval_report``, so a resolve rate here means what it means on the official leaderboard.
swebench is imported lazily, and only the parts grading needs (by ``_swebench_lean``, this module's
private loader: swebench's package ``__init__`` would import docker, Modal and ``datasets``, about 3 s).
Its version is checked before first use: grading a SWE-bench instance with another version stops with
:class:`GradingError`, never falls back.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import TYPE_CHECKING, Any

from anyswe._files import scratch_file
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


@cache
def _official_repos() -> frozenset[str]:
    """The repositories swebench ships specs for, read once: routing never sees a :class:`RepoSpec`."""
    _swebench()
    from swebench.harness.constants import MAP_REPO_VERSION_TO_SPECS

    return frozenset(MAP_REPO_VERSION_TO_SPECS)


def known_repo(repo: str) -> bool:
    return repo in _official_repos()


def repo_language(repo: str) -> str:
    """swebench's language of an official repository (``MAP_REPO_TO_EXT``: py, c, js, go, ...); "" if unknown."""
    if not known_repo(repo):
        return ""
    from swebench.harness.constants import MAP_REPO_TO_EXT

    return str(MAP_REPO_TO_EXT.get(repo, ""))


_OVERLAY = threading.Lock()
_FETCH = threading.Lock()  # swebench's module-level `requests`, replaced for one env script at a time


@contextlib.contextmanager
def _given(instance: Instance, repo: RepoSpec | None) -> Iterator[None]:
    """While one of swebench's script builders runs, ``repo``'s spec where it looks (its maps, keyed by
    repository): those builders read them inside, whatever spec they are given. Under a lock, for that
    call only, and only for a repository swebench does not know; removed again on every path."""
    if repo is None:
        yield
        return
    # known_repo reads (and caches) swebench's own maps before any overlay is first written: the
    # snapshot never holds a RepoSpec's repository.
    if known_repo(instance.repo):
        raise GradingError(f"{instance.instance_id}: {instance.repo!r} is swebench's own; its spec is swebench's")
    from swebench.harness.constants import MAP_REPO_TO_EXT, MAP_REPO_VERSION_TO_SPECS

    with _OVERLAY:
        MAP_REPO_VERSION_TO_SPECS[instance.repo] = {instance.version: dict(repo.specs)}
        MAP_REPO_TO_EXT[instance.repo] = repo.ext
        try:
            yield
        finally:
            del MAP_REPO_VERSION_TO_SPECS[instance.repo], MAP_REPO_TO_EXT[instance.repo]


def repo_version_specs() -> dict[str, dict[str, Any]]:
    """swebench's repo -> version -> install/test spec table (what an eval script is made from)."""
    _swebench()
    from swebench.harness.constants import MAP_REPO_VERSION_TO_SPECS

    with _OVERLAY:  # an overlay added or removed by another thread mid-iteration would break it
        return {repo: dict(v) for repo, v in MAP_REPO_VERSION_TO_SPECS.items() if known_repo(repo)}


def official_image(instance_id: str, namespace: str = "swebench", tag: str = "latest") -> str:
    """The instance image name swebench itself gives (``TestSpec.instance_image_key``), built offline."""
    return str(_spec_of(instance_id, namespace=namespace, instance_image_tag=tag).instance_image_key)


#: The swebench log parsers a :class:`RepoSpec` can name.
_PARSERS = {"pytest": ("swebench.harness.log_parsers.python", "parse_log_pytest")}


@dataclass(frozen=True)
class RepoSpec:
    """A repository swebench does not know, handed to each call that needs it: its spec (``test_cmd``,
    ``install``, ``pre_install``, ...) and the swebench log parser that reads its tests.

    Never written into swebench's maps: what one dataset declares cannot change how another row is
    routed (:func:`known_repo`) or graded, whatever ran before in the process.
    """

    specs: Mapping[str, Any]
    parser: str = "pytest"
    ext: str = "py"

    @classmethod
    def of(cls, *, test_cmd: str | list[str], parser: str = "pytest", **specs: Any) -> RepoSpec:
        if parser not in _PARSERS:
            raise GradingError(f"unknown log parser {parser!r}; known: {', '.join(_PARSERS)}")
        return cls({"test_cmd": test_cmd, **specs}, parser)

    def parse(self, log: str, test_spec: Any) -> dict[str, str]:
        import importlib

        _swebench()
        module, name = _PARSERS[self.parser]
        return dict(getattr(importlib.import_module(module), name)(log, test_spec))


def _row(instance: Instance) -> dict[str, Any]:
    row = instance.model_dump()
    row["FAIL_TO_PASS"] = json.dumps(instance.FAIL_TO_PASS)
    row["PASS_TO_PASS"] = json.dumps(instance.PASS_TO_PASS)
    return row


def eval_script(instance: Instance, repo: RepoSpec | None = None) -> str:
    """The eval script swebench's ``make_eval_script_list`` builds for ``instance``, offline.

    ``make_test_spec`` would also build the environment script, which downloads requirement files
    for many instances; grading needs only the eval script.
    """
    specs = instance_specs(instance, repo)
    from swebench.harness.test_spec.create_scripts import make_eval_script_list

    with _given(instance, repo):
        lines = make_eval_script_list(
            _row(instance), specs, "testbed", "/testbed", instance.base_commit, instance.test_patch
        )
    return "\n".join(["#!/bin/bash", "set -uxo pipefail", *lines]) + "\n"


def instance_specs(instance: Instance, repo: RepoSpec | None = None) -> dict[str, Any]:
    """swebench's spec (python, install, pre_install, test_cmd, ...) for ``instance``'s repo and version
    (``repo``'s own for a repository swebench does not know)."""
    if repo is not None:
        return dict(repo.specs)
    _swebench()
    from swebench.harness.constants import MAP_REPO_VERSION_TO_SPECS

    try:
        return dict(MAP_REPO_VERSION_TO_SPECS[instance.repo][instance.version])
    except KeyError:
        raise GradingError(
            f"{instance.instance_id}: swebench {REQUIRED_VERSION} has no spec for repo {instance.repo!r} "
            f"version {instance.version!r}"
        ) from None


def repo_script(instance: Instance, *, clone_from: str | None = None, repo: RepoSpec | None = None) -> str:
    """The instance image's repository setup, as swebench's ``make_repo_script_list`` writes it.

    Clone, ``git reset --hard <base_commit>``, remote and later tags removed, the spec's
    ``pre_install`` and ``install``, then ``git commit --allow-empty -am SWE-bench``: the setup
    commit every official image's HEAD is at. ``clone_from`` (a local repository) replaces only the
    clone from GitHub, for builds with no network but the package index; every other line is
    swebench's own.
    """
    _swebench()
    from swebench.harness.test_spec.create_scripts import make_repo_script_list

    specs = instance_specs(instance, repo)
    with _given(instance, repo):
        lines = make_repo_script_list(specs, instance.repo, "/testbed", instance.base_commit, "testbed")
    if clone_from is not None:
        url = f"https://github.com/{instance.repo}"
        at = next((n for n, line in enumerate(lines) if line.startswith("git clone ") and url in line), None)
        if at is None:
            raise GradingError(f"{instance.instance_id}: swebench's repo script has no clone of {url} to replace")
        # All the mirror's branches (a base commit is on one of them); swebench then removes the remote's refs.
        lines[at] = f"git clone -o origin {shlex.quote(clone_from)} /testbed"
    return "\n".join(["#!/bin/bash", "set -euxo pipefail", *lines]) + "\n"


def env_script(
    instance: Instance, repo: RepoSpec | None = None, *, read_file: Callable[[str, str], str | None] | None = None
) -> str:
    """The environment image's setup script, as swebench's ``make_env_script_list`` writes it. Where the spec
    installs the repository's requirements or environment file, swebench downloads it from GitHub's raw
    file host: ``read_file(commit, path)`` (its text, None if absent) answers instead, from a mirror. What
    swebench does with the file (paths tried, ``-r`` includes, lines dropped, replacements) stays its own."""
    _swebench()
    from swebench.harness.test_spec import python as py
    from swebench.harness.test_spec.create_scripts import make_env_script_list

    with _given(instance, repo), _FETCH:
        fetch, py.requests = py.requests, (py.requests if read_file is None else _RawFiles(instance.repo, read_file))
        try:
            lines = make_env_script_list(_row(instance), instance_specs(instance, repo), "testbed")
        except ValueError as exc:  # swebench's "Could not find requirements.txt at paths [...]"
            raise GradingError(f"{instance.instance_id}: {exc}") from None
        finally:
            py.requests = fetch
    return "\n".join(["#!/bin/bash", "set -euxo pipefail", *lines]) + "\n"


@dataclass(frozen=True)
class _RawFiles:
    """``requests`` as swebench's env script builder uses it: ``get(<raw host>/<repo>/<commit>/<path>)``."""

    repo: str
    read: Callable[[str, str], str | None]

    def get(self, url: str, **_options: Any) -> Any:
        from swebench.harness.constants import SWE_BENCH_URL_RAW

        commit, _, path = url.removeprefix(SWE_BENCH_URL_RAW).removeprefix(f"{self.repo}/").partition("/")
        text = self.read(commit, os.path.normpath(path))
        return SimpleNamespace(status_code=404 if text is None else 200, text=text or "")


def _spec_of(instance_id: str, **fields: Any) -> Any:
    """swebench's ``TestSpec`` of an instance with only ``fields`` known (no scripts: anyswe makes those)."""
    _swebench()
    from swebench.harness.test_spec.test_spec import TestSpec

    empty: dict[str, Any] = dict(repo="", version="", FAIL_TO_PASS=[], PASS_TO_PASS=[], language="py", namespace=None)
    scripts: dict[str, Any] = dict(repo_script_list=[], eval_script_list=[], env_script_list=[], docker_specs={})
    return TestSpec(instance_id=instance_id, arch="x86_64", **scripts, **{**empty, **fields})


def _test_spec(instance: Instance, repo: RepoSpec | None = None) -> Any:
    _swebench()
    from swebench.harness.constants import MAP_REPO_TO_EXT

    language = repo.ext if repo is not None else MAP_REPO_TO_EXT.get(instance.repo, "py")
    return _spec_of(
        instance.instance_id, repo=instance.repo, version=instance.version, FAIL_TO_PASS=instance.FAIL_TO_PASS,
        PASS_TO_PASS=instance.PASS_TO_PASS, language=language,
    )  # fmt: skip


def log_parser(instance: Instance, repo: RepoSpec | None = None) -> Callable[[str], dict[str, str]]:
    """The log parser swebench grades ``instance`` with (``repo``'s for a repository it does not know),
    as a function of a log's text: test name -> status."""
    spec = _test_spec(instance, repo)
    if repo is not None:
        return lambda text: repo.parse(text, spec)
    from swebench.harness.log_parsers import MAP_REPO_TO_PARSER

    if instance.repo not in MAP_REPO_TO_PARSER:
        raise GradingError(f"{instance.instance_id}: swebench has no log parser for repo {instance.repo!r}")
    parser = MAP_REPO_TO_PARSER[instance.repo]
    return lambda text: dict(parser(text, spec))


def runs_pytest(instance: Instance, repo: RepoSpec | None = None) -> bool:
    """Whether swebench's test command for ``instance`` runs pytest (directly, or through tox as sphinx's)."""
    command = instance_specs(instance, repo).get("test_cmd", "")
    text = " ".join(command) if isinstance(command, list) else str(command)
    return "pytest" in text or text.startswith("tox ")


def eval_report(
    instance: Instance, test_output: str | Path, *, model_patch: str | None = "x", repo: RepoSpec | None = None
) -> dict[str, Any]:
    """swebench's ``get_eval_report`` for a test log: ``{resolved, patch_successfully_applied, tests_status,...}``.

    Includes swebench's fallback to the whole log when the marked span has no results. ``repo``: a
    repository swebench does not know, graded by the same rules with its own spec and parser.
    ``test_output``: the log, or the file holding it (undecodable bytes replaced).
    """
    _swebench()
    from swebench.harness.grading import get_eval_report
    from swebench.harness.log_parsers import MAP_REPO_TO_PARSER

    if repo is not None:
        text = test_output.read_text(errors="replace") if isinstance(test_output, Path) else test_output
        return _report_of(instance, text, model_patch, repo)
    if instance.repo not in MAP_REPO_TO_PARSER:
        raise GradingError(f"{instance.instance_id}: swebench has no log parser for repo {instance.repo!r}")
    log_path = str(test_output) if isinstance(test_output, Path) else scratch_file(test_output)
    prediction = {"instance_id": instance.instance_id, "model_name_or_path": "anyswe", "model_patch": model_patch}
    try:
        report = get_eval_report(_test_spec(instance), prediction, log_path, include_tests_status=True)
    except Exception as exc:  # a parser crash on a strange log is a grading error, not a verdict
        if isinstance(exc, UnicodeDecodeError) and isinstance(test_output, Path):
            # swebench reads the file as UTF-8: what is not is replaced, as a log read here always was.
            return eval_report(instance, test_output.read_text(errors="replace"), model_patch=model_patch)
        raise GradingError(f"{instance.instance_id}: swebench could not grade the log: {exc!r}") from exc
    result: dict[str, Any] = report[instance.instance_id]
    result.setdefault("tests_status", _empty_tests_status())
    return result


def _report_of(instance: Instance, log: str, model_patch: str | None, repo: RepoSpec) -> dict[str, Any]:
    """``get_eval_report`` with ``repo``'s spec and parser given rather than looked up in swebench's maps:
    ``get_logs_eval``'s rules (a bad code or missing markers: not applied; the marked span, else the
    whole log, parsed), then swebench's own ``get_eval_tests_report`` and ``get_resolution_status``."""
    from swebench.harness import constants as c
    from swebench.harness.grading import get_eval_tests_report, get_resolution_status

    # swebench reads the log from a file in text mode: universal newlines, so a lone "\r" ends a line.
    log = log.replace("\r\n", "\n").replace("\r", "\n")
    result: dict[str, Any] = {"patch_is_None": model_patch is None, "patch_exists": model_patch is not None}
    result |= {"patch_successfully_applied": False, "resolved": False, "tests_status": _empty_tests_status()}
    bad = (c.APPLY_PATCH_FAIL, c.RESET_FAILED, c.TESTS_ERROR, c.TESTS_TIMEOUT)
    if model_patch is None or any(code in log for code in bad):
        return result
    if not (c.START_TEST_OUTPUT in log and c.END_TEST_OUTPUT in log):
        return result
    spec = _test_spec(instance, repo)
    try:
        status = repo.parse(log.split(c.START_TEST_OUTPUT)[1].split(c.END_TEST_OUTPUT)[0], spec) or repo.parse(
            log, spec
        )
    except Exception as exc:  # as above: a parser crash is a grading error
        raise GradingError(f"{instance.instance_id}: swebench could not grade the log: {exc!r}") from exc
    ref = {"instance_id": instance.instance_id, "FAIL_TO_PASS": spec.FAIL_TO_PASS, "PASS_TO_PASS": spec.PASS_TO_PASS}
    eval_type = c.EvalType.FAIL_ONLY if instance.repo in c.FAIL_ONLY_REPOS else c.EvalType.PASS_AND_FAIL
    tests = get_eval_tests_report(status, ref, eval_type=eval_type)
    result |= {"patch_successfully_applied": True, "tests_status": tests}
    result["resolved"] = get_resolution_status(tests) == c.ResolvedStatus.FULL.value
    return result


def _empty_tests_status() -> dict[str, dict[str, list[str]]]:
    return {k: {"success": [], "failure": []} for k in ("FAIL_TO_PASS", "PASS_TO_PASS", "FAIL_TO_FAIL", "PASS_TO_FAIL")}


def modified_files(patch: str) -> list[str]:
    """The files a diff touches, by swebench's own reading."""
    _swebench()
    from swebench.harness.utils import get_modified_files

    return list(get_modified_files(patch))
