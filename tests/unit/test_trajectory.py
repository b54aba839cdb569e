"""The trajectory contract (anyswe/gateway/trajectory.py, issue 22 item 3): the real gateway writes one
typed step per call over real HTTP in each wire protocol, and the one reader gives the same neutral
steps whatever the protocol: the messages new since the previous call, the reply, the tool results
the agent then saw, usage and latency. Rows written before the contract read the same way."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from anyswe.errors import ResultsError
from anyswe.gateway import Gateway
from anyswe.gateway.grants import Grant
from anyswe.gateway.replay import ReplayModel
from anyswe.gateway.scripted import ScriptedModel
from anyswe.gateway.trajectory import (
    CONVERSATION_FIELDS,
    SCHEMA_VERSION,
    Answered,
    Refused,
    Step,
    read_trajectory,
    record_line,
)
from anyswe.gateway.wire import Conversation, Message, Reply, ToolCall, Usage
from anyswe.model import PriceSpec

STEPS = ["ls /testbed", "sed -i 's/a/b/' /testbed/x.py"]
SCHEMA = {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}
TOOLS = {
    "anthropic-messages": [{"name": "bash", "input_schema": SCHEMA}],
    "openai-chat": [{"type": "function", "function": {"name": "bash", "parameters": SCHEMA}}],
    "openai-responses": [{"type": "function", "name": "bash", "parameters": SCHEMA}],
}
PATHS = {
    "anthropic-messages": "/v1/messages",
    "openai-chat": "/v1/chat/completions",
    "openai-responses": "/v1/responses",
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _body(protocol: str, turns: list[tuple[str, dict[str, Any]]], user: str = "fix it") -> dict[str, Any]:
    """A request whose history is ``user`` then, per earlier turn, the call (id, arguments) and "x.py"."""
    if protocol == "anthropic-messages":
        msgs: list[Any] = [{"role": "user", "content": user}]
        for cid, args in turns:
            msgs.append(
                {"role": "assistant", "content": [{"type": "tool_use", "id": cid, "name": "bash", "input": args}]}
            )
            msgs.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": cid, "content": "x.py"}]})
        return {"model": "m", "max_tokens": 100, "system": "be brief", "messages": msgs, "tools": TOOLS[protocol]}
    if protocol == "openai-chat":
        msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": user}]
        for cid, args in turns:
            call = {"id": cid, "type": "function", "function": {"name": "bash", "arguments": json.dumps(args)}}
            msgs += [{"role": "assistant", "content": None, "tool_calls": [call]}]
            msgs += [{"role": "tool", "tool_call_id": cid, "content": "x.py"}]
        return {"model": "m", "messages": msgs, "tools": TOOLS[protocol]}
    items: list[Any] = [{"role": "user", "content": user}]
    for cid, args in turns:
        items.append({"type": "function_call", "call_id": cid, "name": "bash", "arguments": json.dumps(args)})
        items.append({"type": "function_call_output", "call_id": cid, "output": "x.py"})
    return {"model": "m", "instructions": "be brief", "input": items, "tools": TOOLS[protocol]}


def _call(protocol: str, reply: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The tool call in a reply: (its id, its arguments)."""
    if protocol == "anthropic-messages":
        block = next(b for b in reply["content"] if b["type"] == "tool_use")
        return block["id"], block["input"]
    if protocol == "openai-chat":
        call = reply["choices"][0]["message"]["tool_calls"][0]
        return call["id"], json.loads(call["function"]["arguments"])
    item = next(i for i in reply["output"] if i["type"] == "function_call")
    return item["call_id"], json.loads(item["arguments"])


async def _session(protocol: str, trajectory: Path) -> None:
    """Two tool turns, then a call whose history the agent rewrote (as a compaction does)."""
    async with Gateway() as gw:
        await gw.start()
        token = gw.grant("t", "scripted-m", ScriptedModel(STEPS, submit="echo done"), trajectory=trajectory)
        headers = {"Authorization": f"Bearer {token}", "x-api-key": token, "Content-Type": "application/json"}
        turns: list[tuple[str, dict[str, Any]]] = []
        async with aiohttp.ClientSession() as http:
            for body in (
                lambda: _body(protocol, turns),
                lambda: _body(protocol, turns),
                lambda: _body(protocol, [], "again"),
            ):
                async with http.post(gw.url() + PATHS[protocol], json=body(), headers=headers) as r:
                    assert r.status == 200, await r.text()
                    turns.append(_call(protocol, await r.json()))


