"""``anyswe serve``: rollouts over HTTP, a drop-in for NeMo Gym's ``anyswe_agent`` server.

``POST /run`` takes Gym's run request (``responses_create_params`` with the task in its
``metadata``: ``instance_id``, ``dataset_name``, ``instance_dict``, ... and ``_ng_rollout_id``) and
answers with the fields and names of nemo-gym 0.7.0's ``AnySweVerifyResponse``: ``reward``,
``resolved``, ``patch_exists``, ``model_patch``, ``agent_timed_out``, ``agent_error_kind``,
``eval_timed_out``, ``error_kind`` (Gym's names: ``sandbox``, ``eval_timeout``), ``agent_run_time``,
``failure_kind`` / ``failure_reason`` (nemo_gym.failure_kinds' vocabulary), the ``response`` with the
trajectory's output items, and ``mask_sample`` both at the top level and in ``instance_config``
(NeMo-RL reads the one, Gym's finalizer the other). Reward and mask are execute/decide.py's, as in
every run; anyswe's own facts (its error kind, the mask's reason, the key) come beside Gym's fields.
Repeated requests for one instance are samples of their own.

The policy model is reached as Gym's server reaches it: the model server's root URL with the
rollout's prefix (``/ng-rollout/<id>``) and ``/v1``, the request's model name and its sampling
parameters (temperature, top_p, max_output_tokens). An ``anyswe`` object in the request may name
the agent, provider, model and timeouts of that rollout; otherwise the server's own apply.

Rollouts run in this process or, with ``executor: ray``, as tasks on a Ray cluster (the server is then
one process for many nodes, whose units reach its gateway through relays of their own); ``run_dir``
records every rollout as ``anyswe apply`` records a run. A request's own fault is a 400 naming it; the
server's (a runtime or cluster that does not answer) a 503; a bug a 500, each as JSON.

Rollouts beyond ``concurrency`` wait in a queue of at most ``queue`` (then 503). A client that
disconnects cancels its rollout, whose sandboxes are removed; SIGTERM or SIGINT stops the server,
cancels what runs and removes every sandbox the server started. ``GET /health`` says how many run
and wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from anyswe.errors import AnysweError
from anyswe.gym import gym_response

if TYPE_CHECKING:
    from aiohttp import web

    from anyswe.execute.rollout import Rollouts

#: Gym's rollout path prefix (nemo_gym.config_types.ROLLOUT_PATH_PREFIX).
ROLLOUT_PREFIX = "ng-rollout"


class ServeConfig(BaseModel):
    """What the server runs when a request does not say: ``anyswe serve``'s options."""

    model_config = ConfigDict(extra="forbid")

    agent: dict[str, Any] = Field(default_factory=lambda: {"type": "mini-swe-agent"})
    provider: dict[str, Any] | str = "docker"
    #: The model block; its ``base_url`` is the policy model server's root (the rollout prefix and
    #: /v1 are added per request). ``api: scripted`` serves the oracle (tests, no model).
    model: dict[str, Any] = Field(default_factory=lambda: {"api": "openai-chat"})
    #: The dataset a row's ``dataset_name`` falls back to (its harness and images).
    dataset: str | None = None
    timeouts: dict[str, float] = Field(default_factory=dict)
    concurrency: int = Field(default=4, ge=1)
    queue: int = Field(default=1024, ge=0)
    #: Where rollouts run: in this process (``local``), or as tasks on the Ray cluster at ``address``
    #: (its nodes advertise provider types; they reach this server's gateway at ``gateway_host``).
    executor: Literal["local", "ray"] = "local"
    address: str | None = None
    gateway_host: str | None = None
    #: Record every rollout here as ``anyswe apply`` records a run (``anyswe results`` reads it).
    run_dir: Path | None = None


class _Busy(Exception):
    pass


def _needs_model(agent: Any) -> bool:
    """Whether the agent block's type asks for a model (an unknown type is refused later, by name)."""
    from anyswe.agents import agent_class

    try:
        return bool(agent_class(agent["type"]).needs_model)
    except Exception:
        return True


