"""A scripted policy server: OpenAI chat completions as vLLM's OpenAI server answers them for RL, with
token ids and log-probs in vLLM's fields, and OpenAI Responses as NeMo Gym's model server answers them,
for tests of token capture (issue 23).

A fake, since no policy model runs here; it speaks the real protocol. Its replies are anyswe's
scripted oracle for one patch (``--patch FILE``: apply it, then submit). Its "tokenizer" is the
UTF-8 bytes of a canonical rendering of the messages, so a prompt's ids start with the previous
prompt's ids and generation exactly when the agent sends its history back unchanged (the prefix
chain a training server checks). vLLM's fields as its OpenAI server returns them with
``return_token_ids`` and ``logprobs`` + ``return_tokens_as_token_ids``: ``prompt_token_ids`` at the
top, ``token_ids`` in the choice, ``logprobs.content[].token`` as ``token_id:N``.

It also speaks OpenAI Responses (``/v1/responses``) as NeMo Gym's model server answers a training
run: the output items of a reply, the policy's ``prompt_token_ids``, ``generation_token_ids`` and
``generation_log_probs`` on the last of them (Gym's ``*ForTraining`` items). ``--reasoning``: each reply
reasons first (``reasoning_content`` in a chat message, as vLLM's reasoning parsers return it; a
``reasoning`` item in Responses).

``--break-chain``: from each rollout's second call on, the prompt is rendered without the first message, as a
compacting agent or a server-side truncation would: the chain breaks. Every request's path is
appended to ``--log`` (to see the rollout prefix a caller routed through).

Run: ``python tests/e2e/policy_server.py --patch FILE --submit CMD [--log FILE] [--break-chain]``;
it prints ``listening on http://127.0.0.1:PORT`` once ready.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

from aiohttp import web

from anyswe.gateway import ScriptedModel
from anyswe.gateway.wire import Message, Reply, read_request


def render(message: Message) -> str:
    calls = "".join(f"<call>{c.name}{json.dumps(c.arguments, sort_keys=True)}" for c in message.tool_calls)
    return f"<|{message.role}|>{message.text}{calls}<|end|>"


def tokens(text: str) -> list[int]:
    return list(text.encode())


REASONING = "First the failing test, then the smallest fix."


class Policy:
    def __init__(self, model: ScriptedModel, log: Path | None, break_chain: bool, reasoning: bool) -> None:
        self.model, self.log, self.break_chain, self.reasoning = model, log, break_chain, reasoning
        self.calls = 0

    async def _answer(self, request: web.Request, protocol: str) -> tuple[dict[str, Any], Reply, list[int], list[int]]:
        """The request, the oracle's reply, and the prompt's and the generation's token ids."""
        body = await request.json()
        if self.log is not None:
            with self.log.open("a") as fh:
                wanted = {k: body.get(k) for k in ("logprobs", "return_token_ids", "return_tokens_as_token_ids")}
                fh.write(json.dumps({"path": request.path, **wanted}) + "\n")
        conv = read_request(protocol, body)  # type: ignore[arg-type]
        self.calls += 1
        reply = self.model.reply(conv)
        if not isinstance(reply, Reply):
            reply = await reply
        later = any(m.role == "assistant" for m in conv.messages)  # not the rollout's first call
        shown = conv.messages[1:] if self.break_chain and later else conv.messages
        prompt = tokens("".join(render(m) for m in shown))
        generated = tokens(render(Message(role="assistant", text=reply.text, tool_calls=reply.tool_calls)))
        return body, reply, prompt, generated

    async def responses(self, request: web.Request) -> web.Response:
        body, reply, prompt, generated = await self._answer(request, "openai-responses")
        items: list[dict[str, Any]] = []
        if self.reasoning:
            items.append({"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": REASONING}]})
        if reply.text:
            text = [{"type": "output_text", "text": reply.text, "annotations": []}]
            items.append(
                {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed", "content": text}
            )
        for c in reply.tool_calls:
            call = {"type": "function_call", "id": f"fc_{c.id}", "call_id": c.id, "name": c.name}
            items.append({**call, "arguments": json.dumps(c.arguments), "status": "completed"})
        logprobs = [-0.01 * (i % 7) for i in range(len(generated))]
        items[-1].update(prompt_token_ids=prompt, generation_token_ids=generated, generation_log_probs=logprobs)
        answer = {
            "id": f"resp_{self.calls}",
            "object": "response",
            "created_at": int(time.time()),
            "model": body.get("model", "policy"),
            "status": "completed",
            "output": items,
            "usage": {
                "input_tokens": len(prompt),
                "output_tokens": len(generated),
                "total_tokens": len(prompt) + len(generated),
            },
        }
        return web.json_response(answer)

    async def chat(self, request: web.Request) -> web.Response:
        body, reply, prompt, generated = await self._answer(request, "openai-chat")
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
        if self.reasoning:
            message["reasoning_content"] = REASONING
        if reply.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
                for c in reply.tool_calls
            ]
        choice: dict[str, Any] = {
            "index": 0,
            "message": message,
            "finish_reason": "tool_calls" if reply.tool_calls else "stop",
        }
        if body.get("return_token_ids"):
            choice["token_ids"] = generated
        if body.get("logprobs"):
            as_ids = body.get("return_tokens_as_token_ids")
            content = [
                {
                    "token": f"token_id:{t}" if as_ids else chr(t),
                    "logprob": -0.01 * (i % 7),
                    "bytes": None,
                    "top_logprobs": [],
                }
                for i, t in enumerate(generated)
            ]
            choice["logprobs"] = {"content": content}
        answer: dict[str, Any] = {
            "id": f"chatcmpl-{self.calls}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "policy"),
            "choices": [choice],
            "usage": {
                "prompt_tokens": len(prompt),
                "completion_tokens": len(generated),
                "total_tokens": len(prompt) + len(generated),
            },
        }
        if body.get("return_token_ids"):
            answer["prompt_token_ids"] = prompt
        return web.json_response(answer)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--patch", type=Path, required=True)
    parser.add_argument("--submit", required=True)
    parser.add_argument("--workdir", default="/testbed")
    parser.add_argument("--log", type=Path)
    parser.add_argument("--break-chain", action="store_true")
    parser.add_argument("--reasoning", action="store_true")
    args = parser.parse_args()
    model = ScriptedModel.oracle(args.patch.read_text(), args.workdir, submit=args.submit)
    policy = Policy(model, args.log, args.break_chain, args.reasoning)
    app = web.Application(client_max_size=64 * 1024 * 1024)
    # At the root, and under any prefix (Gym's /ng-rollout/<id>): the path is logged either way.
    app.router.add_post("/v1/chat/completions", policy.chat)
    app.router.add_post("/{prefix:.+}/v1/chat/completions", policy.chat)
    app.router.add_post("/v1/responses", policy.responses)
    app.router.add_post("/{prefix:.+}/v1/responses", policy.responses)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    print(f"listening on http://127.0.0.1:{port}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main())