def _neutral(steps: list[Any]) -> list[Any]:
    """What must be the same whatever the protocol: no ids, no raw request, no times."""

    def msg(m: Any) -> tuple[Any, ...]:
        return (m.role, m.text, [(c.name, c.arguments) for c in m.tool_calls])

    return [
        (
            s.index,
            s.prior_messages,
            s.rewritten,
            [msg(m) for m in s.messages],
            (s.reply.text, [(c.name, c.arguments) for c in s.reply.tool_calls], s.reply.stop),
            [msg(m) for m in s.tool_results],
            s.usage.input_tokens > 0 and s.usage.output_tokens > 0,
        )
        for s in steps
    ]


@pytest.mark.anyio
async def test_one_neutral_step_per_call_in_every_protocol(tmp_path: Path) -> None:
    seen = {}
    for protocol in PATHS:
        path = tmp_path / f"{protocol}.jsonl"
        await _session(protocol, path)
        steps = read_trajectory(path)
        assert all(s.schema_version == SCHEMA_VERSION and s.protocol == protocol for s in steps)
        assert all(s.latency_s is not None and s.conversation_hash for s in steps)
        assert steps[0].request["tools"] == TOOLS[protocol]  # the body as sent, for what the neutral form leaves out
        # ...but for the conversation, which the steps hold once (sent whole each call, it grew with its square).
        assert not any(CONVERSATION_FIELDS & set(s.request) for s in steps)
        seen[protocol] = _neutral(steps)
    first = seen["openai-chat"]
    assert seen["anthropic-messages"] == first and seen["openai-responses"] == first
    ls = ("bash", {"command": STEPS[0]})
    result = ("tool", "x.py", [])
    assert first[0][:4] == (0, 0, False, [("system", "be brief", []), ("user", "fix it", [])])
    assert first[0][4][1] == [ls] and first[0][5] == [result]  # the tool result the agent then saw
    # The second call: only what is new (the agent's tool call and its result), after 2 messages.
    assert first[1][:4] == (1, 2, False, [("assistant", "", [ls]), result])
    # The third sent a history that is not the second's continued: every message is new again.
    assert first[2][:4] == (2, 0, True, [("system", "be brief", []), ("user", "again", [])])


@pytest.mark.anyio
async def test_replay_serves_the_steps_again(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    await _session("openai-chat", path)
    assert len(ReplayModel.load(path).steps) == 3


def test_rows_written_before_the_contract_read_as_steps(tmp_path: Path) -> None:
    """A row as the gateway wrote it before (the whole request body, no schema_version)."""
    first = _body("openai-chat", [])
    second = _body("openai-chat", [("c1", {"command": "ls"})])
    reply = {"text": "", "tool_calls": [{"id": "c1", "name": "bash", "arguments": {"command": "ls"}}], "stop": "tool"}
    old = [
        {"time": 1.0, "latency_s": 0.1, "protocol": "openai-chat", "model": "m", "conversation_hash": "h1",
         "request": first, "reply": reply, "usage": {"input_tokens": 5, "output_tokens": 2}},
        {"time": 2.0, "refused": "calls (1)", "request_bytes": 10},
        {"time": 3.0, "latency_s": 0.1, "protocol": "openai-chat", "model": "m", "conversation_hash": "h2",
         "request": second, "reply": {"text": "done"}, "usage": {}},
    ]  # fmt: skip
    path = tmp_path / "old.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in old) + '{"time": 4.0, "protoc')  # and a torn last line
    steps = read_trajectory(path)
    assert [s.refused for s in steps] == [None, "calls (1)", None]
    one, _, three = steps
    assert [m.role for m in one.messages] == ["system", "user"] and one.usage.input_tokens == 5
    assert (three.prior_messages, [m.role for m in three.messages]) == (2, ["assistant", "tool"])
    assert [m.text for m in one.tool_results] == ["x.py"] and three.reply is not None and three.reply.text == "done"
    assert len(ReplayModel.load(path).steps) == 2  # the refusal was never answered


def test_a_corrupt_line_names_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"time": 1}\nnot json\n{"time": 2}\n')
    with pytest.raises(ResultsError, match=r"t.jsonl:2: not JSON"):
        read_trajectory(path)


