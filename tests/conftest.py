"""Shared fixtures: real docker and apptainer runtimes, the base image and its SIF.

Container tests never skip in CI (``CI=true``): a missing runtime there is a failure. Elsewhere they
skip with the reason, so the unit tests still run on a laptop without runtimes.

Tiers: every test under tests/e2e and tests/containers, and every test anywhere that asks for a
runtime fixture, is marked ``containers`` here, so ``-m "not containers"`` (``just test-unit``) is a
tier that needs no docker, apptainer or Ray. A unit-dir test that reaches a runtime some other way
carries the marker itself.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from anyswe.config import base_image

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
PROVIDERS = ["docker", "apptainer"]


#: Test directories whose every test needs the runtimes (or Ray, which starts them).
CONTAINER_DIRS = ("e2e", "containers")
#: Fixtures that start or need a runtime: a test asking for one is a container test wherever it is.
RUNTIME_FIXTURES = frozenset({"docker_image", "sif_image", "provider_image", "bullseye_image", "runtimes", "registry"})


def needs_containers(item: pytest.Item) -> bool:
    """Whether the test needs the runtimes: by its directory or by the fixtures it asks for."""
    parts = Path(str(item.path)).relative_to(Path(__file__).parent).parts
    return parts[0] in CONTAINER_DIRS or bool(RUNTIME_FIXTURES & set(getattr(item, "fixturenames", ())))


#: The container tier's longest files, longest first (seconds per file in a CI log's summary below; the
#: order of a warm rehearsal at d780503, the real tiers' census out of CI).
#: The tier runs on pytest-xdist workers a file at a time (--dist loadfile) in collection order
#: (--no-loadscope-reorder: xdist would otherwise order files by their number of tests, which put the
#: 1,000-rollout leak test, one test of over four minutes, last of all, with one worker idle). The
#: longest first, then the rest in their order: the workers end close together.
LONGEST_FIRST = (
    "e2e/test_real_images.py",
    "e2e/test_real_multilingual_verdicts.py",
    "e2e/test_cli_agent_edges.py",
    "e2e/test_real_multilingual.py",
    "e2e/test_cli_agents.py",
    "e2e/test_triage.py",
    "containers/test_sandbox_conformance.py",
    "e2e/test_fault_suite.py",
    "e2e/test_fault_orchestrator.py",
    "e2e/test_gold_check.py",
    "e2e/test_mini_swe_agent.py",
    "e2e/test_prepare_images.py",
    "e2e/test_serve.py",
    "e2e/test_resume.py",
    "containers/test_inspect_conformance.py",
    "e2e/test_faults.py",
    "e2e/test_real_pro.py",
)


def _file_rank(item: pytest.Item) -> int:
    path = Path(str(item.path)).relative_to(Path(__file__).parent).as_posix()
    return LONGEST_FIRST.index(path) if path in LONGEST_FIRST else len(LONGEST_FIRST)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Marked here rather than trusted to each module's pytestmark: a module that forgets it would
    # otherwise land in the unit tier and fail (or hang) on a machine without runtimes.
    for item in items:
        if needs_containers(item) and item.get_closest_marker("containers") is None:
            item.add_marker(pytest.mark.containers)
    items.sort(key=_file_rank)  # stable: a file's tests keep their order


#: The fault suite's seed (tests/e2e/faultkit.py reads it): one for the whole session.
FAULT_SEED_VAR = "ANYSWE_FAULT_SEED"


def pytest_configure(config: pytest.Config) -> None:
    # Chosen here, before pytest-xdist spawns its workers: they inherit it, so every worker uses the
    # one seed that the header below prints.
    if not os.environ.get(FAULT_SEED_VAR, "").strip():
        os.environ[FAULT_SEED_VAR] = str(random.SystemRandom().randrange(2**32))


def pytest_report_header(config: pytest.Config) -> str:
    seed = os.environ[FAULT_SEED_VAR]
    return f"fault seed {seed} ({FAULT_SEED_VAR}={seed} repeats every random moment of the fault suite)"


#: Seconds per test file (setup, call and teardown of its tests): pytest's --durations names the
#: slowest tests; this names where a tier's time goes, file by file, in every CI log.
_FILE_SECONDS: dict[str, float] = {}
#: When each file ran (seconds from the session's start: its first test's setup, its last report) and
#: on which pytest-xdist worker: a worker idle at the end of the tier, or a file that starts late and
#: runs long, shows here (CI's budget: bench/ci_budget.py measures how busy the cores were).
_FILE_SPAN: dict[str, tuple[float, float, str]] = {}
_SESSION_START = time.monotonic()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = report.nodeid.split("::", 1)[0]
    _FILE_SECONDS[path] = _FILE_SECONDS.get(path, 0.0) + report.duration
    now = time.monotonic() - _SESSION_START
    gateway = getattr(getattr(report, "node", None), "gateway", None)  # the worker, under xdist
    first, _, worker = _FILE_SPAN.get(path, (now - report.duration, 0.0, str(getattr(gateway, "id", "-"))))
    _FILE_SPAN[path] = (first, now, worker)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _FILE_SECONDS:
        return
    total = sum(_FILE_SECONDS.values())
    terminalreporter.section(f"seconds per test file (summed over workers: {total:.0f} s)")
    for path, seconds in sorted(_FILE_SECONDS.items(), key=lambda kv: -kv[1])[:25]:
        start, end, worker = _FILE_SPAN[path]
        span = f"{start:5.0f}-{end:.0f} s on {worker}".ljust(22)
        terminalreporter.write_line(f"{seconds:8.1f}s  {100 * seconds / total:4.1f}%  {span}  {path}")


def _unavailable(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"{reason} (container tests must run in CI: run scripts/provision.sh)")
    pytest.skip(reason)


def _works(argv: list[str]) -> bool:
    if shutil.which(argv[0]) is None:
        return False
    try:
        return subprocess.run(argv, capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="session")
def shared_swebench() -> Path:
    """../shared/swebench (the real SWE-bench rows and logs)."""
    path = SHARED / "swebench"
    if not path.is_dir():
        _unavailable(f"shared data not found at {path}")
    return path


@pytest.fixture(scope="session")
def chromium() -> str:
    path = shutil.which("chromium")
    if path is None:
        _unavailable("chromium is not installed (scripts/provision.sh browser)")
    return str(path)


@pytest.fixture(scope="session")
def docker_image() -> str:
    if not _works(["docker", "info"]):
        _unavailable("no docker engine answers")
    image = base_image()
    if not _works(["docker", "image", "inspect", image]):
        _unavailable(f"base image {image} missing (scripts/provision.sh image)")
    return image


@pytest.fixture(scope="session")
def bullseye_image(docker_image: str) -> str:
    """anyswe/base:bullseye (Debian 11: python 3.9), what SWE-bench images for python 3.9 are built on."""
    image = "anyswe/base:bullseye"
    if not _works(["docker", "image", "inspect", image]):
        _unavailable(f"{image} missing (bash scripts/provision.sh image-bullseye)")
    return image


@pytest.fixture(scope="session")
def repo_mirror(shared_swebench: Path) -> Path:
    """../shared/swebench/repos: bare repositories holding SWE-bench base commits (its README.md)."""
    path = shared_swebench / "repos"
    if not (path / "pytest.git").is_dir() or not (path / "sphinx.git").is_dir():
        _unavailable(f"the repository mirrors are not in {path}")
    return path


@pytest.fixture(scope="session")
def sif_image(docker_image: str) -> str:
    if not _works(["apptainer", "--version"]):
        _unavailable("apptainer is not installed")
    from anyswe.sandbox.sif import ensure_sif

    return str(asyncio.run(ensure_sif(docker_image)))


@pytest.fixture(params=PROVIDERS)
def provider_image(request: pytest.FixtureRequest) -> tuple[str, str]:
    """(provider name, image for it): the docker image, or its SIF."""
    fixture = "docker_image" if request.param == "docker" else "sif_image"
    return request.param, request.getfixturevalue(fixture)


# Every sandbox this test session starts (in-process and in the CLI subprocesses it runs) carries
# this label, so the leak check is not confused by another session sharing the runtimes.
SESSION = f"pytest-{uuid.uuid4().hex[:12]}"
os.environ["ANYSWE_SESSION"] = SESSION


@pytest.fixture(scope="session", autouse=True)
def no_leaked_sandboxes(request: pytest.FixtureRequest) -> Iterator[None]:
    """After the whole session, no anyswe container, instance or overlay of this session may remain."""
    yield
    # The unit tier starts no sandbox and must not touch a runtime (it runs where there is none).
    if not any(item.get_closest_marker("containers") for item in request.session.items):
        return
    from anyswe.sandbox import get_provider

    async def leftovers() -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        for name in PROVIDERS:
            provider = get_provider(name)
            try:
                await provider.check()
            except Exception:
                continue
            found[name] = await provider.leftovers(SESSION)
        return found

    left = asyncio.run(leftovers())
    assert not any(left.values()), f"sandboxes leaked by the test session: {left}"
