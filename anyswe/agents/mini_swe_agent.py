"""``mini-swe-agent``: the mini-swe-agent package (pinned) driven from the host.

Its agent loop runs on the host, in a worker thread; its model is litellm pointed at anyswe's model
gateway with the task's own token (never an upstream key); its environment is the task's sandbox,
through anyswe's exec (so it behaves the same on docker and apptainer). Its submission sentinel is
checked exactly as its own environments check it; its exit statuses map onto anyswe's exit reasons
and its trajectory is kept with the task.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import ConfigDict, Field

from anyswe._threads import in_thread
from anyswe.agents.base import Agent, AgentConfig, AgentContext, AgentOutcome, ExitReason
from anyswe.errors import AgentError
from anyswe.gateway.protocols import wire_protocol
from anyswe.sandbox.request import neutral

if TYPE_CHECKING:
    from anyswe.sandbox import Sandbox

SENTINEL = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"

_EXIT_REASONS = {
    "Submitted": ExitReason.SUBMITTED,
    "LimitsExceeded": ExitReason.MAX_ITERATIONS,
    "TimeExceeded": ExitReason.TIMEOUT,
}

#: litellm's model prefix for each protocol anyswe's gateway speaks.


#: The transcript's default cap. mini-swe-agent keeps each command's whole output in its transcript
#: (``extra.raw_output``), up to the exec's output cap of 16 MiB per command: two steps made 35.7 MB.
TRANSCRIPT_BYTES = 4 * 1024 * 1024
#: Texts are never cut below this many characters: past that the transcript is cut at its cap instead.
_MIN_KEPT = 256


class MiniSweAgentConfig(AgentConfig):
    """The ``agents.<name>`` block of a spec with ``type: mini-swe-agent``."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["mini-swe-agent"] = "mini-swe-agent"
    step_limit: int = Field(default=50, ge=1, description="Model calls before the agent is stopped.")
    command_timeout: float = Field(default=120, gt=0, description="Seconds one shell command may run.")
    config: Path | None = Field(default=None, description="A mini-swe-agent YAML (its swebench one by default).")
    # Neutral: what is kept of the transcript cannot change a result, so it is not in the task key.
    transcript_bytes: int = neutral(
        default=TRANSCRIPT_BYTES,
        ge=64 * 1024,
        description="Bytes of mini-swe-agent's own transcript kept on the host (agent-mini-swe-agent.traj.json): "
        "past it its longest texts keep their head and tail, and its info.anyswe_cut says what was cut.",
    )


def _quiet_imports() -> None:
    # No network at import: litellm would fetch its cost map, mini-swe-agent print a banner and
    # write a global config under $HOME.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
    os.environ.setdefault("MSWEA_GLOBAL_CONFIG_DIR", str(Path(tempfile.gettempdir()) / "anyswe-mswea"))


class SandboxEnvironment:
    """mini-swe-agent's Environment protocol over an anyswe sandbox (called from the agent's thread)."""

    def __init__(
        self, sandbox: Sandbox[Any], loop: asyncio.AbstractEventLoop, *, cwd: str, timeout: float, env: dict[str, str]
    ) -> None:
        self.sandbox, self.loop, self.cwd, self.timeout, self.env = sandbox, loop, cwd, timeout, env
        self.config = {"cwd": cwd, "timeout": timeout, "env": env}

    stop: threading.Event | None = None

    def execute(self, action: dict[str, Any], cwd: str = "", *, timeout: float | None = None) -> dict[str, Any]:
        from minisweagent.exceptions import Submitted

        if self.stop is not None and self.stop.is_set():
            raise _Stopped("the host stopped the agent")

        limit = timeout or self.timeout
        # stderr folded into stdout, as mini-swe-agent's own environments do.
        cmd = ["bash", "-c", "exec 2>&1\n" + str(action.get("command", ""))]
        call = self.sandbox.exec(cmd, workdir=cwd or self.cwd, timeout=limit, env=self.env)
        try:
            r = asyncio.run_coroutine_threadsafe(call, self.loop).result()
        except UnicodeEncodeError as exc:
            # A command no program can be given (a surrogate code point the model's JSON held): what
            # mini-swe-agent's own environments answer, an observation saying so, not the agent's end.
            info = f"An error occurred while executing the command: {exc}"
            extra = {"exception_type": type(exc).__name__, "exception": str(exc)}
            return {"output": "", "returncode": -1, "exception_info": info, "extra": extra}
        output = {"output": r.stdout, "returncode": r.exit_code, "exception_info": ""}
        if r.timed_out:
            output.update(returncode=-1, exception_info=f"The command timed out after {limit:g} seconds.")
        lines = r.stdout.lstrip().splitlines(keepends=True)
        if lines and lines[0].strip() == SENTINEL and r.exit_code == 0:
            submission = "".join(lines[1:])
            extra = {"exit_status": "Submitted", "submission": submission}
            raise Submitted({"role": "exit", "content": submission, "extra": extra})
        return output

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        return {"cwd": self.cwd, **self.env, **kwargs}

    def serialize(self) -> dict[str, Any]:
        config = {**self.config, "sandbox": self.sandbox.name}
        return {"info": {"config": {"environment": config, "environment_type": "anyswe.SandboxEnvironment"}}}


