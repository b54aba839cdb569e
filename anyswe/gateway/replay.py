"""Replay: serve a recorded task's model replies again, call by call.

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
