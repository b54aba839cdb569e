"""The parts of ``anyswe serve``'s Gym contract that need no sandbox: the policy model's routing
(nemo-gym's apply_rollout_prefix: the model server's root, ``/ng-rollout/<id>``, then ``/v1``),
the trajectory as Responses output items, token ids on each call's last item, and the trust boundary
of issue 31: a request names only what the server's config declares, over real HTTP with a token."""

from __future__ import annotations

import asyncio
import re
import socket
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from anyswe.gateway.trajectory import Step, StepMessage, StepReply, StepTokens, StepToolCall
from anyswe.gym import output_items
from anyswe.serve import RequestError, ServeConfig, Server

#: A value planted in the server's environment: no answer may ever hold it.
PLANTED = "planted-secret-value-31"


def test_the_policy_model_is_routed_as_gym_routes_it() -> None:
    server = Server(ServeConfig(model={"api": "openai-chat", "base_url": "http://10.0.0.5:8000/"}, dataset="demo"))
    params = {
        "model": "Qwen/Qwen3-Coder-30B-A3B-Instruct",
        "temperature": 0.7,
        "top_p": 0.8,
        "max_output_tokens": 12288,
    }
    body = {"responses_create_params": {**params, "metadata": {"instance_id": "demo__calc-1"}}, "_ng_rollout_id": "r-7"}
    instance, blocks = server.blocks(body)
    assert instance == "demo__calc-1"
    assert blocks["model"] == {
        "api": "openai-chat",
        "base_url": "http://10.0.0.5:8000/ng-rollout/r-7/v1",
        "model": "Qwen/Qwen3-Coder-30B-A3B-Instruct",
        "params": {"temperature": 0.7, "top_p": 0.8, "max_tokens": 12288},
    }
    # Without a rollout id, the root as it is.
    del body["_ng_rollout_id"]
    assert server.blocks(body)[1]["model"]["base_url"] == "http://10.0.0.5:8000/v1"
    # A root configured with its /v1 (as OpenAI clients are) gets no second one: it came out /v1/v1.
    with_v1 = Server(ServeConfig(model={"api": "openai-chat", "base_url": "http://10.0.0.5:8000/v1"}, dataset="demo"))
    assert with_v1.blocks({**body, "_ng_rollout_id": "r-8"})[1]["model"]["base_url"] == (
        "http://10.0.0.5:8000/ng-rollout/r-8/v1"
    )
    with pytest.raises(RequestError, match="_ng_rollout_id"):
        server.blocks({**body, "_ng_rollout_id": "../../admin"})
    with pytest.raises(RequestError, match="temperature must be a number"):
        server.blocks({"responses_create_params": {**params, "temperature": "hot", "metadata": {"instance_id": "a"}}})


def test_a_row_in_the_metadata_is_the_instance_of_a_declared_dataset() -> None:
    row = {"instance_id": "x__y-1", "repo": "x/y", "base_commit": "abc", "docker_image": "any/local:image"}
    meta: dict[str, Any] = {"instance_id": "x__y-1", "instance_dict": row, "dataset_name": "demo-swebench"}
    # By default the row is the declared dataset's, looked up by id: an inline row would choose the
    # local image that runs and the scripts and test lists that grade it (and so the reward).
    instance, blocks = Server(ServeConfig(dataset="demo", datasets=["demo-swebench"])).blocks(
        {"responses_create_params": {"metadata": meta}}
    )
    assert instance == "x__y-1" and blocks["dataset"] == "demo-swebench"
    with pytest.raises(RequestError, match="declares no dataset"):
        Server(ServeConfig()).blocks({"responses_create_params": {"metadata": {"instance_id": "x__y-1"}}})
    server = Server(ServeConfig(dataset="demo", datasets=["demo-swebench"], inline_rows=True))
    instance, blocks = server.blocks({"responses_create_params": {"metadata": meta}})
    assert instance == row and blocks["dataset"] == "demo-swebench"
    del meta["dataset_name"]  # the server's own dataset
    assert server.blocks({"responses_create_params": {"metadata": meta}})[1]["dataset"] == "demo"
    # Any other dataset, registered or not, is not this server's: its harness and images are not served.
    for other in ("swe-bench-verified", "d"):
        with pytest.raises(RequestError, match=f"metadata.dataset_name: '{other}' is not a dataset this server"):
            server.blocks({"responses_create_params": {"metadata": {**meta, "dataset_name": other}}})


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({}, "responses_create_params"),
        ({"responses_create_params": {"metadata": {}}}, "metadata.instance_id"),
        ({"responses_create_params": {"metadata": {"instance_id": "a"}}, "anyswe": [1]}, "`anyswe`"),
    ],
)
def test_malformed_requests_name_what_is_wrong(body: dict[str, object], words: str) -> None:
    with pytest.raises(RequestError, match=words):
        Server(ServeConfig()).blocks(body)


