from __future__ import annotations

import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator

import pytest


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