class _Stopped(KeyboardInterrupt):
    """Ends the agent's thread: mini-swe-agent lets a KeyboardInterrupt through (no retry, no recovery)."""


def _StoppableModel(stop: threading.Event, **config: Any) -> Any:
    """litellm's model, checking before every attempt whether the host stopped the agent."""
    from minisweagent.models.litellm_model import LitellmModel

    class StoppableModel(LitellmModel):  # type: ignore[misc]
        def _query(self, messages: list[dict[str, str]], **kwargs: Any) -> Any:
            if stop.is_set():
                raise _Stopped("the host stopped the agent")
            return super()._query(messages, **kwargs)

    return StoppableModel(**config)


def bounded_transcript(data: dict[str, Any], cap: int) -> tuple[str, str | None]:
    """mini-swe-agent's transcript (its ``serialize()``) as its JSON text, at most ``cap`` bytes, and
    what was cut (None: nothing). Past the cap every text longer than a limit keeps its head and tail
    with a marker between, the limit halved until the transcript fits: still JSON, every message
    kept, and its ``info.anyswe_cut`` says so. Only when texts of ``_MIN_KEPT`` characters do not fit
    (thousands of messages) is the text cut at the cap, a marker ending it (then no longer JSON)."""
    text = json.dumps(data, indent=2)
    size = len(text.encode())
    if size <= cap:
        return text, None
    limit = cap // 2
    while True:
        cut, count = _cut_texts(data, limit)
        note = (
            f"the transcript was {size} bytes, over its {cap}-byte cap: {count} text(s) over {limit} characters "
            "keep their head and tail"
        )
        info = cut.get("info") if isinstance(cut.get("info"), dict) else cut
        info["anyswe_cut"] = note
        text = json.dumps(cut, indent=2)
        if len(text.encode()) <= cap:
            return text, note
        if limit // 2 < _MIN_KEPT:
            break
        limit //= 2
    marker = f"\n[anyswe: the transcript truncated at its {cap}-byte cap]\n"
    head = text.encode()[: cap - len(marker.encode())].decode(errors="ignore")
    return head + marker, f"{note}; still over, it was truncated at the cap"


def _cut_texts(value: Any, limit: int) -> tuple[Any, int]:
    """``value`` (JSON types) with every str longer than ``limit`` characters cut to its head and tail
    (a marker between saying how much went), and how many were."""
    if isinstance(value, str):
        if len(value) <= limit:
            return value, 0
        half = limit // 2
        marker = f"\n[anyswe: {len(value) - 2 * half} characters cut here: over the transcript cap]\n"
        return value[:half] + marker + value[-half:], 1
    if isinstance(value, list):
        parts = [_cut_texts(v, limit) for v in value]
        return [v for v, _ in parts], sum(n for _, n in parts)
    if isinstance(value, dict):
        items = {k: _cut_texts(v, limit) for k, v in value.items()}
        return {k: v for k, (v, _) in items.items()}, sum(n for _, n in items.values())
    return value, 0


def _BoundedAgent(cap: int, cuts: list[str], *args: Any, **config: Any) -> Any:
    """mini-swe-agent's agent, saving its transcript (after every step, as its own does) within ``cap``
    bytes, so the host never holds more of it on disk; ``cuts`` holds the note of the cut in the file
    last written (empty: it is whole)."""
    from minisweagent.agents.default import DefaultAgent

    class BoundedAgent(DefaultAgent):  # type: ignore[misc]
        def save(self, path: Path | None, *extra_dicts: Any) -> dict[str, Any]:
            data: dict[str, Any] = self.serialize(*extra_dicts)
            if path:
                text, note = bounded_transcript(data, cap)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
                cuts[:] = [] if note is None else [note]  # what the file now holds
            return data

    return BoundedAgent(*args, **config)


