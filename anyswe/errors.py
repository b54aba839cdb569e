"""One error hierarchy for anyswe.

Every error anyswe raises on purpose derives from :class:`AnysweError`. The split that matters to
users running long experiments is between *infrastructure* failures (a sandbox would not start, a
runtime vanished: the sample is masked and may be retried) and everything that is a fact about the
task or its input (a bad spec, a patch that does not apply).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Self

if TYPE_CHECKING:
    from anyswe._proc import ProcResult

_TAIL_CHARS = 2000


def _tail(text: str | bytes | None, limit: int = _TAIL_CHARS) -> str:
    if text is None:
        return ""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    return text if len(text) <= limit else "..." + text[-limit:]


def first_problem(exc: Any) -> str:
    """A pydantic ValidationError's first problem as ``field.path: message`` (for errors naming the field)."""
    first = exc.errors()[0]
    return f"{'.'.join(str(x) for x in first['loc'])}: {first['msg']}"


class AnysweError(Exception):
    """Base of every error anyswe raises on purpose."""


class SpecError(AnysweError):
    """An experiment spec (or a --set override) is invalid.

    ``location`` names the file, line, column and field, so that the message alone says where to look.
    """

    def __init__(self, message: str, *, location: str | None = None) -> None:
        self.location = location
        super().__init__(f"{location}: {message}" if location else message)


class PlanError(AnysweError):
    """A spec is valid on its own but cannot be expanded (an incompatible agent x model pair...)."""


class DatasetError(AnysweError):
    """A dataset cannot be found, read or routed to a grading harness."""


class RequestError(AnysweError):
    """A request to ``anyswe serve`` is its own fault (a 400): the message names the field, and echoes
    only what the request sent."""


class InfraError(AnysweError):
    """Something outside the task failed: a runtime, an image, the host. Samples that hit it are masked.

    ``permanent`` says whether trying again can help: a transient failure (a sandbox killed, a
    runtime hiccup) is retried within the apply; a permanent one (a missing image, an image that is
    not the instance's) is reported at once, since no attempt changes it.
    """

    permanent: bool = False

    def __init__(self, *args: object, permanent: bool | None = None) -> None:
        super().__init__(*args)
        if permanent is not None:
            self.permanent = permanent


class SandboxError(InfraError):
    """A container runtime command failed.

    Carries the argv (never secrets: those travel in env files or stdin), the exit code and the tail
    of the output, like python-on-whales' ``DockerException``.
    """

    def __init__(
        self,
        message: str,
        *,
        argv: Sequence[str] | None = None,
        exit_code: int | None = None,
        stdout: str | bytes | None = None,
        stderr: str | bytes | None = None,
    ) -> None:
        self.argv = list(argv) if argv is not None else None
        self.exit_code = exit_code
        self.stdout_tail = _tail(stdout)
        self.stderr_tail = _tail(stderr)
        parts = [message]
        if self.argv is not None:
            parts.append(f"command: {' '.join(self.argv)}")
        if exit_code is not None:
            parts.append(f"exit code: {exit_code}")
        if self.stdout_tail.strip():
            parts.append(f"stdout (tail):\n{self.stdout_tail.rstrip()}")
        if self.stderr_tail.strip():
            parts.append(f"stderr (tail):\n{self.stderr_tail.rstrip()}")
        super().__init__("\n".join(parts))

    @classmethod
    def from_proc(cls, message: str, result: ProcResult) -> Self:
        """The error for a runtime command that failed, carrying its argv, exit code and output."""
        if result.timed_out:
            message += " (timed out)"
        return cls(message, argv=result.argv, exit_code=result.exit_code, stdout=result.stdout, stderr=result.stderr)


class RuntimeNotAvailable(SandboxError):
    """The container runtime itself is missing or does not answer."""


class ImageNotFound(SandboxError):
    """The image (docker reference or SIF path) does not exist locally; nothing is ever pulled implicitly."""

    permanent = True


class WrongImage(InfraError):
    """The sandbox's repository is not the instance's: no base commit, HEAD not descending from it,
    or commits after it that touch the files of the reference or test patch. Permanent."""

    permanent = True


class SandboxStartError(SandboxError):
    """A sandbox could not be started."""


class SandboxExecError(SandboxError):
    """The runtime failed to run a command at all (distinct from a command that exited non-zero)."""


class SandboxLost(SandboxError):
    """The sandbox died under a running command: killed, stopped or removed from outside, or OOM-killed.

    What ran in it did not finish, so whatever it printed is not a result (a grading run it cut
    short is not an "unresolved"): the sample is masked and run again.
    """


class SandboxFileError(AnysweError):
    """A file operation in a sandbox failed because of the path itself: the caller's error, not infra.

    Each subclass is also the matching builtin (``except FileNotFoundError`` works) and carries
    the path inside the sandbox.
    """

    errno_code: int = 0

    def __init__(self, message: str, path: str) -> None:
        super().__init__(message)
        self.path = path
        self.message = message
        self.filename = path

    def __str__(self) -> str:
        return f"{self.message}: {self.path}"


class SandboxFileNotFoundError(SandboxFileError, FileNotFoundError):
    """No such file or directory (or a parent is missing)."""

    errno_code = 2


class SandboxPermissionError(SandboxFileError, PermissionError):
    """The sandbox user may not read or write the path."""

    errno_code = 13


class SandboxNotADirectoryError(SandboxFileError, NotADirectoryError):
    """A parent of the path is a file."""

    errno_code = 20


class SandboxIsADirectoryError(SandboxFileError, IsADirectoryError):
    """The path is a directory (reading it, or writing a file onto it)."""

    errno_code = 21


class ImageBuildError(InfraError):
    """Building a task image or SIF failed."""


class InsufficientDisk(InfraError):
    """Preparing images would need more disk than a filesystem has free (or than the budget allows)."""


class AgentError(AnysweError):
    """An agent failed in a way that is the agent's own (bad config, missing predictions...)."""


class SandboxPidsExhausted(AgentError):
    """The runtime could not start a command because the sandbox's own processes fill its pids
    limit (a fork bomb): the task's doing, not the infrastructure's, so never masked."""


class SandboxOverLimit(AgentError):
    """The sandbox was ended by one of its own limits, which the task's processes used up: the task's
    doing, like a full pids limit, not the infrastructure's: never masked, never retried."""


class SandboxOutOfMemory(SandboxOverLimit):
    """The sandbox died by its own memory limit: its PID 1 was the OOM kill of the limit the task's
    processes exhausted (a task can raise PID 1's ``oom_score_adj``; sandbox/oom.py)."""


class SandboxDiskFull(SandboxOverLimit):
    """The sandbox's writes passed its disk limit and anyswe's watchdog stopped it (sandbox/disk.py:
    a runtime with no limit of its own on that storage)."""


class GradingError(AnysweError):
    """Grading could not be carried out (harness missing, wrong swebench version, unreadable log)."""


class ResultsError(AnysweError):
    """A run directory or results file is missing or inconsistent."""