def test_every_unreadable_line_is_a_located_problem_and_the_rest_is_read(tmp_path: Path) -> None:
    """Issue 31, item 4: bytes that are not UTF-8, a line cut short (in the middle and at the end), JSON
    that is not a step: each is named by file and line, and every other step is still read; without a
    list to put them in, the first is raised (a replay must not serve a recording with a hole in it)."""
    good = json.dumps({"schema_version": 1, "reply": {"text": "ok"}}).encode()
    not_a_step = b'{"schema_version": 1, "index": "x"}'
    lines = [good, good[:20] + b"\xff\xfe" + good[20:], good[:25], b"[1, 2]", not_a_step, good]
    path = tmp_path / "trajectory.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n" + good[:30])
    problems: list[str] = []
    steps = read_trajectory(path, problems=problems)
    assert [s.reply.text for s in steps if s.reply] == ["ok", "ok"]
    assert problems == [
        f"{path}:2: not UTF-8 (byte 0xff at column 21)",
        f"{path}:3: not JSON (Unterminated string starting at: column 23)",
        f"{path}:4: not a step (a JSON list, not an object)",
        f"{path}:5: not a step (index: Input should be a valid integer, unable to parse string as an integer)",
        f"{path}:7: a line cut short",
    ]
    with pytest.raises(ResultsError, match=r"trajectory.jsonl:2: not UTF-8"):
        read_trajectory(path)


# Any text, surrogate code points (which JSON can say, and a model or an agent can send) most of all;
# a high and a low one in a row too. (st.text drops surrogates from any alphabet it is given.)
SURROGATE_PAIR = st.just("\ud83d\ude00")
TEXT = st.lists(st.one_of(st.characters(), st.characters(categories=["Cs"]), SURROGATE_PAIR)).map("".join)


@settings(max_examples=200, deadline=None)
@given(text=TEXT)
def test_any_text_the_gateway_records_reads_back(text: str) -> None:
    """Whatever text a call holds, its trajectory line is UTF-8 and reads back as the same text (as JSON
    reads it: a high and a low surrogate escaped in a row are the one character they stand for)."""
    grant = Grant(key="t", model="m", upstream=ScriptedModel([]))
    call = ToolCall(text, text, {text: text, "n": [text]})
    conv = Conversation(model="m", messages=[Message("user", text), Message("assistant", text, [call])])
    reply = Reply(text=text, tool_calls=[call], reasoning=text)
    body = {"model": "m", "messages": [], text: text}
    lines = record_line(grant, Answered("openai-chat", body, conv, reply, 0.1, 1.0, seq=0))
    lines += record_line(grant, Refused(why=text, request_bytes=1, time=2.0))
    lines.decode()  # strict: UTF-8 only
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trajectory.jsonl"
        path.write_bytes(lines)
        step, refused = read_trajectory(path)
    same = json.loads(json.dumps(text))
    read = ToolCall(same, same, {same: same, "n": [same]})
    assert step.reply is not None and (step.reply.text, step.reply.reasoning) == (same, same)
    assert [(c.id, c.name, c.arguments) for c in step.reply.tool_calls] == [(read.id, read.name, read.arguments)]
    assert [(m.role, m.text) for m in step.messages] == [("user", same), ("assistant", same)]
    assert step.request == {"model": "m", same: same} and refused.refused == same


class Thinking:
    """An upstream that reasons before its tool call (as a reasoning model behind a policy server)."""

    def reply(self, conv: Conversation) -> Reply:
        call = ToolCall("c1", "bash", {"command": "ls"})
        return Reply(reasoning="look before fixing", tool_calls=[call], stop="tool_use", usage=Usage(1000, 100))


@pytest.mark.anyio
async def test_a_step_keeps_the_reasoning_and_its_cost(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    async with Gateway() as gw:
        await gw.start()
        token = gw.grant("t", "m", Thinking(), trajectory=path, prices=PriceSpec(input=3.0, output=15.0))
        async with aiohttp.ClientSession() as http:
            body = _body("openai-chat", [])
            async with http.post(gw.url() + PATHS["openai-chat"], json=body, headers={"x-api-key": token}) as r:
                message = (await r.json())["choices"][0]["message"]
    assert message["reasoning_content"] == "look before fixing"  # the agent sees it, as vLLM returns it
    (step,) = read_trajectory(path)
    assert step.reply is not None and step.reply.reasoning == "look before fixing"
    assert step.cost_usd == pytest.approx((1000 * 3.0 + 100 * 15.0) / 1e6)


def test_after_a_rewritten_history_a_step_gets_the_results_of_its_own_calls(tmp_path: Path) -> None:
    call = {"id": "c2", "name": "bash", "arguments": {"command": "ls"}}
    old_result = {"role": "tool", "text": "from before", "tool_call_id": "c1"}
    steps = [
        Step(index=0, reply={"tool_calls": [call]}),  # type: ignore[arg-type]
        Step(
            index=1,
            rewritten=True,  # compacted: an older call's result is in the history again
            messages=[
                {"role": "user", "text": "summary"},
                old_result,
                {"role": "tool", "text": "x.py", "tool_call_id": "c2"},
            ],  # type: ignore[list-item]
            reply={"text": "done"},  # type: ignore[arg-type]
        ),
    ]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(s.model_dump_json() + "\n" for s in steps))
    assert [m.text for m in read_trajectory(path)[0].tool_results] == ["x.py"]


