"""Token capture for RL (issue 23): a policy server that returns token ids and log-probs in vLLM's fields
(tests/e2e/policy_server.py, scripted), behind anyswe's gateway; the rollout keeps them per call,
says whether the calls form one prefix chain, masks one that does not when asked, and ``anyswe
serve`` hands them on in Gym's field names on each call's last output item, the policy reached under
the rollout's ``/ng-rollout/<id>`` prefix."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gymkit import AUTH, gym_python, gym_rows, serve_argv, started, validate

import anyswe
from anyswe.agents import agent_class

__all__ = ["gym_python"]

pytestmark = [pytest.mark.containers, pytest.mark.usefixtures("runtimes")]

SERVER = Path(__file__).with_name("policy_server.py")
MINI = {"type": "mini-swe-agent", "step_limit": 20}


class Policy:
    def __init__(self, proc: subprocess.Popen[str], url: str, log: Path) -> None:
        self.proc, self.url, self.log = proc, url, log

    def requests(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.log.read_text().splitlines()] if self.log.is_file() else []


def _policy(tmp_path: Path, *extra: str) -> Iterator[Policy]:
    patch = tmp_path / "fix.diff"
    patch.write_text(anyswe.load_dataset("demo-swebench").by_id()["demo__calc-1"].patch)
    log = tmp_path / "policy.log"
    submit = agent_class("mini-swe-agent").submit_command or ""
    argv = [sys.executable, str(SERVER), "--patch", str(patch), "--submit", submit, "--log", str(log), *extra]
    proc, url = started(argv)
    try:
        yield Policy(proc, url, log)
    finally:
        proc.kill()
        proc.wait(timeout=30)


@pytest.fixture
def policy(tmp_path: Path) -> Iterator[Policy]:
    yield from _policy(tmp_path)


@pytest.fixture
def compacting_policy(tmp_path: Path) -> Iterator[Policy]:
    yield from _policy(tmp_path, "--break-chain")


def _model(url: str, **kw: Any) -> dict[str, Any]:
    return {"api": "openai-chat", "base_url": url + "/v1", "model": "policy", "token_ids": True, **kw}


def test_token_ids_are_kept_per_call_and_form_a_prefix_chain(policy: Policy) -> None:
    r = anyswe.rollout("demo__calc-1", dataset="demo-swebench", agent=MINI, model=_model(policy.url), provider="docker")
    assert r.resolved and r.reward == 1.0 and not r.mask_sample, r.error
    assert len(r.trajectory) == 2 and r.token_prefix_chain is True
    for step in r.trajectory:
        t = step.tokens
        assert t is not None and t.prompt_token_ids and t.generation_token_ids, step
        assert t.generation_log_probs is not None and len(t.generation_log_probs) == len(t.generation_token_ids)
    first, second = (s.tokens for s in r.trajectory)
    assert first is not None and second is not None and first.prompt_token_ids and first.generation_token_ids
    assert second.prompt_token_ids is not None
    assert second.prompt_token_ids[: len(first.prompt_token_ids) + len(first.generation_token_ids)] == (
        first.prompt_token_ids + first.generation_token_ids
    )
    # The gateway asked for them in vLLM's request fields.
    assert all(req["logprobs"] is True and req["return_token_ids"] is True for req in policy.requests())


@pytest.fixture
def reasoning_policy(tmp_path: Path) -> Iterator[Policy]:
    yield from _policy(tmp_path, "--reasoning")


def test_a_responses_policy_server_gives_its_tokens_and_reasoning_per_call(reasoning_policy: Policy) -> None:
    """The policy behind NeMo Gym's model server (OpenAI Responses, the tokens on each reply's last item),
    reached by mini-swe-agent, which speaks chat completions to the gateway: translated, and the policy's
    tokens and reasoning kept per call as from vLLM's chat server."""
    model = {**_model(reasoning_policy.url), "api": "openai-responses"}
    r = anyswe.rollout("demo__calc-1", dataset="demo-swebench", agent=MINI, model=model, provider="docker")
    assert r.resolved and not r.mask_sample and r.token_prefix_chain is True, r.error
    assert {req["path"] for req in reasoning_policy.requests()} == {"/v1/responses"}
    for step in r.trajectory:
        t = step.tokens
        assert t is not None and t.prompt_token_ids and t.generation_token_ids and t.generation_log_probs, step
        assert step.reply is not None and step.reply.reasoning == "First the failing test, then the smallest fix."
    # The same calls as ATIF (issue 34): each agent step with the policy's token ids, log-probs and reasoning.
    from atif import Trajectory

    from anyswe.results.atif import to_atif

    doc = Trajectory.model_validate(to_atif(r.trajectory, agent="mini-swe-agent", model="policy"))
    agent_steps = [s for s in doc.steps if s.source == "agent"]
    assert len(agent_steps) == len(r.trajectory)
    for atif_step, step in zip(agent_steps, r.trajectory, strict=True):
        assert step.tokens is not None and atif_step.metrics is not None and atif_step.reasoning_content
        assert atif_step.metrics.completion_token_ids == step.tokens.generation_token_ids
        assert atif_step.metrics.prompt_token_ids == step.tokens.prompt_token_ids
        assert atif_step.metrics.logprobs == step.tokens.generation_log_probs


