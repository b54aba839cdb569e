from __future__ import annotations

import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator

import pytest

# A plugin of two test modules (pytest_plugins): its asserts rewritten as theirs are, though they import
# it before pytest loads it as a plugin.
pytest.register_assert_rewrite("mlkit")


@pytest.fixture(scope="session")
def runtimes(docker_image: str, sif_image: str) -> None:
    """Both runtimes and the base image (and its SIF) are available."""


@pytest.fixture(scope="session")
def registry(docker_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real registry (Debian's docker-registry, the reference distribution) on a loopback port:
    ``localhost:PORT``. Started for the session, its storage in a temporary directory."""
    binary = shutil.which("docker-registry")
    if binary is None:  # container tests never skip in CI
        pytest.fail("docker-registry is not installed (scripts/provision.sh registry)")
    root = tmp_path_factory.mktemp("registry")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (root / "config.yml").write_text(
        "version: 0.1\nlog: {level: warn}\n"
        f"storage: {{filesystem: {{rootdirectory: {root / 'data'}}}, delete: {{enabled: true}}}}\n"
        f"http: {{addr: '127.0.0.1:{port}'}}\n"
    )
    proc = subprocess.Popen(
        [str(binary), "serve", str(root / "config.yml")], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                err = proc.stderr.read().decode() if proc.stderr and proc.poll() is not None else ""
                pytest.fail(f"docker-registry did not start on port {port}: {err}")
            time.sleep(0.2)
        yield f"localhost:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="session")
def browse(chromium: str) -> Callable[..., str]:
    """Open a page in headless Chromium: its DOM after the page's scripts ran, and a screenshot
    (tests/artifacts/NAME.png) when asked. Errors on the page's console fail the test."""
    import tempfile
    from pathlib import Path

    artifacts = Path(__file__).resolve().parents[1] / "artifacts"

    def run(url: str, *, screenshot: str | None = None, size: str = "1280,5000") -> str:
        flags = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            f"--user-data-dir={tempfile.mkdtemp()}",
            "--enable-logging=stderr",
            "--v=0",
            f"--window-size={size}",
        ]
        logs = ""
        if screenshot is not None:
            artifacts.mkdir(exist_ok=True)
            shot = artifacts / f"{screenshot}.png"
            r = subprocess.run(
                [chromium, *flags, f"--screenshot={shot}", url], capture_output=True, text=True, timeout=120
            )
            assert shot.is_file() and shot.stat().st_size > 10_000, r.stderr[-2000:]
            logs += r.stderr
        r = subprocess.run([chromium, *flags, "--dump-dom", url], capture_output=True, text=True, timeout=120)
        console = [line for line in (logs + r.stderr).splitlines() if "CONSOLE" in line]
        assert not [x for x in console if "error" in x.lower() or "uncaught" in x.lower()], console
        return r.stdout

    return run
