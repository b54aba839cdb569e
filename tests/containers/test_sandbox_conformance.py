"""One conformance suite, run against the real docker engine and the real apptainer."""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from anyswe.errors import AnysweError, ImageNotFound, InfraError, SandboxExecError, SandboxStartError
from anyswe.sandbox import get_provider
from anyswe.sandbox.helper import HELPER_PATH

pytestmark = pytest.mark.containers


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def test_exit_code_and_stream_separation(provider_image: tuple[str, str]) -> None:
    name, image = provider_image

    async def go() -> None:
        async with get_provider(name).sandbox(image) as sb:
            r = await sb.exec("echo to-out; echo to-err >&2; exit 7")
            assert (r.exit_code, r.stdout, r.stderr.splitlines()[-1]) == (7, "to-out\n", "to-err")
            assert not r.timed_out and not r.ok and r.duration > 0
            r = await sb.exec(["printf", "%s|", "a b", "c"])
            assert r.ok and r.stdout == "a b|c|"

    run(go())


def test_env_workdir_and_stdin(provider_image: tuple[str, str]) -> None:
    name, image = provider_image
    tricky = 'a b\'c $HOME "q" `x` \\ $(no) %'

    async def go() -> None:
        async with get_provider(name).sandbox(image) as sb:
            await sb.exec(["mkdir", "-p", "/srv/work dir"])
            r = await sb.exec(
                ["python3", "-c", "import os; print(os.getcwd()); print(os.environ['TOKEN'])"],
                env={"TOKEN": tricky},
                workdir="/srv/work dir",
            )
            assert r.ok, r
            assert r.stdout.splitlines() == ["/srv/work dir", tricky]
            r = await sb.exec(["cat"], stdin=b"from stdin\x00\xff")
            assert r.ok and r.stdout.encode("utf-8", "surrogateescape")[:10] == b"from stdin"

    run(go())


