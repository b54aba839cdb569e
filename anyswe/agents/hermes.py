"""``hermes``: Nous Research's Hermes agent CLI (``hermes chat -q``), inside the task's sandbox.

Hermes is a Python (>= 3.11) program and task images have no suitable Python (SWE-bench's run 3.x
of the repository's own choosing in a conda env). A venv is not relocatable, so the bundle is a
self-contained runtime: Debian's CPython 3.11, its standard library, every shared library it loads
and its own dynamic loader, started through that loader, with hermes-agent and its dependencies
pinned with hashes in ``locks/hermes/requirements.txt``. It runs whatever the image's C library.

Hermes reads ``$HERMES_HOME/config.yaml`` (a custom provider at the gateway with the task's token;
``context_length`` set so it probes nothing) and honours ``--max-turns`` in ``chat -q`` mode. Its
exit code says little (0 at the turn cap, as on success), so the exit reason is read from what it
prints ("Reached maximum iterations", "API call failed ...").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import Field

from anyswe._files import read_task_file, remove_task_file
from anyswe.agents.base import AgentContext, AgentOutcome, ExitReason
from anyswe.agents.bundles import (
    BUNDLE_DIR,
    STATE_DIR,
    BundleRecipe,
    bundle_shared_libraries,
    pip_install,
    python_runtime,
)
from anyswe.agents.cli import CliAgent, CliAgentConfig, names_full_context, private_file

if TYPE_CHECKING:
    from anyswe.sandbox import ExecResult

VERSION = "0.19.0"

_LAUNCH = """import os
import site
import sys

here = os.path.dirname(os.path.abspath(__file__))
site.addsitedir(os.path.join(here, "python", "lib", "python3.11", "site-packages"))
from hermes_cli.main import main  # noqa: E402

sys.argv[0] = "hermes"
sys.exit(main())
"""

# The bundled loader and libraries are named on the loader's command line, not in LD_LIBRARY_PATH:
# the commands Hermes runs (the repository's tests) use the image's own.
_WRAPPER = """#!/bin/sh
here=$(cd "$(dirname "$0")/.." && pwd)
exec "$here/python/lib/so/ld-linux-x86-64.so.2" --library-path "$here/python/lib/so" \\
  "$here/python/bin/python3.11" -I "$here/launch.py" "$@"
"""


def _build(lock: Path, work: Path, out: Path) -> None:
    site = python_runtime(out)
    pip_install(lock / "requirements.txt", site)
    bundle_shared_libraries(out)
    (out / "launch.py").write_text(_LAUNCH)
    wrapper = out / "bin" / "hermes"
    wrapper.parent.mkdir(exist_ok=True)
    wrapper.write_text(_WRAPPER)
    wrapper.chmod(0o755)


# Revision 2: the site-packages compiled at build (bundles.pip_install).
BUNDLE = BundleRecipe(name="hermes", lock="hermes", build=_build, check=("bin/hermes", "--version"), revision="2")


class HermesConfig(CliAgentConfig):
    """The ``agents.<name>`` block of a spec with ``type: hermes``."""

    type: Literal["hermes"] = "hermes"
    toolsets: str = Field(default="terminal,file", description="Hermes toolsets (-t).")
    context_length: int = Field(default=200_000, ge=1024, description="The model's context (no probing).")


class HermesAgent(CliAgent):
    name: ClassVar[str] = "hermes"
    config_class = HermesConfig
    config: HermesConfig
    pinned_release = VERSION
    bundle = BUNDLE
    capture_excludes = (".hermes", "AGENTS.md.hermes")

    def command(self, ctx: AgentContext) -> list[str]:
        return [
            f"{BUNDLE_DIR}/bin/hermes",
            *("chat", "-q", self.task(ctx), "-Q", "--yolo", "--max-turns", self.turns(ctx), "--source", "tool"),
            *("-t", self.config.toolsets),
            *self.config.extra_args,
        ]

    def configure(self, ctx: AgentContext, token: str) -> dict[str, str]:
        assert ctx.model is not None and ctx.state_dir is not None
        home = ctx.state_dir / "hermes"
        home.mkdir(exist_ok=True)
        model = {
            "provider": "custom",
            "base_url": self.base_url + "/v1",
            "api_key": token,
            "default": ctx.model.model,
            "context_length": self.config.context_length,
        }
        # JSON is YAML; the file holds the task's token, readable by its owner only.
        private_file(home / "config.yaml", json.dumps({"model": model}, indent=1))
        return {"HERMES_HOME": f"{STATE_DIR}/hermes", "TMPDIR": f"{STATE_DIR}/tmp"}

    def outcome(self, ctx: AgentContext, result: ExecResult, state_dir: Path) -> AgentOutcome:
        remove_task_file(state_dir, "hermes/config.yaml")  # the token goes with the task
        text = result.stdout + "\n" + result.stderr
        outcome = AgentOutcome(artifacts={"hermes.txt": result.stdout})
        # Written inside the sandbox: never followed through a link (it could point at the host's secrets).
        errors = read_task_file(state_dir, "hermes/logs/errors.log", limit=200_000, tail=True)
        if errors is not None:
            outcome.artifacts["hermes-errors.log"] = errors
        outcome.exit_reason = classify(text, result.exit_code)
        return outcome


def classify(text: str, exit_code: int) -> ExitReason:
    """Hermes's output -> anyswe's exit reason (its exit code is 0 at the turn cap too)."""
    lower = text.lower()
    if "reached maximum iterations" in lower:
        return ExitReason.MAX_ITERATIONS
    if names_full_context(text):
        return ExitReason.CONTEXT_WINDOW
    if "api call failed" in lower or exit_code != 0:
        return ExitReason.ERROR
    return ExitReason.SUBMITTED
