"""The scripted model: a deterministic upstream for tests and for checking an agent integration.

It decides each reply from the conversation it is sent — never from how many requests came before,
since agents send probes, title and summary calls — by counting the actions already taken in the
history: the next step of its script is a call of the agent's shell tool (whatever the agent names
it), and after the last step it submits. In **oracle mode** the script is made on the host from an
instance's reference patch (the sandbox never sees it): write the patch, apply it, submit; so every
agent can be exercised end to end on any dataset without a paid model.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, Literal

from anyswe.gateway.errors import UpstreamError
from anyswe.gateway.wire import Conversation, Message, Reply, ToolCall, Usage, conversation_hash

#: The ways the scripted model can misbehave, for failure tests: each reply ``delay`` seconds late;
#: a call of a tool the agent does not have; a 500 then success (per conversation); a 429 with
#: Retry-After then success; never submitting; a context-window error.
Misbehaviour = Literal["slow", "malformed", "flaky", "rate_limited", "never_submits", "context_window"]

#: Tool names agents give their shell (mini-swe-agent `bash`, Claude Code `Bash`, Cline `run_commands`, ...).
_SHELL_NAMES = (
    "bash",
    "shell",
    "terminal",
    "exec",
    "run_shell_command",
    "execute_command",
    "exec_command",
    "run_commands",
)
_COMMAND_KEYS = ("command", "cmd", "script", "code", "commands")


def _tokens(text: str) -> int:
    """A deterministic stand-in for a tokenizer: four characters a token."""
    return max(1, math.ceil(len(text) / 4))


def shell_tool(tools: dict[str, dict[str, Any]]) -> tuple[str, str] | None:
    """(tool name, argument name) of the shell tool among ``tools``, if any."""
    for name, schema in tools.items():
        if name.lower() in _SHELL_NAMES or "bash" in name.lower():
            props = schema.get("properties") or {}
            arg = next((k for k in _COMMAND_KEYS if k in props), None)
            arg = arg or next(iter(schema.get("required") or props or ["command"]))
            return name, arg
    return None


@dataclass
class ScriptedModel:
    """Replies with ``steps`` (shell commands) one by one, then ``submit`` (a command, or a final text)."""

    steps: list[str]
    submit: str | None = None
    final_text: str = "I have made the change and I am done."
    misbehave: Misbehaviour | None = None
    delay: float = 0.0
    _failed_once: set[str] = field(default_factory=set, repr=False)

    @classmethod
    def oracle(cls, patch: str, workdir: str, *, submit: str | None = None, **kw: Any) -> ScriptedModel:
        """Apply ``patch`` in ``workdir`` (one shell command, the patch in a here-document), then submit."""
        delimiter = "ANYSWE_ORACLE_EOF"
        while delimiter in patch:
            delimiter += "_X"
        body = patch if patch.endswith("\n") else patch + "\n"
        # Plain ``rm``: Codex refuses any ``rm -f`` as dangerous, even with its approvals bypassed.
        command = (
            f"cd {workdir} && cat > /tmp/anyswe-oracle.diff <<'{delimiter}'\n{body}{delimiter}\n"
            "git apply /tmp/anyswe-oracle.diff && rm /tmp/anyswe-oracle.diff"
        )
        return cls(steps=[command], submit=submit, **kw)

    def _actions_taken(self, messages: list[Message]) -> int:
        return sum(len(m.tool_calls) for m in messages if m.role == "assistant") + sum(
            1 for m in messages if m.role == "assistant" and not m.tool_calls and "```" in m.text
        )

    def _call(self, command: str, conv: Conversation, n: int) -> Reply:
        tool = shell_tool(conv.tools)
        if tool is None:  # a text-based agent: the command in a fenced block
            return Reply(text=f"Next step.\n\n```bash\n{command}\n```\n")
        name, arg = tool
        # A tool that takes a list of commands (Cline's run_commands) gets a list of one.
        many = ((conv.tools[name].get("properties") or {}).get(arg) or {}).get("type") == "array"
        value: Any = [command] if many else command
        return Reply(text="", tool_calls=[ToolCall(f"call_{n:04d}", name, {arg: value})], stop="tool_use")

    def _fail_first(self, conv: Conversation) -> None:
        """The first call with a given conversation fails; the same call again succeeds."""
        digest = conversation_hash(conv.messages)
        if digest in self._failed_once:
            return
        self._failed_once.add(digest)
        if self.misbehave == "flaky":
            raise UpstreamError(500, "scripted model: a transient server error", kind="api_error")
        raise UpstreamError(429, "scripted model: rate limited", kind="rate_limit_error", retry_after=1)

    def reply(self, conv: Conversation) -> Reply | Awaitable[Reply]:
        """The next reply for this conversation (misbehaving as configured)."""
        if self.misbehave == "context_window":
            raise UpstreamError(
                400,
                "This model's maximum context length is 1000 tokens. However, your messages resulted in 4000 "
                "tokens (prompt is too long).",
                kind="invalid_request_error",
                code="context_length_exceeded",
            )
        if self.misbehave in ("flaky", "rate_limited"):
            self._fail_first(conv)
        reply = self._reply(conv)
        if self.misbehave == "slow":
            return self._late(reply)
        return reply

    async def _late(self, reply: Reply) -> Reply:
        await asyncio.sleep(self.delay)
        return reply

    def _reply(self, conv: Conversation) -> Reply:
        n = self._actions_taken(conv.messages)
        if self.misbehave == "never_submits":
            reply = self._call(f"echo step {n}", conv, n)
        elif self.misbehave == "malformed":
            reply = Reply(tool_calls=[ToolCall(f"call_{n:04d}", "no_such_tool", {"x": 1})], stop="tool_use")
        elif n < len(self.steps):
            reply = self._call(self.steps[n], conv, n)
        elif n == len(self.steps) and self.submit is not None:
            reply = self._call(self.submit, conv, n)
        else:
            reply = Reply(text=self.final_text)
        prompt = json.dumps([(m.role, m.text, [c.arguments for c in m.tool_calls]) for m in conv.messages])
        produced = reply.text + "".join(json.dumps(c.arguments) for c in reply.tool_calls)
        reply.usage = Usage(input_tokens=_tokens(prompt), output_tokens=_tokens(produced))
        return reply
