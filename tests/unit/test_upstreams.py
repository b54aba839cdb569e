"""Model upstreams are one registry: the grant asks the model block's upstream (derived as before when
unset, so every earlier run's task keys stay), and a plugin's upstream answers a real gateway call."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import ClassVar

import pytest
from pydantic import ValidationError

from anyswe.execute.models import grant
from anyswe.execute.unit import make_unit
from anyswe.execute.upstreams import UPSTREAMS, UpstreamSource
from anyswe.gateway import Gateway
from anyswe.gateway.wire import Conversation, Reply
from anyswe.model import ModelSpec
from anyswe.plan import make_plan
from anyswe.spec import load_spec


class Constant:
    async def reply(self, conv: Conversation) -> Reply:
        return Reply(text=f"{len(conv.messages)} message(s) seen")


class ConstantSource(UpstreamSource):
    name: ClassVar[str] = "constant"

    @classmethod
    def make(cls, unit, model):  # type: ignore[no-untyped-def]
        return Constant()


def test_the_upstream_is_derived_as_before_when_unset() -> None:
    assert ModelSpec(api="openai-chat", model="m").upstream_name == "http"
    assert ModelSpec(api="scripted").upstream_name == "scripted"
    replay = ModelSpec(api="scripted", replay={"run": "r"})
    assert replay.upstream_name == "replay" and "upstream" not in replay.key_payload()
    with pytest.raises(ValidationError, match="unknown model upstream 'nope'; known: http, scripted, replay"):
        ModelSpec(api="openai-chat", model="m", upstream="nope")


@pytest.mark.parametrize(
    ("block", "says"),
    [
        ("{api: scripted, upstream: replay}", "upstream replay: needs a replay block"),
        ("{api: scripted, upstream: http}", "api scripted is anyswe's own model"),
        ("{api: scripted, upstream: scripted, replay: {run: r}}", "served only by upstream replay"),
    ],
)
def test_an_upstream_without_what_it_serves_is_the_specs_error_at_its_line(
    tmp_path: Path, block: str, says: str
) -> None:
    """Before, these passed the spec and crashed every task at its grant (an assert, or a scripted 'http')."""
    from anyswe.errors import SpecError

    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "name: s\ndataset: {name: demo, limit: 1}\nagents:\n  m: {type: mini-swe-agent}\n"
        f"models:\n  c: {block}\nproviders:\n  d: {{type: docker}}\n"
    )
    with pytest.raises(SpecError, match=says) as caught:
        load_spec(spec)
    assert "spec.yaml:6" in str(caught.value)


def test_a_plugins_upstream_answers_through_the_gateway(tmp_path: Path) -> None:
    import openai

    UPSTREAMS.register("constant", ConstantSource)
    try:
        spec = tmp_path / "spec.yaml"
        spec.write_text(
            "name: s\ndataset: {name: demo, limit: 1}\nagents:\n  m: {type: mini-swe-agent}\n"
            "models:\n  c: {api: openai-chat, model: x, upstream: constant}\nproviders:\n  d: {type: docker}\n"
        )
        plan = make_plan(load_spec(spec))
        unit = make_unit(plan, plan.tasks[0], run_id="r", attempt=1)
        assert unit.model is not None and unit.model.key_payload()["upstream"] == "constant"

        async def call() -> str:
            async with Gateway(socket_dir=tmp_path / "sock") as gw:
                await gw.start()
                granted, token = await grant(gw, unit, tmp_path)
                assert granted.endpoint is not None and token is not None
                client = openai.AsyncOpenAI(base_url=gw.url() + "/v1", api_key=token, max_retries=0)
                try:
                    reply = await client.chat.completions.create(
                        model="x", messages=[{"role": "user", "content": "hi"}]
                    )
                finally:
                    await client.close()
                    gw.revoke(token)
                return str(reply.choices[0].message.content)

        assert asyncio.run(call()) == "1 message(s) seen"
    finally:
        UPSTREAMS._targets.pop("constant", None)
