"""The scripted model: a deterministic upstream for tests and for checking an agent integration.

It decides each reply from the conversation it is sent — never from how many requests came before,
since agents send probes, title and summary calls — by counting the actions already taken in the
history: the next step of its script is a call of the agent's shell tool (whatever the agent names
it), and after the last step it submits. In **oracle mode** the script is made on the host from an
instance's reference patch (the sandbox never sees it): write the patch, apply it, submit; so every
agent can be exercised end to end on any dataset without a paid model.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from anyswe.gateway.wire import Conversation, Message, Reply, ToolCall, Usage

#: Tool names agents give their shell (mini-swe-agent `bash`, Claude Code `Bash`, ...).
_SHELL_NAMES = ("bash", "shell", "terminal", "exec", "run_shell_command", "execute_command", "exec_command")
_COMMAND_KEYS = ("command", "cmd", "script", "code")


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

    @classmethod
    def oracle(cls, patch: str, workdir: str, *, submit: str | None = None) -> ScriptedModel:
        """Apply ``patch`` in ``workdir`` (one shell command, the patch in a here-document), then submit."""
        delimiter = "ANYSWE_ORACLE_EOF"
        while delimiter in patch:
            delimiter += "_X"
        body = patch if patch.endswith("\n") else patch + "\n"
        command = (
            f"cd {workdir} && cat > /tmp/anyswe-oracle.diff <<'{delimiter}'\n{body}{delimiter}\n"
            "git apply /tmp/anyswe-oracle.diff && rm -f /tmp/anyswe-oracle.diff"
        )
        return cls(steps=[command], submit=submit)

    def _actions_taken(self, messages: list[Message]) -> int:
        return sum(len(m.tool_calls) for m in messages if m.role == "assistant") + sum(
            1 for m in messages if m.role == "assistant" and not m.tool_calls and "```" in m.text
        )

    def _call(self, command: str, conv: Conversation, n: int) -> Reply:
        tool = shell_tool(conv.tools)
        if tool is None:  # a text-based agent: the command in a fenced block
            return Reply(text=f"Next step.\n\n```bash\n{command}\n```\n")
        name, arg = tool
        return Reply(text="", tool_calls=[ToolCall(f"call_{n:04d}", name, {arg: command})], stop="tool_use")

    def reply(self, conv: Conversation) -> Reply:
        """The next reply for this conversation, with deterministic token counts."""
        n = self._actions_taken(conv.messages)
        if n < len(self.steps):
            reply = self._call(self.steps[n], conv, n)
        elif n == len(self.steps) and self.submit is not None:
            reply = self._call(self.submit, conv, n)
        else:
            reply = Reply(text=self.final_text)
        prompt = json.dumps([(m.role, m.text, [c.arguments for c in m.tool_calls]) for m in conv.messages])
        produced = reply.text + "".join(json.dumps(c.arguments) for c in reply.tool_calls)
        reply.usage = Usage(input_tokens=_tokens(prompt), output_tokens=_tokens(produced))
        return reply