class MiniSweAgent(Agent):
    name: ClassVar[str] = "mini-swe-agent"
    config_class = MiniSweAgentConfig
    config: MiniSweAgentConfig
    submit_command = f"echo {SENTINEL}"

    @classmethod
    def release(cls) -> str | None:
        from importlib.metadata import version

        return version("mini-swe-agent")

    def _settings(self) -> dict[str, Any]:
        _quiet_imports()
        from minisweagent import config as mswea_config
        from ruamel.yaml import YAML
        from ruamel.yaml.error import YAMLError

        path = self.config.config or Path(mswea_config.__file__).parent / "benchmarks" / "swebench.yaml"
        try:
            loaded: dict[str, Any] = YAML(typ="safe").load(Path(path).read_text())
        except (OSError, YAMLError) as exc:
            raise AgentError(f"mini-swe-agent: cannot read its config {path}: {exc}") from None
        return loaded

    def _run_sync(
        self, ctx: AgentContext, loop: asyncio.AbstractEventLoop, traj: Path, stop: threading.Event, cuts: list[str]
    ) -> dict[str, Any]:
        _quiet_imports()
        import litellm

        endpoint = ctx.model
        if endpoint is None or endpoint.base_url is None:
            raise AgentError("mini-swe-agent needs a model endpoint (a model in its cell and the gateway)")
        litellm.suppress_debug_info = True
        settings = self._settings()
        base = endpoint.base_url if endpoint.api == "anthropic-messages" else endpoint.base_url + "/v1"
        model = _StoppableModel(
            stop,
            model_name=wire_protocol(endpoint.api).litellm_prefix + endpoint.model,
            model_kwargs={
                **settings["model"].get("model_kwargs", {}),
                **endpoint.params,
                "api_base": base,
                "api_key": endpoint.token,
                "timeout": ctx.timeout,  # no call outlives the agent's own time
            },
            cost_tracking="ignore_errors",
            observation_template=settings["model"]["observation_template"],
            format_error_template=settings["model"]["format_error_template"],
        )
        env_vars = {k: str(v) for k, v in (settings.get("environment", {}).get("env") or {}).items()}
        env = SandboxEnvironment(ctx.sandbox, loop, cwd=ctx.workdir, timeout=self.config.command_timeout, env=env_vars)
        env.stop = stop
        agent = _BoundedAgent(
            self.config.transcript_bytes,
            cuts,
            model,
            env,
            system_template=settings["agent"]["system_template"],
            instance_template=settings["agent"]["instance_template"],
            step_limit=self.config.step_limit,
            cost_limit=0,
            wall_time_limit_seconds=int(ctx.timeout),
            output_path=traj,
        )
        result: dict[str, Any] = agent.run(ctx.task.problem_statement)
        return result

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        stop = threading.Event()
        cuts: list[str] = []
        with tempfile.TemporaryDirectory(prefix="anyswe-mswea-") as tmp:
            traj = Path(tmp) / "mini-swe-agent.traj.json"
            try:
                result = await in_thread(self._run_sync, ctx, asyncio.get_running_loop(), traj, stop, cuts)
            except asyncio.CancelledError:
                # The host stopped the agent (its timeout): its thread stops at its next step or call.
                stop.set()
                raise
            except AgentError:
                raise
            except Exception as exc:  # the model call failed for good (a refused budget, a dead endpoint)
                ctx.log(f"mini-swe-agent stopped: {type(exc).__name__}: {exc}")
                exit_status = type(exc).__name__
                reason = ExitReason.CONTEXT_WINDOW if "ContextWindow" in exit_status else ExitReason.ERROR
            else:
                exit_status = str(result.get("exit_status", ""))
                reason = _EXIT_REASONS.get(exit_status, ExitReason.ERROR)
            ctx.log(f"mini-swe-agent exit status: {exit_status}")
            artifacts = {traj.name: traj.read_text()} if traj.is_file() else {}
        info = {"exit_status": exit_status}
        if cuts:
            ctx.log(f"mini-swe-agent's transcript cut: {cuts[-1]}")
            info["transcript_cut"] = cuts[-1]
        return AgentOutcome(exit_reason=reason, artifacts=artifacts, info=info)
