"""Replay: serve a recorded task's model replies again, call by call (an anyswe run's, or ATIF another tool wrote).

A task's trajectory (``tasks/<key>/trajectory.jsonl``, written by the gateway and read by
:func:`~anyswe.gateway.trajectory.read_trajectory`) holds every call with a digest of the
conversation it was sent and the reply it got. Replayed, call N gets the N-th
recorded reply if its conversation is the one recorded; the first call that differs — a different
tool output, an extra call — ends the replay with an error that names it. So a docker run replayed
on apptainer gives the agent the very same model outputs, and any difference in the patch comes
from the runtime.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from anyswe.gateway.errors import UpstreamRefused
from anyswe.gateway.trajectory import Step, read_trajectory
from anyswe.gateway.wire import Conversation, Reply, ToolCall, Usage, conversation_hash


class ReplayModel:
    """Replies from one recorded trajectory, in order, while the conversation matches the recording."""

    def __init__(self, steps: list[Step], source: str) -> None:
        self.steps = steps
        self.source = source
        self.calls = 0

    @classmethod
    def load(cls, trajectory: Path) -> ReplayModel:
        # A refused call (a cap the task hit) is noted in the trajectory but was never answered.
        return cls([s for s in read_trajectory(trajectory) if s.reply is not None], str(trajectory))

    def reply(self, conv: Conversation) -> Reply:
        n, self.calls = self.calls, self.calls + 1
        if n >= len(self.steps):
            raise UpstreamRefused(f"replay of {self.source}: call {n + 1} was never made in the recording")
        step = self.steps[n]
        if conversation_hash(conv.messages) != step.conversation_hash:
            raise UpstreamRefused(
                f"replay of {self.source} diverged at call {n + 1}: the conversation differs from the recording"
            )
        assert step.reply is not None
        calls = [ToolCall(c.id, c.name, c.arguments) for c in step.reply.tool_calls]
        stop: Any = step.reply.stop
        return Reply(text=step.reply.text, tool_calls=calls, usage=Usage(**step.usage.model_dump()), stop=stop)


class AtifReplayModel(ReplayModel):
    """Replies from an ATIF trajectory another tool wrote (Harbor's ``agent/trajectory.json``, or
    anyswe's export), in order: each agent step that was a model call is one reply (its message,
    reasoning and tool calls, its tokens as usage). Another harness's prompts, and its tools' outputs,
    are its own, so no conversation is checked: call N gets the N-th reply, and a call past the last
    ends the replay with an error that names it."""

    def __init__(self, replies: list[Reply], source: str) -> None:
        super().__init__([], source)
        self.replies = replies

    @classmethod
    def load(cls, trajectory: Path) -> AtifReplayModel:
        from pydantic import ValidationError

        from anyswe.errors import AgentError

        try:
            from atif import Trajectory

            doc = Trajectory.model_validate_json(trajectory.read_bytes())
        except (OSError, ValidationError) as exc:
            raise AgentError(f"replay: {trajectory} is no ATIF trajectory: {str(exc)[:500]}") from None
        replies = [
            _atif_step(s.model_dump())
            for s in doc.steps
            if s.source == "agent" and not s.is_copied_context and s.llm_call_count != 0
        ]
        return cls(replies, str(trajectory))

    def reply(self, conv: Conversation) -> Reply:
        n, self.calls = self.calls, self.calls + 1
        if n >= len(self.replies):
            raise UpstreamRefused(f"replay of {self.source}: call {n + 1} was never made in the recording")
        return self.replies[n]


def _atif_step(step: dict[str, Any]) -> Reply:
    message = step.get("message")
    if isinstance(message, list):  # content parts: their text
        message = "".join(str(p.get("text") or "") for p in message if isinstance(p, dict))
    calls = [
        ToolCall(c["tool_call_id"], c["function_name"], dict(c.get("arguments") or {}))
        for c in step.get("tool_calls") or []
    ]
    metrics = step.get("metrics") or {}
    cached = int(metrics.get("cached_tokens") or 0)
    usage = Usage(  # ATIF's prompt tokens count the cached ones; anyswe's input tokens do not
        input_tokens=max(int(metrics.get("prompt_tokens") or 0) - cached, 0),
        output_tokens=int(metrics.get("completion_tokens") or 0),
        cache_read_tokens=cached,
    )
    stop: Any = "tool_use" if calls else "end"
    return Reply(str(message or ""), calls, usage, stop, reasoning=step.get("reasoning_content") or None)