def test_claude_codes_own_transcript_adds_its_errors_and_last_results(tmp_path: Path) -> None:
    """Claude Code's stream-json (its ``user`` events' tool results) holds what the gateway never saw:
    whether a result was an error, and the result of a call after which no model call came."""
    calls = [{"id": "toolu_1", "name": "Bash", "arguments": {"command": "pytest"}}]
    last = [{"id": "toolu_2", "name": "Bash", "arguments": {"command": "git diff"}}]
    steps = [
        Step(index=0, reply={"tool_calls": calls}),  # type: ignore[arg-type]
        Step(
            index=1,
            prior_messages=2,
            messages=[{"role": "tool", "text": "1 failed", "tool_call_id": "toolu_1"}],  # type: ignore[list-item]
            reply={"tool_calls": last},  # type: ignore[arg-type]
        ),
    ]
    task = tmp_path / "tasks" / "k"
    task.mkdir(parents=True)
    (task / "trajectory.jsonl").write_text("".join(s.model_dump_json() + "\n" for s in steps))

    def result(call: str, content: object, **more: object) -> dict[str, object]:
        block = {"type": "tool_result", "tool_use_id": call, "content": content, **more}
        return {"type": "user", "message": {"content": [block]}}

    events = [
        {"type": "system", "subtype": "init"},
        {"type": "assistant", "message": {"content": [{"type": "tool_use", "id": "toolu_1", "name": "Bash"}]}},
        result("toolu_1", "1 failed", is_error=True),
        result("toolu_2", [{"type": "text", "text": "diff --git"}]),
        {"type": "result", "subtype": "error_max_turns", "num_turns": 2},
    ]  # fmt: skip
    (task / "agent-claude-code.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    first, second = read_trajectory(task / "trajectory.jsonl")
    assert [(m.text, m.is_error) for m in first.tool_results] == [("1 failed", True)]
    assert [(m.tool_call_id, m.text, m.is_error) for m in second.tool_results] == [("toolu_2", "diff --git", False)]
    # Given the task's files (a rollout has them in memory), the same.
    files = {"agent-claude-code.jsonl": (task / "agent-claude-code.jsonl").read_text()}
    (task / "agent-claude-code.jsonl").unlink()
    assert read_trajectory(task / "trajectory.jsonl", files)[1].tool_results[0].text == "diff --git"
    assert read_trajectory(task / "trajectory.jsonl")[1].tool_results == []


class Long:
    """An upstream whose reply is larger than loopback's socket buffers: its answer cannot be written
    at once, so the gateway's handler waits on the agent to read it."""

    def reply(self, conv: Conversation) -> Reply:
        return Reply(text="x" * (48 * 1024 * 1024), usage=Usage(5, 7))


async def _stalled_call(gw: Gateway, token: str) -> tuple[Any, Any]:
    """A chat call whose agent reads the first bytes of the answer, then nothing (its socket stays open)."""
    import asyncio

    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "go"}]}).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", gw.ports["127.0.0.1"])
    writer.write(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer %s\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (token.encode(), len(body), body)
    )
    assert (await reader.read(12)).startswith(b"HTTP/1.1 200")
    return reader, writer


@pytest.mark.anyio
async def test_a_step_is_written_when_its_agent_stops_reading_or_goes_away(tmp_path: Path) -> None:
    """Steps are written once the answer is out, off the call's path: revoking the grant writes a step
    whose answer is still being written (the task reads the file next), and an agent gone mid-answer
    still has its step."""
    import asyncio

    async with Gateway() as gw:
        await gw.start()
        for case in ("revoked", "gone"):
            path = tmp_path / f"{case}.jsonl"
            token = gw.grant(case, "m", Long(), trajectory=path)
            _, writer = await _stalled_call(gw, token)
            await asyncio.sleep(0.2)  # the gateway's handler now waits for the agent to read
            assert not path.exists() or path.read_text() == ""  # not yet written: the answer is not out
            if case == "revoked":
                used = gw.revoke(token)
                assert used.calls == 1 and used.usage.output_tokens == 7  # usage is settled before the answer
            else:
                writer.close()
                for _ in range(200):
                    if path.exists() and path.read_text():
                        break
                    await asyncio.sleep(0.02)
            (step,) = read_trajectory(path)
            assert step.reply is not None and len(step.reply.text) == 48 * 1024 * 1024 and step.usage.output_tokens == 7
            writer.close()
