"""NeMo Gym's side of the serve tests: nemo-gym 0.7.0 in an environment of its own (its own
``AnySweVerifyResponse`` validates anyswe's responses) and run requests shaped like its example rows."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from anyswe.config import cache_dir
from anyswe.datasets import load_dataset

REPO = Path(__file__).resolve().parents[2]
GYM = REPO / "tests" / "nemo_gym"
NEMO_GYM = "nemo-gym==0.7.0"


def _uv() -> str:
    found = os.environ.get("UV") or shutil.which("uv")
    assert found, "uv is not on PATH (./dev setup installs it)"
    return found


@pytest.fixture(scope="module")
def gym_python() -> Path:
    """A Python with nemo-gym 0.7.0 and what its anyswe_agent app imports (tests/nemo_gym/requirements.txt),
    made once per lock in anyswe's cache."""
    lock = (GYM / "requirements.txt").read_bytes() + (GYM / "nemo-gym.txt").read_bytes()
    env = cache_dir() / f"nemo-gym-0.7.0-{hashlib.sha256(lock).hexdigest()[:12]}"
    python = env / "bin" / "python"
    done = env / ".complete"
    if not done.is_file():
        shutil.rmtree(env, ignore_errors=True)
        uv = _uv()
        for argv in (
            [uv, "venv", "-q", "--python", sys.executable, str(env)],
            # Its Requires-Python (>=3.13.14) is stated for uv's resolution only: no such Python exists here.
            [
                uv,
                "pip",
                "install",
                "-q",
                "--python",
                str(python),
                "--python-version",
                "3.13.14",
                "--no-deps",
                "--require-hashes",
                "-r",
                str(GYM / "nemo-gym.txt"),
            ],
            [
                uv,
                "pip",
                "install",
                "-q",
                "--python",
                str(python),
                "--require-hashes",
                "-r",
                str(GYM / "requirements.txt"),
            ],
        ):
            r = subprocess.run(argv, capture_output=True, text=True, timeout=900)
            assert r.returncode == 0, f"{argv}: {r.stderr[-3000:]}"
        done.write_text(NEMO_GYM + "\n")
    return python


def _example_row(gym_python: Path) -> dict[str, Any]:
    """The first row of nemo-gym 0.7.0's responses_api_agents/anyswe_agent/data/example.jsonl."""
    code = "import responses_api_agents.anyswe_agent as m, pathlib; print(pathlib.Path(m.__file__).parent)"
    where = subprocess.run([str(gym_python), "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    with open(Path(where) / "data" / "example.jsonl") as fh:
        return dict(json.loads(fh.readline()))


def gym_rows(gym_python: Path, ids: list[str]) -> list[dict[str, Any]]:
    """Gym's example row with each demo task in its metadata, as nemo-gym's prepare.py fills it."""
    example = _example_row(gym_python)
    by_id = load_dataset("demo-swebench").by_id()
    rows = []
    for i, iid in enumerate(ids):
        inst = by_id[iid]
        row = json.loads(json.dumps(example))
        meta = row["responses_create_params"]["metadata"]
        assert {"instance_id", "dataset_name", "split", "problem_statement", "instance_dict"} <= meta.keys()
        meta.update(
            instance_id=iid,
            dataset_name="demo-swebench",
            problem_statement=inst.problem_statement,
            instance_dict=json.dumps(inst.model_dump(mode="json")),
        )
        row["_ng_rollout_id"] = f"rollout-{i}"
        rows.append(row)
    return rows


def validate(gym_python: Path, responses: list[dict[str, Any]], tmp_path: Path) -> list[dict[str, Any]]:
    """Each response parsed by nemo-gym's own AnySweVerifyResponse, every field it declares sent; what it parsed."""
    files = []
    for i, resp in enumerate(responses):
        path = tmp_path / f"response-{i}.json"
        path.write_text(json.dumps(resp))
        files.append(str(path))
    r = subprocess.run([str(gym_python), str(GYM / "validate.py"), *files], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-5000:]
    parsed = [json.loads(line) for line in r.stdout.splitlines()]
    # A drop-in sends every field Gym's model declares, not just those it requires.
    assert [p["missing"] for p in parsed] == [[] for _ in parsed], parsed
    return parsed


def started(argv: list[str], env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], str]:
    """A server started from ``argv`` (``anyswe serve``, the policy server) once it prints
    ``listening on URL``; the process and the URL."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert "listening on" in line, line + proc.stdout.read()
    return proc, line.split()[-1]


#: The bearer token of every server the tests start (``/run`` refuses a request without it).
TOKEN = secrets.token_urlsafe(32)
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def serve_argv(config: Path) -> list[str]:
    """``anyswe serve`` with ``config``, on a free port, its token in a 0600 file beside the config."""
    token = config.with_name(config.stem + ".token")
    if not token.exists():
        token.write_text(TOKEN + "\n")
        token.chmod(0o600)
    return [sys.executable, "-m", "anyswe", "serve", "--config", str(config), "--port", "0", "--token-file", str(token)]
