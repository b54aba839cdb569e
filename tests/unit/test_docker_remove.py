"""Removing a docker container when another removal of it is under way (CI, stop 26).

Ctrl-C reaches the whole foreground process group: a ``docker rm`` the driver had running then
died with 130 while dockerd went on removing, and the run's final sweep got "removal of container
... is already in progress", which aborted the interrupted apply with a traceback and exit 1.

The docker CLI here is a script that answers as the real one did in that run (its stderr and exit
code copied from the CI log): a race the real daemon cannot be made to lose on demand.
"""

from __future__ import annotations

import asyncio
import stat
from pathlib import Path

import pytest

from anyswe.errors import SandboxError
from anyswe.sandbox.docker import DockerProvider

IN_PROGRESS = "Error response from daemon: removal of container {name} is already in progress"
NO_SUCH = "Error response from daemon: No such container: {name}"


def scripted_docker(tmp_path: Path, answers: list[tuple[int, str]]) -> Path:
    """A ``docker`` that gives ``answers`` in turn (exit code, stderr), then succeeds; it logs its argv."""
    state = tmp_path / "calls"
    lines = [f'echo "$@" >> {state}', f"n=$(wc -l < {state})"]
    for i, (code, err) in enumerate(answers, start=1):
        lines.append(f'if [ "$n" -eq {i} ]; then echo "{err}" >&2; exit {code}; fi')
    lines.append("exit 0")
    script = tmp_path / "docker"
    script.write_text("#!/bin/sh\n" + "\n".join(lines) + "\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def provider_with(monkeypatch: pytest.MonkeyPatch, script: Path) -> DockerProvider:
    monkeypatch.setattr(DockerProvider, "docker_cmd", property(lambda self: [str(script)]))
    return DockerProvider()


def calls(tmp_path: Path) -> list[str]:
    return (tmp_path / "calls").read_text().splitlines()


def test_a_removal_in_progress_is_waited_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    name = "anyswe-fe76c8d6e6924d8d"
    msg = IN_PROGRESS.format(name=name)
    answers = [(1, msg), (1, msg), (1, NO_SUCH.format(name=name))]
    provider = provider_with(monkeypatch, scripted_docker(tmp_path, answers))
    asyncio.run(provider.remove(name))
    assert calls(tmp_path) == [f"container rm --force --volumes {name}"] * 3


def test_a_container_already_gone_is_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    provider = provider_with(monkeypatch, scripted_docker(tmp_path, [(1, NO_SUCH.format(name="x"))]))
    asyncio.run(provider.remove("x"))
    assert len(calls(tmp_path)) == 1


def test_another_failure_names_the_command_and_the_daemons_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    err = "Error response from daemon: driver failed to remove root filesystem"
    provider = provider_with(monkeypatch, scripted_docker(tmp_path, [(1, err)]))
    with pytest.raises(SandboxError) as caught:
        asyncio.run(provider.remove("x"))
    assert caught.value.exit_code == 1
    assert caught.value.argv is not None and caught.value.argv[-4:] == ["rm", "--force", "--volumes", "x"]
    assert "driver failed to remove root filesystem" in str(caught.value)
    assert len(calls(tmp_path)) == 1  # not retried: only a removal under way is waited for
