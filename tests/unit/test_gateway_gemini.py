"""Google's ``generateContent`` protocol at the gateway (``google-generate-content``), spoken by Google's own
Python SDK (google-genai, pinned): the model and streaming come from the path, the key from
``x-goog-api-key``; tool declarations, calls and their responses, the scripted model's steps, usage,
the trajectory, errors in Google's shape; and the request shapes litellm sends (snake_case)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from google import genai
from google.genai import errors, types

from anyswe.gateway import Budget, Gateway, ScriptedModel
from anyswe.gateway.trajectory import read_trajectory
from anyswe.gateway.wire import read_request

pytestmark = pytest.mark.anyio

STEPS = ["ls /testbed", "sed -i 's/a/b/' /testbed/x.py"]
SHELL = types.FunctionDeclaration(
    name="run_shell_command",
    description="Runs a shell command.",
    parameters_json_schema={"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Gateway]:
    async with Gateway(socket_dir=tmp_path / "sock") as gw:
        await gw.start()
        yield gw


def _client(gw: Gateway, token: str) -> genai.Client:
    options = types.HttpOptions(base_url=gw.url(), retry_options=types.HttpRetryOptions(attempts=1))
    return genai.Client(api_key=token, http_options=options)


def _config() -> types.GenerateContentConfig:
    return types.GenerateContentConfig(
        system_instruction="You fix bugs.",
        tools=[types.Tool(function_declarations=[SHELL])],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
    )


async def test_calls_and_results_round_trip_json_and_stream(gateway: Gateway, tmp_path: Path) -> None:
    token = gateway.grant("task-1", "scripted-m", ScriptedModel(STEPS), trajectory=tmp_path / "traj.jsonl")
    client = _client(gateway, token)
    ask = [types.Content(role="user", parts=[types.Part(text="fix it")])]
    first = await client.aio.models.generate_content(model="gemini-x", contents=ask, config=_config())
    assert first.function_calls is not None and len(first.function_calls) == 1
    call = first.function_calls[0]
    assert (call.name, call.args) == ("run_shell_command", {"command": STEPS[0]})
    assert first.candidates is not None and first.candidates[0].finish_reason == types.FinishReason.STOP
    assert first.usage_metadata is not None and first.usage_metadata.prompt_token_count
    assert first.model_version == "gemini-x"
    # The call's result, by id, as Gemini CLI sends it; the reply streamed this time.
    history = [
        *ask,
        types.Content(role="model", parts=[types.Part(function_call=call)]),
        types.Content(
            role="user",
            parts=[
                types.Part(
                    function_response=types.FunctionResponse(id=call.id, name=call.name, response={"output": "x.py"})
                )
            ],
        ),
    ]
    chunks = [
        c
        async for c in await client.aio.models.generate_content_stream(
            model="gemini-x", contents=history, config=_config()
        )
    ]
    calls = [fc for c in chunks for fc in c.function_calls or []]
    assert [(fc.name, fc.args) for fc in calls] == [("run_shell_command", {"command": STEPS[1]})]
    assert chunks[-1].usage_metadata is not None and chunks[-1].usage_metadata.candidates_token_count
    done = [*history, types.Content(role="model", parts=[types.Part(function_call=calls[0])])]
    done.append(
        types.Content(
            role="user",
            parts=[
                types.Part(
                    function_response=types.FunctionResponse(
                        id=calls[0].id, name=calls[0].name, response={"output": ""}
                    )
                )
            ],
        )
    )
    final = await client.aio.models.generate_content(model="gemini-x", contents=done, config=_config())
    assert final.text and not final.function_calls
    gateway.revoke(token)
    steps = read_trajectory(tmp_path / "traj.jsonl")
    assert [s.protocol for s in steps] == ["google-generate-content"] * 3
    assert steps[0].messages[0].role == "system" and steps[0].messages[0].text == "You fix bugs."
    # Each call's result, as the next request brought it, is tied to the call.
    assert [m.tool_call_id for m in steps[0].tool_results] == [call.id]
    assert json.loads(steps[0].tool_results[0].text) == {"output": "x.py"}


async def test_a_wrong_key_and_a_budget_are_refused_in_googles_shape(gateway: Gateway, tmp_path: Path) -> None:
    token = gateway.grant("task-1", "scripted-m", ScriptedModel(STEPS), budget=Budget(calls=1))
    ask = [types.Content(role="user", parts=[types.Part(text="fix it")])]
    with pytest.raises(errors.ClientError) as wrong:
        await _client(gateway, "not-a-token").aio.models.generate_content(model="m", contents=ask)
    assert wrong.value.code == 401 and wrong.value.status == "UNAUTHENTICATED"
    client = _client(gateway, token)
    await client.aio.models.generate_content(model="m", contents=ask, config=_config())
    with pytest.raises(errors.ClientError) as spent:
        await client.aio.models.generate_content(model="m", contents=ask, config=_config())
    assert spent.value.code == 401 and "budget exhausted" in str(spent.value.message)


def test_litellms_snake_case_request_reads_as_googles_own() -> None:
    """litellm's gemini/ provider writes proto field names (function_declarations, function_call, ...);
    the API takes both spellings, and so does the gateway. OpenAPI-style schemas (types in capitals) are
    read as JSON Schema."""
    camel = {
        "model": "m",
        "systemInstruction": {"parts": [{"text": "be brief"}]},
        "contents": [
            {"role": "user", "parts": [{"text": "fix it"}]},
            {"role": "model", "parts": [{"functionCall": {"name": "bash", "args": {"command": "ls"}}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "bash", "response": {"content": "x.py"}}}]},
        ],
        "tools": [
            {
                "functionDeclarations": [
                    {"name": "bash", "parameters": {"type": "OBJECT", "properties": {"command": {"type": "STRING"}}}}
                ]
            }
        ],
    }
    snake = json.loads(
        json.dumps(camel)
        .replace("systemInstruction", "system_instruction")
        .replace("functionCall", "function_call")
        .replace("functionResponse", "function_response")
        .replace("functionDeclarations", "function_declarations")
    )
    for body in (camel, snake):
        conv = read_request("google-generate-content", body)
        assert [m.role for m in conv.messages] == ["system", "user", "assistant", "tool"]
        # A call without an id is paired with its result by the function's name.
        assert conv.messages[2].tool_calls[0].id == conv.messages[3].tool_call_id == "bash"
        assert json.loads(conv.messages[3].text) == {"content": "x.py"}
        assert conv.tools == {"bash": {"type": "object", "properties": {"command": {"type": "string"}}}}


async def test_an_unknown_model_method_is_a_404_in_googles_shape(gateway: Gateway) -> None:
    import aiohttp

    async with aiohttp.ClientSession() as s, s.post(gateway.url() + "/v1beta/models/m:embedContent", json={}) as r:
        body: dict[str, Any] = await r.json()
    assert r.status == 404 and "no route" in body["error"]["message"]
