"""mini-swe-agent's own transcript, as the host keeps it (issue 31, item 7): within its cap, still JSON
while it can be, and saying what was cut. (Through the gateway and a real sandbox: tests/e2e/test_rollout.py.)"""

from __future__ import annotations

import json
from typing import Any

import pytest

from anyswe.agents.mini_swe_agent import TRANSCRIPT_BYTES, MiniSweAgentConfig, bounded_transcript

CAP = 64 * 1024


def transcript(*outputs: str) -> dict[str, Any]:
    """What mini-swe-agent's ``serialize()`` gives: its info, and each step's message and observation
    (the command's whole output in ``extra.raw_output``)."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a helpful assistant."}]
    for n, out in enumerate(outputs):
        messages.append({"role": "assistant", "content": f"step {n}", "extra": {"actions": [{"command": "cat x"}]}})
        messages.append({"role": "tool", "content": out[:200], "extra": {"raw_output": out, "returncode": 0}})
    return {"info": {"exit_status": "Submitted"}, "messages": messages, "trajectory_format": "mini-swe-agent-1.1"}


def test_a_transcript_within_the_cap_is_written_as_mini_swe_agent_writes_it() -> None:
    data = transcript("short output")
    assert bounded_transcript(data, CAP) == (json.dumps(data, indent=2), None)


def test_long_outputs_keep_their_head_and_tail_and_every_message() -> None:
    data = transcript("A" + "a" * 200_000 + "Z", "B" + "\ud800" * 50_000 + "Y")  # a lone surrogate, as JSON says
    text, note = bounded_transcript(data, CAP)
    assert len(text.encode()) <= CAP and note is not None and "over its 65536-byte cap" in note
    kept = json.loads(text)
    assert kept["info"] == {"exit_status": "Submitted", "anyswe_cut": note}
    assert [m["content"] for m in kept["messages"]] == [m["content"] for m in data["messages"]]
    first, second = (m["extra"]["raw_output"] for m in kept["messages"] if "raw_output" in m.get("extra", {}))
    assert first.startswith("Aaaa") and first.endswith("aaaZ") and "characters cut here" in first
    assert second.startswith("B\ud800") and second.endswith("\ud800Y")
    assert data["messages"][2]["extra"]["raw_output"] == "A" + "a" * 200_000 + "Z"  # the agent's own is left whole


def test_too_many_messages_for_any_cut_of_texts_end_at_the_cap_with_a_marker() -> None:
    text, note = bounded_transcript(transcript(*(["x" * 300] * 2000)), CAP)
    assert len(text.encode()) <= CAP and text.endswith("[anyswe: the transcript truncated at its 65536-byte cap]\n")
    assert note is not None and note.endswith("still over, it was truncated at the cap")


def test_the_cap_is_the_agents_setting_with_a_default_of_a_few_mib() -> None:
    assert MiniSweAgentConfig().transcript_bytes == TRANSCRIPT_BYTES == 4 * 1024 * 1024
    with pytest.raises(ValueError, match="transcript_bytes"):
        MiniSweAgentConfig(transcript_bytes=100)