def test_a_broken_prefix_chain_is_off_policy_and_masked_when_asked(compacting_policy: Policy) -> None:
    url = compacting_policy.url
    kept = anyswe.rollout("demo__calc-1", dataset="demo-swebench", agent=MINI, model=_model(url), provider="docker")
    assert kept.token_prefix_chain is False and kept.resolved and not kept.mask_sample  # a fact, not a mask
    masked = anyswe.rollout(
        "demo__calc-1", dataset="demo-swebench", agent=MINI, model=_model(url, mask_off_policy=True), provider="docker"
    )
    assert masked.token_prefix_chain is False and masked.resolved
    assert (masked.mask_sample, masked.mask_reason) == (True, "off_policy")


def test_serve_routes_the_rollout_prefix_and_returns_token_ids_in_gyms_names(
    policy: Policy, gym_python: Path, tmp_path: Path
) -> None:
    config = tmp_path / "serve.yaml"
    config.write_text(
        json.dumps(
            {
                "agent": MINI,
                "model": {"api": "openai-chat", "base_url": policy.url, "token_ids": True},
                "provider": "apptainer",
                "dataset": "demo-swebench",
            }
        )
    )
    server, url = started(serve_argv(config))
    try:
        (row,) = gym_rows(gym_python, ["demo__calc-1"])
        row["_ng_rollout_id"] = "rid-42"

        async def post() -> dict[str, Any]:
            import aiohttp

            async with aiohttp.ClientSession() as s, s.post(url + "/run", json=row, headers=AUTH) as resp:
                assert resp.status == 200, await resp.text()
                return dict(await resp.json())

        resp = asyncio.run(post())
    finally:
        server.terminate()
        server.wait(timeout=120)
    assert resp["reward"] == 1.0 and resp["mask_sample"] is False and resp["token_prefix_chain"] is True
    paths = {req["path"] for req in policy.requests()}
    assert paths == {"/ng-rollout/rid-42/v1/chat/completions"}, paths
    # Each call's last output item carries its tokens (here: the function call of each reply).
    carriers = [i for i in resp["response"]["output"] if "prompt_token_ids" in i]
    assert len(carriers) == 2 and all(i["type"] == "function_call" for i in carriers), carriers
    for item in carriers:
        assert item["generation_token_ids"] and len(item["generation_log_probs"]) == len(item["generation_token_ids"])
    (parsed,) = validate(gym_python, [resp], tmp_path)
    assert parsed["reward"] == 1.0
