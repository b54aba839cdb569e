"""Replay: serve a recorded task's model replies again, call by call.

A task's trajectory (``tasks/<key>/trajectory.jsonl``, written by the gateway) holds every call
with a digest of the conversation it was sent and the reply it got. Replayed, call N gets the N-th
recorded reply if its conversation is the one recorded; the first call that differs — a different
tool output, an extra call — ends the replay with an error that names it. So a docker run replayed
on apptainer gives the agent the very same model outputs, and any difference in the patch comes
from the runtime.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from anyswe.gateway.errors import UpstreamRefused
from anyswe.gateway.wire import Conversation, Reply, ToolCall, Usage, conversation_hash


class ReplayModel:
    """Replies from one recorded trajectory, in order, while the conversation matches the recording."""

    def __init__(self, records: list[dict[str, Any]], source: str) -> None:
        self.records = records
        self.source = source
        self.calls = 0

    @classmethod
    def load(cls, trajectory: Path) -> ReplayModel:
        records = [json.loads(line) for line in trajectory.read_text().splitlines() if line.strip()]
        # A refused call (a cap the task hit) is noted in the trajectory but was never answered.
        return cls([r for r in records if "refused" not in r], str(trajectory))

    def reply(self, conv: Conversation) -> Reply:
        n, self.calls = self.calls, self.calls + 1
        if n >= len(self.records):
            raise UpstreamRefused(f"replay of {self.source}: call {n + 1} was never made in the recording")
        record = self.records[n]
        if conversation_hash(conv.messages) != record.get("conversation_hash"):
            raise UpstreamRefused(
                f"replay of {self.source} diverged at call {n + 1}: the conversation differs from the recording"
            )
        recorded = record["reply"]
        calls = [ToolCall(c["id"], c["name"], c["arguments"]) for c in recorded.get("tool_calls", [])]
        usage = Usage(**record.get("usage", {}))
        return Reply(text=recorded.get("text", ""), tool_calls=calls, usage=usage, stop=recorded.get("stop", "end"))