#: Errors that are the request's own (a malformed row, an unknown dataset or agent): a 400, nothing ran.
def _the_requests_fault(exc: BaseException) -> bool:
    from anyswe.errors import DatasetError, PlanError, SpecError

    return isinstance(exc, SpecError | DatasetError | PlanError | ValidationError)


class Server:
    """The rollout server: one :class:`~anyswe.execute.rollout.Rollouts` session for all requests."""

    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        self.session: Rollouts | None = None
        self.running = 0
        self.waiting = 0
        self.served = 0
        self._slots = asyncio.Semaphore(config.concurrency)

    # -- requests ---------------------------------------------------------------------------------

    def blocks(self, body: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
        """The instance and the rollout's blocks from a Gym run request (a SpecError if malformed)."""
        from anyswe.errors import SpecError

        params = body.get("responses_create_params")
        if not isinstance(params, Mapping):
            raise SpecError("the run request has no `responses_create_params` object")
        meta = params.get("metadata") or {}
        if not isinstance(meta, Mapping) or not meta.get("instance_id"):
            raise SpecError("responses_create_params.metadata.instance_id is missing")
        own = body.get("anyswe") or {}
        if not isinstance(own, Mapping):
            raise SpecError("`anyswe` in the run request must be an object")
        row = meta.get("instance_dict")
        if isinstance(row, str):
            try:
                row = json.loads(row)
            except json.JSONDecodeError as exc:
                raise SpecError(f"responses_create_params.metadata.instance_dict is not JSON: {exc}") from None
        instance = row if isinstance(row, Mapping) else str(meta["instance_id"])
        dataset = own.get("dataset") or meta.get("dataset_name") or self.config.dataset
        agent = own.get("agent") or self.config.agent
        model: dict[str, Any] | None = None  # gold, replay: the server's model is not theirs
        if _needs_model(agent):
            model = dict(own.get("model") or self.config.model)
            if model.get("api") != "scripted":
                model = self._policy_model(model, params, body.get("_ng_rollout_id"))
        return instance, {
            "agent": agent,
            "provider": own.get("provider") or self.config.provider,
            "model": model,
            "dataset": dataset,
            "timeouts": own.get("timeouts") or self.config.timeouts,
        }

    @staticmethod
    def _policy_model(model: dict[str, Any], params: Mapping[str, Any], rollout_id: Any) -> dict[str, Any]:
        """Gym's routing: the model server's root with the rollout prefix, the request's model and sampling."""
        root = str(model.get("base_url") or "").rstrip("/")
        if root and rollout_id:
            root += f"/{ROLLOUT_PREFIX}/{rollout_id}"
        sampling = {k: params[k] for k in ("temperature", "top_p") if params.get(k) is not None}
        if params.get("max_output_tokens") is not None:
            sampling["max_tokens"] = params["max_output_tokens"]
        out = {**model, "params": {**model.get("params", {}), **sampling}}
        if root:
            out["base_url"] = root + "/v1"
        if params.get("model"):
            out["model"] = str(params["model"])
        return out

    async def run(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """One rollout for one run request; the Gym-shaped response."""
        assert self.session is not None
        instance, blocks = self.blocks(body)
        first = self.session.unit(instance, **blocks)  # bad input is refused before it waits
        unit = self.session.unit(instance, **blocks, sample=self.session.next_sample(first.instance.instance_id))
        if self.waiting >= self.config.queue and self._slots.locked():
            raise _Busy(f"{self.running} rollouts run and {self.waiting} wait (queue {self.config.queue})")
        started = time.monotonic()
        self.waiting += 1
        try:
            await self._slots.acquire()
        finally:
            self.waiting -= 1
        self.running += 1
        try:
            rollout = await self.session.run(unit)
        finally:
            self.running -= 1
            self._slots.release()
        self.served += 1
        return gym_response(body, rollout, queued_s=time.monotonic() - started)

    # -- HTTP -------------------------------------------------------------------------------------

    def app(self) -> web.Application:
        from aiohttp import web

        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/run", self._run)
        app.router.add_get("/health", self._health)
        return app

    async def _health(self, request: web.Request) -> web.Response:
        from aiohttp import web

        run_id = self.session.run_id if self.session is not None else None  # the label of its sandboxes
        counts = {"running": self.running, "waiting": self.waiting, "served": self.served}
        return web.json_response({"status": "ok", "run_id": run_id, **counts})

    async def _run(self, request: web.Request) -> web.Response:
        from aiohttp import web

        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return web.json_response({"error": f"the request body is not JSON: {exc}"}, status=400)
        if not isinstance(body, Mapping):
            return web.json_response({"error": "the request body must be a JSON object"}, status=400)
        try:
            return web.json_response(await self.run(body))
        except _Busy as exc:
            return web.json_response({"error": f"busy: {exc}"}, status=503)
        except (AnysweError, ValidationError) as exc:
            if _the_requests_fault(exc):  # named, nothing ran
                return web.json_response({"error": f"{type(exc).__name__}: {exc}"}, status=400)
            # The server's side (a runtime or a cluster that does not answer): the request may be sent again.
            return web.json_response({"error": f"{type(exc).__name__}: {exc}"}, status=503)
        except Exception as exc:  # a bug in anyswe: said as JSON, as every other answer
            return web.json_response({"error": f"internal error: {type(exc).__name__}: {exc}"}, status=500)

    async def serve(self, host: str, port: int, ready: asyncio.Event | None = None) -> None:
        """Serve until SIGTERM/SIGINT (or cancellation); then cancel what runs and remove every sandbox."""

        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        added = []
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, stop.set)
                added.append(sig)
        try:
            await self._serve(host, port, ready, stop)
        finally:
            # Given back: a loop that outlives the server (a notebook's, a test's) must not keep
            # swallowing Ctrl-C (asyncio restores the handlers only when the loop is closed).
            for sig in added:
                loop.remove_signal_handler(sig)

    async def _serve(self, host: str, port: int, ready: asyncio.Event | None, stop: asyncio.Event) -> None:
        from aiohttp import web

        from anyswe.execute.rollout import Rollouts

        cfg = self.config
        session = Rollouts(
            run_dir=cfg.run_dir, executor=cfg.executor, address=cfg.address, gateway_host=cfg.gateway_host
        )
        async with session:
            self.session = session
            # A client that disconnects cancels its handler, and so its rollout (aiohttp's default is
            # to let it run to the end, holding a sandbox nobody waits for).
            # On a stop, rollouts in flight are cancelled at once rather than waited for (aiohttp's
            # default waits 60 s for handlers): a rollout can take half an hour.
            runner = web.AppRunner(self.app(), access_log=None, handler_cancellation=True, shutdown_timeout=0.5)
            await runner.setup()
            try:
                site = web.TCPSite(runner, host, port)
                await site.start()
                self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
                print(f"anyswe serve: listening on http://{host}:{self.port}", flush=True)
                if ready is not None:
                    ready.set()
                await stop.wait()
            finally:
                # Cancels every handler still running (their rollouts tear their sandboxes down),
                # then the session's sweep removes whatever is left of this server's sandboxes.
                await runner.cleanup()
        print("anyswe serve: stopped; every sandbox removed", flush=True)


def serve(config: ServeConfig, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Run the server in this process until SIGTERM or SIGINT (the process is the server's: its heap is
    settled once it listens, _sync.settle_heap)."""
    from anyswe._sync import settle_heap

    ready = asyncio.Event()

    async def main() -> None:
        served = asyncio.ensure_future(Server(config).serve(host, port, ready))
        waiting = asyncio.ensure_future(ready.wait())
        await asyncio.wait([served, waiting], return_when=asyncio.FIRST_COMPLETED)
        if ready.is_set():
            settle_heap()
        waiting.cancel()
        await served

    asyncio.run(main())