def test_host_environment_does_not_leak(provider_image: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    name, image = provider_image
    monkeypatch.setenv("ANYSWE_TEST_HOST_SECRET", "must-not-leak")

    async def go() -> None:
        async with get_provider(name).sandbox(image) as sb:
            r = await sb.exec("env")
            assert r.ok and "must-not-leak" not in r.stdout

    run(go())


def test_binary_file_round_trip(provider_image: tuple[str, str], tmp_path: Path) -> None:
    name, image = provider_image
    blob = os.urandom(3 * 1024 * 1024) + bytes(range(256))
    src = tmp_path / "in"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "blob.bin").write_bytes(blob)
    (src / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (src / "run.sh").chmod(0o755)

    async def go() -> None:
        async with get_provider(name).sandbox(image) as sb:
            await sb.copy_in(src, "/opt/data")
            r = await sb.exec(["sha256sum", "/opt/data/sub/blob.bin"])
            assert r.stdout.split()[0] == hashlib.sha256(blob).hexdigest()
            assert (await sb.exec(["/opt/data/run.sh"])).stdout == "ran\n"
            await sb.write_file("/opt/one/file.bin", blob)
            assert await sb.read_file("/opt/one/file.bin") == blob
            await sb.copy_out("/opt/data", tmp_path / "out")
            await sb.copy_out("/opt/one/file.bin", tmp_path / "single.bin")

    run(go())
    assert (tmp_path / "out" / "sub" / "blob.bin").read_bytes() == blob
    assert os.access(tmp_path / "out" / "run.sh", os.X_OK)
    assert (tmp_path / "single.bin").read_bytes() == blob


def test_timeout_kills_the_command_and_its_children(provider_image: tuple[str, str]) -> None:
    name, image = provider_image
    marker = f"600.{uuid.uuid4().int % 10**6}"

    async def go() -> None:
        async with get_provider(name).sandbox(image) as sb:
            start = time.monotonic()
            # A child of bash, so killing only bash would leave `sleep` behind.
            r = await sb.exec(f"sleep {marker}; echo never", timeout=3)
            elapsed = time.monotonic() - start
            assert r.timed_out and not r.ok and "never" not in r.stdout
            assert elapsed < 20
            await asyncio.sleep(0.5)
            left = subprocess.run(["pgrep", "-f", f"sleep {marker}"], capture_output=True, text=True)
            assert left.stdout.strip() == "", f"process left behind: {left.stdout}"
            assert (await sb.exec("echo alive")).stdout == "alive\n"

    run(go())


def test_large_write_does_not_hit_enospc(provider_image: tuple[str, str]) -> None:
    name, image = provider_image

    async def go() -> None:
        async with get_provider(name).sandbox(image) as sb:
            for where in ("/big.bin", "/tmp/big.bin"):
                r = await sb.exec(["dd", "if=/dev/zero", f"of={where}", "bs=1M", "count=100"])
                assert r.ok, r.stderr
                assert (await sb.exec(["stat", "-c", "%s", where])).stdout.strip() == str(100 * 1024 * 1024)

    run(go())


def test_parallel_sandboxes_are_isolated(provider_image: tuple[str, str]) -> None:
    name, image = provider_image
    provider = get_provider(name, {"concurrency": 4})

    async def one(i: int) -> list[str]:
        async with provider.sandbox(image, task_id=f"t{i}") as sb:
            for d in ("/tmp", "/root", "/opt"):
                assert (await sb.exec(["sh", "-c", f"echo {i} > {d}/mine-{i}"])).ok
            await asyncio.sleep(1)
            r = await sb.exec("ls /tmp /root /opt | grep mine- | sort")
            return r.stdout.split()

    async def all_four() -> list[list[str]]:
        return list(await asyncio.gather(*(one(i) for i in range(4))))

    seen = run(all_four())
    for i, files in enumerate(seen):
        assert files == [f"mine-{i}"] * 3, files


def test_missing_image_is_a_clear_error(provider_image: tuple[str, str]) -> None:
    name, _ = provider_image
    image = "anyswe/does-not-exist:nope" if name == "docker" else "/nonexistent/image.sif"

    async def go() -> None:
        await get_provider(name).start(image)

    with pytest.raises(ImageNotFound) as info:
        run(go())
    assert image in str(info.value)
    assert isinstance(info.value, InfraError) and isinstance(info.value, AnysweError)


def test_start_timeout_is_an_infra_error_and_leaves_nothing(provider_image: tuple[str, str]) -> None:
    name, image = provider_image
    provider = get_provider(name, {"startup_timeout": 0.05})
    run_id = f"slow-{uuid.uuid4().hex[:8]}"
    with pytest.raises(SandboxStartError, match=r"did not start within 0\.05s"):
        run(provider.start(image, run_id=run_id))
    found = run(provider.sandboxes())
    assert not [n for n, labels in found.items() if (labels or {}).get("anyswe.run_id") == run_id]


def test_exec_after_container_vanished_is_infra_error(provider_image: tuple[str, str]) -> None:
    name, image = provider_image

    async def go() -> None:
        provider = get_provider(name)
        sb = await provider.start(image)
        try:
            await provider.remove(sb.name)
            with pytest.raises(SandboxExecError) as info:
                await sb.exec("true")
            assert info.value.argv and info.value.exit_code is not None
        finally:
            await sb.stop()

    run(go())


def test_teardown_runs_on_exception_and_cancellation(provider_image: tuple[str, str]) -> None:
    name, image = provider_image
    provider = get_provider(name)
    names: list[str] = []

    async def raising() -> None:
        async with provider.sandbox(image) as sb:
            names.append(sb.name)
            raise RuntimeError("boom")

    async def cancelled() -> None:
        async def body() -> None:
            async with provider.sandbox(image) as sb:
                names.append(sb.name)
                await sb.exec("sleep 30")

        task = asyncio.create_task(body())
        await asyncio.sleep(3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    with pytest.raises(RuntimeError):
        run(raising())
    run(cancelled())
    assert len(names) == 2
    assert not set(names) & set(run(provider.leftovers(None)))


def test_a_start_cancelled_at_any_moment_leaves_nothing(provider_image: tuple[str, str]) -> None:
    """Ctrl-C can land while the runtime is still creating the sandbox; nothing may outlive the caller."""
    name, image = provider_image
    provider = get_provider(name)
    run_id = f"cancel-{uuid.uuid4().hex[:8]}"

    async def cancel_after(delay: float) -> None:
        task = asyncio.create_task(provider.start(image, run_id=run_id, task_id=f"{delay}"))
        await asyncio.sleep(delay)
        task.cancel()
        try:
            sb = await task
        except asyncio.CancelledError:
            return
        await sb.stop()  # the start finished first: an ordinary stop

    async def mine() -> list[str]:
        found = await provider.sandboxes()
        return [n for n, labels in found.items() if (labels or {}).get("anyswe.run_id") == run_id]

    for delay in (0.0, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.8):
        run(cancel_after(delay))
        assert run(mine()) == [], f"a start cancelled after {delay}s left a sandbox"


def test_concurrency_bound_is_shared(provider_image: tuple[str, str]) -> None:
    name, image = provider_image
    provider = get_provider(name, {"concurrency": 2})
    live = 0
    peak = 0

    async def one() -> None:
        nonlocal live, peak
        async with provider.sandbox(image):
            live += 1
            peak = max(peak, live)
            await asyncio.sleep(0.5)
            live -= 1

    async def five() -> None:
        await asyncio.gather(*(one() for _ in range(5)))

    run(five())
    assert peak == 2


def test_starts_queue_at_start_concurrency(provider_image: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Starts beyond ``start_concurrency`` wait their turn (outside the startup timeout), every one starts."""
    name, image = provider_image
    provider = get_provider(name, {"concurrency": 4, "start_concurrency": 1})
    starting = 0
    peak = 0
    real_start = provider._start

    async def counted(*args: object, **kwargs: object) -> None:
        nonlocal starting, peak
        starting += 1
        peak = max(peak, starting)
        try:
            await real_start(*args, **kwargs)  # type: ignore[arg-type]
        finally:
            starting -= 1

    monkeypatch.setattr(provider, "_start", counted)

    async def three() -> list[str]:
        boxes = await asyncio.gather(*(provider.start(image) for _ in range(3)))
        try:
            return [(await sb.exec(["echo", "up"])).stdout.strip() for sb in boxes]
        finally:
            await asyncio.gather(*(sb.stop() for sb in boxes))

    assert run(three()) == ["up"] * 3
    assert peak == 1


def test_gc_spares_live_owners_and_removes_dead_ones(provider_image: tuple[str, str]) -> None:
    from anyswe.sandbox import gc
    from anyswe.sandbox.base import SandboxRequest

    name, image = provider_image
    provider = get_provider(name)
    session = os.environ["ANYSWE_SESSION"]

    async def go() -> None:
        live = await provider.start(image)  # owned by this (running) process
        dead = await provider.start(SandboxRequest(image=image, owner="nohost:1"))  # a crashed owner
        try:
            removed = await gc([name], session=session)
            assert removed[name].removed == [dead.name]
            assert live.name in await provider.leftovers(session)
            assert dead.name not in await provider.leftovers(session)
            removed = await gc([name], session=session, include_live=True)
            assert removed[name].removed == [live.name]
        finally:
            await live.stop()
            await dead.stop()

    run(go())


def test_gc_from_another_state_dir_spares_a_live_instance(sif_image: str, tmp_path: Path) -> None:
    """Each batch job may have its own TMPDIR: a gc there reads the owner from the instance itself."""
    from anyswe.sandbox.labels import collect

    mine = get_provider("apptainer")
    theirs = get_provider("apptainer", {"state_dir": str(tmp_path / "other-job")})

    async def go() -> None:
        async with mine.sandbox(sif_image) as live:
            found = await theirs.sandboxes()
            assert found[live.name] is not None and found[live.name]["anyswe.owner"] == live.request.owner
            collected = await collect(theirs, session=None, include_live=False)
            assert live.name not in collected.removed
            assert live.name in await mine.running_instances()

    run(go())


def test_exec_as_another_user(provider_image: tuple[str, str]) -> None:
    name, image = provider_image

    async def go() -> None:
        async with get_provider(name).sandbox(image) as sb:
            r = await sb.exec(["id", "-un"], user="nobody")
            assert r.ok and r.stdout.strip() == "nobody", r
            r = await sb.exec(
                ["sh", "-c", "echo $(id -un) $TOKEN"], user="nobody", env={"TOKEN": "t0k"}, workdir="/tmp"
            )
            assert r.ok and r.stdout.strip() == "nobody t0k", r
            r = await sb.exec("sleep 30", user="nobody", timeout=2)
            assert r.timed_out
            assert (await sb.exec(["id", "-un"])).stdout.strip() == "root"

    run(go())


def test_docker_limits_and_labels(docker_image: str) -> None:
    from python_on_whales import docker

    provider = get_provider("docker", {"cpus": 1.5, "memory": "256m", "network": "none", "pids_limit": 256})

    async def go() -> None:
        async with provider.sandbox(docker_image, run_id="r1", task_id="t1") as sb:
            c = docker.container.inspect(sb.name)
            assert c.host_config.nano_cpus == 1_500_000_000 and c.host_config.memory == 256 * 1024 * 1024
            assert c.host_config.network_mode == "none"
            # PID 1 is anyswe's helper in init mode, not docker's tini (which an inside `kill 1` ends).
            assert c.config.entrypoint == [HELPER_PATH] and c.config.cmd == ["--init"] and not c.host_config.init
            assert c.config.labels["anyswe.run_id"] == "r1" and c.config.labels["anyswe.task_id"] == "t1"
            assert c.config.labels["anyswe.session"] == os.environ["ANYSWE_SESSION"]
            r = await sb.exec(
                "cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes"
            )
            assert r.stdout.strip() == str(256 * 1024 * 1024)

    run(go())


def test_env_values_never_reach_a_command_line(
    provider_image: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from anyswe import _proc

    name, image = provider_image
    seen: list[list[str]] = []
    real_run = _proc.run

    async def recording_run(argv, **kw):  # type: ignore[no-untyped-def]
        seen.append([str(a) for a in argv])
        return await real_run(argv, **kw)

    real_streaming = _proc.run_streaming

    async def recording_streaming(argv, **kw):  # type: ignore[no-untyped-def]
        seen.append([str(a) for a in argv])
        return await real_streaming(argv, **kw)

    monkeypatch.setattr(_proc, "run", recording_run)
    monkeypatch.setattr(_proc, "run_streaming", recording_streaming)
    secret = "sk-test-" + uuid.uuid4().hex

    async def go() -> None:
        async with get_provider(name).sandbox(image) as sb:
            r = await sb.exec(["printenv", "API_KEY"], env={"API_KEY": secret})
            assert r.stdout.strip() == secret

    run(go())
    assert seen and not [a for a in seen if any(secret in part for part in a)]


def test_file_errors_are_typed_and_not_infra(provider_image: tuple[str, str]) -> None:
    from anyswe.errors import (
        SandboxFileError,
        SandboxFileNotFoundError,
        SandboxIsADirectoryError,
        SandboxNotADirectoryError,
        SandboxPermissionError,
    )

    name, image = provider_image

    async def go() -> None:
        async with get_provider(name).sandbox(image) as sb:
            await sb.exec(["mkdir", "-p", "/srv/full/inside", "/srv/empty"])
            cases = [
                (sb.read_file("/srv/missing"), SandboxFileNotFoundError, FileNotFoundError),
                (sb.read_file("/srv/full"), SandboxIsADirectoryError, IsADirectoryError),
                (sb.write_file("/srv/empty", b"x"), SandboxIsADirectoryError, IsADirectoryError),
                (sb.write_file("/srv/full", b"x"), SandboxIsADirectoryError, IsADirectoryError),
                (sb.write_file("/etc/hostname/x", b"x"), SandboxNotADirectoryError, NotADirectoryError),
                (sb.write_file("/root/secret", b"x", user="nobody"), SandboxPermissionError, PermissionError),
                (sb.read_file("/etc/shadow", user="nobody"), SandboxPermissionError, PermissionError),
            ]
            for call, error, builtin in cases:
                with pytest.raises(error) as info:
                    await call
                assert isinstance(info.value, builtin) and isinstance(info.value, SandboxFileError)
                assert not isinstance(info.value, InfraError)
            # Nothing was replaced: the directories are still directories.
            assert (await sb.exec(["test", "-d", "/srv/empty"])).ok and (await sb.exec(["test", "-d", "/srv/full"])).ok
            # A relative path is taken from the working directory, and so is a relative workdir (as
            # Inspect's sandbox contract has it), for every kind of exec.
            assert (await sb.exec(["mkdir", "-p", "rel/dir"])).ok
            await sb.write_file("rel/dir/rel.txt", b"here")
            assert (await sb.read_file(f"{sb.default_workdir.rstrip('/')}/rel/dir/rel.txt")) == b"here"
            r = await sb.exec(["sh", "-c", "pwd; cat rel.txt"], workdir="rel/dir")
            assert r.ok and r.stdout == f"{sb.default_workdir.rstrip('/')}/rel/dir\nhere", r
            chunks: list[str] = []
            r = await sb.exec_stream(["cat", "rel.txt"], workdir="rel/dir", on_output=lambda _, t: chunks.append(t))
            assert r.ok and "".join(chunks) == "here", r
            assert (await sb.exec(["true"], workdir="no/such/dir")).exit_code == 126
            with pytest.raises(ValueError, match="NUL"):
                await sb.exec(["true"], workdir="rel\0dir")

    run(go())


def test_large_argument_lists_and_callers_mistakes_are_results(provider_image: tuple[str, str]) -> None:
    name, image = provider_image

    async def go() -> None:
        async with get_provider(name).sandbox(image) as sb:
            chunk = "y" * (100 * 1024)
            r = await sb.exec(["printf", "%s", *([chunk] * 12)])  # 1.2 MiB of argv
            assert r.ok and len(r.stdout) == 12 * len(chunk)
            assert (await sb.exec(["/no/such/tool"])).exit_code == 127
            assert (await sb.exec(["/etc/hostname"])).exit_code == 126
            r = await sb.exec(["true"], workdir="/no/such/dir")
            assert r.exit_code == 126 and "/no/such/dir" in r.stderr
            r = await sb.exec(["true"], user="no-such-user")
            assert r.exit_code == 126 and "no-such-user" in r.stderr
            assert (await sb.exec(["sh", "-c", "kill -KILL $$"])).exit_code == 137

    run(go())
