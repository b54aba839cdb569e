"""inspect_ai's own sandbox conformance suite, run against anyswe's docker and apptainer sandboxes.

A thin adapter makes one anyswe call per Inspect call and translates only vocabulary (anyswe's
results and typed errors into Inspect's). The checks that fail are listed below with the reason,
and the list is the same for both runtimes: that is the point of the suite here.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from inspect_ai.util import ExecResult, OutputLimitExceededError, SandboxEnvironment
from inspect_ai.util._sandbox.limits import SandboxEnvironmentLimits
from inspect_ai.util._sandbox.self_check import *  # noqa: F403 - the suite's checks, collected here

from anyswe.errors import SandboxFileError
from anyswe.sandbox import Sandbox, get_provider

pytestmark = [pytest.mark.containers, pytest.mark.anyio]

#: Checks that fail identically on both runtimes, and why.
EXPECTED_FAILURES = {
    # The sandbox runs as root with docker's default capabilities (CAP_DAC_OVERRIDE) on both
    # runtimes, so root reads and writes files whatever their mode bits, as it does in the official
    # SWE-bench containers.
    "test_read_file_not_allowed": "root reads a file without read permission (CAP_DAC_OVERRIDE)",
    "test_write_text_file_without_permissions": "root writes a read-only file (CAP_DAC_OVERRIDE)",
    "test_write_binary_file_without_permissions": "root writes a read-only file (CAP_DAC_OVERRIDE)",
}


class AnysweSandbox(SandboxEnvironment):
    """Inspect's sandbox interface over one anyswe sandbox."""

    def __init__(self, sandbox: Sandbox[Any]) -> None:
        super().__init__()
        self.sandbox = sandbox

    async def exec(
        self,
        cmd: list[str],
        input: str | bytes | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        user: str | None = None,
        timeout: int | None = None,
        timeout_retry: bool = True,
        concurrency: bool = True,
    ) -> ExecResult[str]:
        stdin = input.encode() if isinstance(input, str) else input
        # cwd as it comes: a relative one resolves against the working directory in anyswe as in
        # Inspect's contract (test_cwd_relative checks it).
        r = await self.sandbox.exec(cmd, stdin=stdin, workdir=cwd, env=env, user=user, timeout=timeout)
        if r.timed_out:
            raise TimeoutError(f"{cmd[0]} timed out after {timeout} seconds")
        if r.exit_code == 126 and "Permission denied" in r.stderr:
            raise PermissionError(r.stderr.strip())
        return ExecResult(success=r.ok, returncode=r.exit_code, stdout=r.stdout, stderr=r.stderr)

    async def write_file(self, file: str, contents: str | bytes) -> None:
        await self.sandbox.write_file(file, contents.encode() if isinstance(contents, str) else contents)

    async def read_file(self, file: str, text: bool = True) -> Any:
        # anyswe reads a file of any size back (streamed); Inspect's contract limits it to its own size.
        try:
            data = await self.sandbox.read_file(file, max_output=SandboxEnvironmentLimits.MAX_READ_FILE_SIZE)
        except SandboxFileError as exc:
            if "too large" not in str(exc):
                raise
            raise OutputLimitExceededError(SandboxEnvironmentLimits.MAX_READ_FILE_SIZE_STR, None) from None
        return data.decode() if text else data

    @classmethod
    async def sample_cleanup(cls, task_name: str, config: Any, environments: Any, interrupted: bool) -> None:
        pass


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module", params=["docker", "apptainer"])
def live_sandbox(request: pytest.FixtureRequest) -> Iterator[Sandbox[Any]]:
    """One sandbox per runtime for the whole suite, as Inspect's own runner shares one environment."""
    image = request.getfixturevalue("docker_image" if request.param == "docker" else "sif_image")
    sandbox = asyncio.run(get_provider(request.param).start(image))
    try:
        yield sandbox
    finally:
        asyncio.run(sandbox.stop())


@pytest.fixture
async def sandbox_env(live_sandbox: Sandbox[Any], request: pytest.FixtureRequest) -> AsyncIterator[AnysweSandbox]:
    reason = EXPECTED_FAILURES.get(request.node.originalname)
    if reason is not None:
        request.node.add_marker(pytest.mark.xfail(reason=reason, strict=True))
    yield AnysweSandbox(live_sandbox)