DECLARED = ServeConfig(
    agent={"type": "mini-swe-agent", "step_limit": 5},
    agents={"gold": {"type": "gold"}},
    model={"api": "scripted", "protocol": "openai-chat"},
    models={"claude": {"api": "scripted", "protocol": "anthropic-messages"}},
    provider="docker",
    providers={"small": {"type": "apptainer", "overlay_size_mb": 512}},
    dataset="demo",
)
META = {"instance_id": "demo__calc-1"}


def test_a_request_names_a_declared_block_and_gets_the_configs_own() -> None:
    server = Server(DECLARED)
    body = {"responses_create_params": {"metadata": META}, "anyswe": {"model": "claude", "provider": "small"}}
    blocks = server.blocks(body)[1]
    assert blocks["model"] == {"api": "scripted", "protocol": "anthropic-messages"}
    assert blocks["provider"] == {"type": "apptainer", "overlay_size_mb": 512}
    assert blocks["agent"] == {"type": "mini-swe-agent", "step_limit": 5}
    assert server.blocks({**body, "anyswe": {"agent": "default", "model": None}})[1]["model"]["protocol"] == (
        "openai-chat"
    )


@pytest.mark.parametrize(
    ("own", "field"),
    [
        ({"agent": {"type": "os:environ"}}, "anyswe.agent: name one of the server's agents"),
        ({"agent": "os:environ"}, "anyswe.agent: 'os:environ' is not one of the server's agents: default, gold"),
        ({"provider": {"type": "docker", "network": "host", "memory": None}}, "anyswe.provider: name one"),
        ({"model": {"api": "openai-chat", "base_url": "http://127.0.0.1:9/v1", "api_key_env": "X"}}, "anyswe.model"),
        ({"model": "scripted"}, "anyswe.model: 'scripted' is not one of the server's models: default, claude"),
        # An agent with no model: its request's model is still checked, never silently ignored.
        ({"agent": "gold", "model": {"api_key_env": "PLANTED_KEY"}}, "anyswe.model: name one"),
        ({"timeouts": {"agent": 999999}}, "anyswe.timeouts: a request may name only"),
        ({"image": "alpine"}, "anyswe.image: a request may name only"),
        ({"concurrency": 1000}, "anyswe.concurrency"),
        ({"dataset": "swe-bench-verified"}, "anyswe.dataset: 'swe-bench-verified' is not a dataset this server"),
    ],
)  # fmt: skip
def test_a_request_can_give_no_type_url_key_network_limit_image_or_timeout(
    own: dict[str, Any], field: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each of issue 31's hostile `anyswe` objects is refused naming its field, before anything is
    imported or resolved, and no error holds what the request did not send (the planted variable)."""
    monkeypatch.setenv("PLANTED_KEY", PLANTED)
    with pytest.raises(RequestError) as caught:
        Server(DECLARED).blocks({"responses_create_params": {"metadata": META}, "anyswe": own})
    assert str(caught.value).startswith(field), caught.value
    assert PLANTED not in str(caught.value)


def test_the_registry_names_what_was_asked_for_never_what_it_found(monkeypatch: pytest.MonkeyPatch) -> None:
    """A spec's dotted path to something that is not an agent class: the error says what kind of
    thing it found, never its value (it printed `os.environ` whole, a planted key included)."""
    from anyswe.agents import agent_class
    from anyswe.errors import SpecError

    monkeypatch.setenv("PLANTED_KEY", PLANTED)
    with pytest.raises(SpecError) as caught:
        agent_class("os:environ")
    assert "'os:environ' is a _Environ, not a subclass of Agent" in str(caught.value)
    assert PLANTED not in str(caught.value)
    with pytest.raises(SpecError, match="is class OrderedDict, not a subclass"):
        agent_class("collections:OrderedDict")


def test_a_config_may_not_name_a_block_default() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="'default' names the singular block"):
        ServeConfig(agents={"default": {"type": "gold"}})


def test_a_bad_declared_block_fails_the_server_at_start_naming_it(tmp_path: Path) -> None:
    from anyswe.errors import SpecError
    from anyswe.serve_cli import config_of

    config = tmp_path / "serve.yaml"
    config.write_text("agents:\n  fast: {type: mini-swe-agent, step_limt: 3}\n")
    with pytest.raises(SpecError, match=r"serve.yaml: agents.fast: .*step_limt"):
        config_of(config, [])
    config.write_text("providers:\n  x: {type: docker, memroy: 2g}\n")
    with pytest.raises(SpecError, match=r"serve.yaml: providers.x: .*memroy"):
        config_of(config, [])
    config.write_text("dataset: no-such-dataset\n")
    with pytest.raises(Exception, match="no-such-dataset"):
        config_of(config, [])


def test_output_items_in_order_with_token_ids_on_each_calls_last_item() -> None:
    call = StepToolCall(id="call_1", name="bash", arguments={"command": "ls"})
    steps = [
        Step(
            index=0,
            reply=StepReply(text="Let me look.", reasoning="think", tool_calls=[call]),
            tool_results=[StepMessage(role="tool", text="README.md", tool_call_id="call_1")],
            tokens=StepTokens(prompt_token_ids=[1, 2], generation_token_ids=[3, 4], generation_log_probs=[-0.1, -0.2]),
        ),
        Step(index=1, reply=StepReply(text="Done.")),
    ]
    items, tools = output_items(steps)
    assert [i["type"] for i in items] == ["reasoning", "message", "function_call", "function_call_output", "message"]
    assert items[2]["prompt_token_ids"] == [1, 2] and items[2]["generation_log_probs"] == [-0.1, -0.2]
    assert not any("prompt_token_ids" in i for i in items[:2] + items[3:])
    assert items[3]["call_id"] == items[2]["call_id"] == "call_1"
    assert tools == [{"type": "function", "name": "bash", "parameters": {}, "strict": False}]


@pytest.mark.parametrize(
    ("facts", "kind"),
    [
        ({"error_kind": "infra", "error": "SandboxStartError: docker could not start"}, "provider_unavailable"),
        ({"error_kind": "infra", "error": "SandboxLost: ... (OOMKilled, exit 137)"}, "provider_oom_killed"),
        ({"error_kind": "infra", "error": "SandboxLost: sandbox x died during the agent's work"}, "session_lost"),
        ({"error_kind": "infra", "error": "the model's upstream failed (3 calls)"}, "transport_unreachable"),
        ({"error_kind": "grading", "error": "GradingError: no report"}, "verifier_error"),
        ({"error_kind": "internal", "error": "Traceback ..."}, "anyswe:internal"),
        ({"agent_timed_out": True}, "agent_timeout"),
        ({"error_kind": "agent", "error": "PatchCaptureFailed: not a git repository"}, "agent_run_error"),
        ({"tests_timed_out": True}, "anyswe:eval_timeout"),
        ({}, None),
    ],
)  # fmt: skip
def test_failures_are_named_in_gyms_shared_vocabulary(facts: dict[str, object], kind: str | None) -> None:
    from types import SimpleNamespace

    from anyswe.gym import failure_kind

    rollout = SimpleNamespace(
        error_kind=facts.get("error_kind"),
        error=facts.get("error"),
        agent_timed_out=facts.get("agent_timed_out", False),
        result=SimpleNamespace(tests_timed_out=facts.get("tests_timed_out", False)),
    )
    assert failure_kind(rollout) == kind  # type: ignore[arg-type]


def test_a_model_free_agent_asked_for_gets_no_model() -> None:
    server = Server(
        ServeConfig(
            model={"api": "scripted", "protocol": "openai-chat"}, agents={"gold": {"type": "gold"}}, dataset="demo"
        )
    )
    body = {
        "responses_create_params": {"metadata": {"instance_id": "demo__calc-1"}},
        "anyswe": {"agent": "gold"},
    }
    assert server.blocks(body)[1]["model"] is None
    del body["anyswe"]
    assert server.blocks(body)[1]["model"] == {"api": "scripted", "protocol": "openai-chat"}


def test_the_server_gives_its_stop_signals_back_to_the_loop_it_ran_in() -> None:
    """A notebook's or a test's loop outlives the server: while it served, SIGTERM and SIGINT stopped
    it; afterwards they are what they were before (asyncio gives handlers back only when the loop is
    closed, and a kept one swallowed every later Ctrl-C)."""
    import asyncio
    import os
    import signal

    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    async def main() -> None:
        ready = asyncio.Event()
        served = asyncio.ensure_future(Server(ServeConfig(), token="t" * 32).serve("127.0.0.1", 0, ready))
        await asyncio.wait_for(ready.wait(), 30)
        assert signal.getsignal(signal.SIGTERM) != before[signal.SIGTERM]  # the server's, while it serves
        os.kill(os.getpid(), signal.SIGTERM)  # stops it, as a scheduler would
        await asyncio.wait_for(served, 30)

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(main())
        assert {s: signal.getsignal(s) for s in before} == before  # the loop still open
    finally:
        loop.close()


# -- over HTTP: the real server (aiohttp) on a loopback port, a real client -------------------------


async def _serving(config: ServeConfig, token: str | None, check: Callable[[Server, str], Awaitable[None]]) -> None:
    """Run ``check(server, url)`` against a real server on a free loopback port, then stop it."""
    server = Server(config, token)
    ready = asyncio.Event()
    served = asyncio.ensure_future(server.serve("127.0.0.1", 0, ready))
    try:
        await asyncio.wait_for(ready.wait(), 60)
        await check(server, f"http://127.0.0.1:{server.port}")
    finally:
        served.cancel()
        with pytest.raises(asyncio.CancelledError):
            await served


async def _post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
    import aiohttp

    async with aiohttp.ClientSession() as session, session.post(url + "/run", data=body, headers=headers) as resp:
        return resp.status, await resp.text()


def test_run_needs_the_token_and_refuses_what_a_request_may_not_give(monkeypatch: pytest.MonkeyPatch) -> None:
    """No token or a wrong one: 401, before the body is read. With it: a block, a deep body and a
    malformed one are 400s as JSON that name the field; the planted value is in no answer; nothing ran."""
    import json

    monkeypatch.setenv("PLANTED_KEY", PLANTED)
    token = "a-token-of-the-tests-own-" + "x" * 16
    good = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    row = {"responses_create_params": {"metadata": META}}

    async def check(server: Server, url: str) -> None:
        answers = {}
        for name, body, headers in [
            ("no token", row, {}),
            ("wrong token", row, {"Authorization": "Bearer " + "y" * 41}),
            ("basic", row, {"Authorization": f"Basic {token}"}),
            ("environ", {**row, "anyswe": {"agent": {"type": "os:environ"}}}, good),
            ("key", {**row, "anyswe": {"model": {"base_url": "http://127.0.0.1:9", "api_key_env": "PLANTED_KEY"}}},
             good),
            ("host net", {**row, "anyswe": {"provider": {"type": "docker", "network": "host"}}}, good),
        ]:  # fmt: skip
            answers[name] = await _post(url, json.dumps(body).encode(), headers)
        deep = b"[" * 100_000 + b"]" * 100_000
        answers["deep"] = await _post(url, deep, good)
        answers["nested in range but deep"] = await _post(url, b'{"a":' * 65 + b"1" + b"}" * 65, good)
        answers["not json"] = await _post(url, b"{nope", good)
        for name in ("no token", "wrong token", "basic"):
            assert answers[name][0] == 401, answers[name]
        for name in ("environ", "key", "host net", "deep", "nested in range but deep", "not json"):
            status, text = answers[name]
            assert status == 400 and json.loads(text)["error"].startswith("RequestError: "), (name, text)
        assert "anyswe.agent" in answers["environ"][1] and "anyswe.model" in answers["key"][1]
        assert "anyswe.provider" in answers["host net"][1]
        for name in ("deep", "nested in range but deep"):
            assert "nests deeper than 64" in answers[name][1], answers[name]
        assert not any(PLANTED in text for _, text in answers.values())
        assert server.served == 0 and server.running == 0

    asyncio.run(_serving(ServeConfig(dataset="demo"), token, check))


def test_a_connection_that_never_finishes_its_headers_is_closed() -> None:
    """200 slow-header connections sat open for 90 s and more: the header clock closes them."""

    async def check(server: Server, url: str) -> None:
        def slow() -> float:
            start = time.monotonic()
            with socket.create_connection(("127.0.0.1", server.port), timeout=30) as conn:
                conn.sendall(b"POST /run HTTP/1.1\r\nHost: x\r\n")  # and never the rest
                assert conn.recv(1024) == b""  # the server closed it
            return time.monotonic() - start

        def slow_body() -> bytes:
            with socket.create_connection(("127.0.0.1", server.port), timeout=30) as conn:
                head = f"POST /run HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {'t' * 32}\r\n"
                conn.sendall(head.encode() + b"Content-Length: 100\r\n\r\n{")  # and never the other 99
                return conn.recv(4096)

        def bad_bytes() -> bytes:  # a token that is not UTF-8 is a wrong token, not a crash (a 500)
            with socket.create_connection(("127.0.0.1", server.port), timeout=30) as conn:
                conn.sendall(
                    b"POST /run HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \xff\xfe\r\nContent-Length: 0\r\n\r\n"
                )
                return conn.recv(4096)

        assert (await asyncio.to_thread(bad_bytes)).startswith(b"HTTP/1.1 401")
        took = await asyncio.to_thread(slow)
        assert took < 25, took  # well before the socket's own 30 s: the server's 1 s clock closed it
        answer = await asyncio.to_thread(slow_body)
        assert answer.startswith(b"HTTP/1.1 400") and b"did not arrive within 1 s" in answer, answer

    asyncio.run(_serving(ServeConfig(header_timeout=1.0, body_timeout=1.0), "t" * 32, check))


def test_a_server_given_no_token_makes_one_beside_its_run_and_says_where_never_what(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async def check(server: Server, url: str) -> None:
        (path,) = tmp_path.glob("serve-*.token")
        assert path.stat().st_mode & 0o777 == 0o600
        token = path.read_text().strip()
        assert len(token) >= 32 and token == server.token
        out = capsys.readouterr().out
        assert str(path) in out and token not in out
        status, _ = await _post(url, b"{}", {"Authorization": f"Bearer {token}"})
        assert status == 400  # let in (and the empty request refused as the request's own fault)

    asyncio.run(_serving(ServeConfig(run_dir=tmp_path), None, check))
    assert list(tmp_path.glob("serve-*.token")) == []  # gone with the server


def test_a_token_file_must_hold_a_real_token(tmp_path: Path) -> None:
    from anyswe.errors import SpecError
    from anyswe.serve import read_token

    path = tmp_path / "token"
    path.write_text("short\n")
    with pytest.raises(SpecError, match=f"--token-file {path}: a token of at least 16"):
        read_token(path)
    with pytest.raises(SpecError, match=r"--token-file .*missing"):
        read_token(tmp_path / "missing")
    path.write_text("z" * 40 + "\n")
    path.chmod(0o644)  # as ssh refuses a key others may read
    with pytest.raises(SpecError, match=rf"--token-file {path}: other users may read or write it \(chmod 600"):
        read_token(path)
    path.chmod(0o600)
    assert read_token(path) == "z" * 40


def test_auth_none_is_the_configs_own_choice_and_only_on_loopback_unless_it_says_more(tmp_path: Path) -> None:
    from anyswe.errors import SpecError
    from anyswe.serve import check_auth

    open_ = ServeConfig(auth="none")
    check_auth(open_, "127.0.0.1", None)
    check_auth(open_, "::1", None)
    for host in ("0.0.0.0", "10.1.2.3", "gym-head"):
        with pytest.raises(SpecError, match=f"auth: none on {host}: any client"):
            check_auth(open_, host, None)
        check_auth(ServeConfig(auth="none", auth_none_off_loopback=True), host, None)
    with pytest.raises(SpecError, match="auth: none takes no --token-file"):
        check_auth(open_, "127.0.0.1", tmp_path / "token")
    check_auth(ServeConfig(), "0.0.0.0", None)  # a token guards it
    with pytest.raises(ValueError, match="auth"):
        ServeConfig(auth="open")  # type: ignore[arg-type]


def _policy(config: ServeConfig, params: dict[str, object]) -> dict[str, object]:
    body = {"responses_create_params": {"metadata": {"instance_id": "demo__calc-1"}, **params}}
    return dict(Server(config).blocks(body)[1]["model"])


def test_a_request_samples_and_names_its_model_only_within_the_configs_bounds() -> None:
    keyed = {"api": "openai-chat", "base_url": "http://10.0.0.5:8000", "api_key_env": "PAID_KEY", "model": "m-1"}
    config = ServeConfig(model=keyed, dataset="demo", request_models=["m-2"])
    assert _policy(config, {"model": "m-2", "temperature": 1.5, "top_p": 0.5})["params"] == {
        "temperature": 1.5,
        "top_p": 0.5,
    }
    for params, words in (
        ({"temperature": 7}, "temperature 7 is outside this server's bounds [0, 2]"),
        ({"max_output_tokens": 10**9}, "max_output_tokens 1e+09 is outside"),
        ({"top_p": -1}, "top_p -1 is outside"),
        ({"model": "the-expensive-one"}, "'the-expensive-one' is not a model this server serves"),
    ):
        with pytest.raises(RequestError, match=re.escape(words)):
            _policy(config, params)
    # A key of the server's and no model named: a request may not choose one to spend it on.
    keyed_unnamed = ServeConfig(model={k: v for k, v in keyed.items() if k != "model"}, dataset="demo")
    with pytest.raises(RequestError, match="not a model this server serves"):
        _policy(keyed_unnamed, {"model": "anything"})
    # Gym's own policy server, no key: the request names its policy, as Gym routes it.
    free = ServeConfig(model={"api": "openai-chat", "base_url": "http://10.0.0.5:8000"}, dataset="demo")
    assert _policy(free, {"model": "Qwen/Qwen3-8B"})["model"] == "Qwen/Qwen3-8B"
    bounded = ServeConfig(model=free.model, dataset="demo", sampling_bounds={"temperature": (0.0, 0.5)})
    with pytest.raises(RequestError, match=r"temperature 1 is outside this server's bounds \[0, 0.5\]"):
        _policy(bounded, {"temperature": 1.0})


def test_an_error_a_client_is_told_names_nothing_of_the_servers_model() -> None:
    from anyswe.gym import _told
    from anyswe.serve_request import Requests

    config = ServeConfig(model={"api": "openai-chat", "base_url": "http://10.0.0.5:8000/v1", "model": "policy-7b"})
    error = "the model's upstream failed (2 calls; last 503: http://10.0.0.5:8000/v1/chat/completions policy-7b)"
    told = _told(error, Requests(config).private())
    assert "10.0.0.5" not in told and "policy-7b" not in told and told.startswith("the model's upstream failed")
