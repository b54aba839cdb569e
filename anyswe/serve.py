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
parameters (temperature, top_p, max_output_tokens). An ``anyswe`` object in the request may name one
of the agents, models and providers the server's config declares, and one of its datasets; nothing
else (no type, URL, key variable, network, limit, image or timeout: those are the config's).
``/run`` needs ``Authorization: Bearer <token>`` (the server's token file); ``/health`` says nothing secret.

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
import hmac
import json
import os
import re
import secrets
import signal
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from anyswe.errors import AnysweError
from anyswe.gym import gym_response

if TYPE_CHECKING:
    from aiohttp import web

    from anyswe.execute.rollout import Rollouts

#: Gym's rollout path prefix (nemo_gym.config_types.ROLLOUT_PATH_PREFIX).
ROLLOUT_PREFIX = "ng-rollout"
#: A rollout id Gym accepts (nemo_gym's rollout id pattern): it becomes a path segment of the model URL.
ROLLOUT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class ServeConfig(BaseModel):
    """What the server may run: ``anyswe serve``'s options.

    A request chooses only among what is declared here, by name: the default ``agent``, ``model`` and
    ``provider`` blocks (name ``default``) and the named ones in ``agents``, ``models`` and
    ``providers``; a dataset of ``dataset``/``datasets``. Types, environment variable names, URLs,
    scripts, networks, limits, images and timeouts come from this file or the command line only: a
    request that could give them could read the server's secrets or run on its host.
    """

    model_config = ConfigDict(extra="forbid")

    agent: dict[str, Any] = Field(default_factory=lambda: {"type": "mini-swe-agent"})
    agents: dict[str, dict[str, Any]] = Field(default_factory=dict)
    provider: dict[str, Any] | str = "docker"
    providers: dict[str, dict[str, Any] | str] = Field(default_factory=dict)
    #: The model block; its ``base_url`` is the policy model server's root (the rollout prefix and
    #: /v1 are added per request). ``api: scripted`` serves the oracle (tests, no model).
    model: dict[str, Any] = Field(default_factory=lambda: {"api": "openai-chat"})
    models: dict[str, dict[str, Any]] = Field(default_factory=dict)
    #: The dataset a row without ``dataset_name`` is of (its harness and images); ``datasets`` are
    #: the others a row may name. A row naming any other is refused.
    dataset: str | None = None
    datasets: list[str] = Field(default_factory=list)
    timeouts: dict[str, float] = Field(default_factory=dict)
    concurrency: int = Field(default=4, ge=1)
    queue: int = Field(default=1024, ge=0)
    #: Seconds a connection may take to send a request's headers (and may stay idle between
    #: requests), and to send its body: slow clients cannot hold connections open.
    header_timeout: float = Field(default=30.0, gt=0)
    body_timeout: float = Field(default=120.0, gt=0)
    #: Where rollouts run: in this process (``local``), or as tasks on the Ray cluster at ``address``
    #: (its nodes advertise provider types; they reach this server's gateway at ``gateway_host``).
    executor: Literal["local", "ray"] = "local"
    address: str | None = None
    gateway_host: str | None = None
    #: Record every rollout here as ``anyswe apply`` records a run (``anyswe results`` reads it).
    run_dir: Path | None = None

    @field_validator("agents", "models", "providers")
    @classmethod
    def _not_default(cls, value: dict[str, Any]) -> dict[str, Any]:
        if DEFAULT in value:
            raise ValueError(f"{DEFAULT!r} names the singular block (agent, model, provider); choose another name")
        return value

    def choices(self, kind: str) -> dict[str, dict[str, Any] | str]:
        """The blocks a request may name for ``kind`` (agent, model, provider), ``default`` first."""
        singular: dict[str, Any] | str
        plural: dict[str, dict[str, Any]] | dict[str, dict[str, Any] | str]
        if kind == "agent":
            singular, plural = self.agent, self.agents
        elif kind == "model":
            singular, plural = self.model, self.models
        else:
            singular, plural = self.provider, self.providers
        return {DEFAULT: singular, **plural}

    def allowed_datasets(self) -> dict[str, str]:
        """Canonical name -> the name as declared, of every dataset a request may name."""
        from anyswe.datasets.registry import route

        declared = [d for d in (self.dataset, *self.datasets) if d]
        return {route(d).name: d for d in declared}


#: The name of the singular agent, model and provider blocks of a config.
DEFAULT = "default"
#: What an ``anyswe`` object in a request may hold: names of declared blocks, nothing else.
REQUEST_KEYS = ("agent", "model", "provider", "dataset")
#: Gym's per-sample fields of ``responses_create_params`` that reach the model (as sampling).
SAMPLING = ("model", "temperature", "top_p", "max_output_tokens")
#: How deep a request's JSON may nest (deeper: a 400; Python's own parsers recurse).
MAX_DEPTH = 64


class _Busy(Exception):
    pass


class RequestError(AnysweError):
    """A request's own fault (a 400): the message names the field, and echoes only what the request sent."""


def _needs_model(agent: Mapping[str, Any]) -> bool:
    """Whether the agent block's type asks for a model (an unknown type is refused later, by name)."""
    from anyswe.agents import agent_class

    try:
        return bool(agent_class(agent["type"]).needs_model)
    except Exception:
        return True


#: Errors that are the request's own (a malformed row, an unknown dataset or agent): a 400, nothing ran.
def _the_requests_fault(exc: BaseException) -> bool:
    from anyswe.errors import DatasetError, PlanError, SpecError

    return isinstance(exc, RequestError | SpecError | DatasetError | PlanError | ValidationError)


def _shown(value: Any) -> str:
    """A value the request sent, short, for an error message."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _depth(value: Any) -> int:
    """How deeply ``value`` (decoded JSON) nests, without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            deepest = max(deepest, level)
            if level > MAX_DEPTH:
                return level
            stack.extend((child, level + 1) for child in item if isinstance(child, dict | list))
    return deepest


class Server:
    """The rollout server: one :class:`~anyswe.execute.rollout.Rollouts` session for all requests."""

    def __init__(self, config: ServeConfig, token: str | None = None) -> None:
        self.config = config
        #: The bearer token ``/run`` requires (None: none, for in-process use without HTTP).
        self.token = token
        self.session: Rollouts | None = None
        self.running = 0
        self.waiting = 0
        self.served = 0
        self._slots = asyncio.Semaphore(config.concurrency)

    # -- requests ---------------------------------------------------------------------------------

    def _named(self, own: Mapping[str, Any], kind: str) -> Any:
        """The declared block the request's ``anyswe.<kind>`` names (the default when it names none)."""
        choices = self.config.choices(kind)
        name = own.get(kind, DEFAULT)
        if name is None:
            name = DEFAULT
        if not isinstance(name, str):
            raise RequestError(
                f"anyswe.{kind}: name one of the server's {kind}s ({', '.join(choices)}); a request cannot give a block"
            )
        if name not in choices:
            raise RequestError(
                f"anyswe.{kind}: {_shown(name)} is not one of the server's {kind}s: {', '.join(choices)}"
            )
        block = choices[name]
        return dict(block) if isinstance(block, Mapping) else block

    def _dataset(self, own: Mapping[str, Any], meta: Mapping[str, Any]) -> str | None:
        """The dataset of the row: one the config declares (its harness and images), never any other."""
        from anyswe.datasets.registry import route
        from anyswe.errors import DatasetError

        allowed = self.config.allowed_datasets()
        asked = own.get("dataset") or meta.get("dataset_name")
        field = "anyswe.dataset" if own.get("dataset") else "responses_create_params.metadata.dataset_name"
        if asked is None:
            return self.config.dataset
        if not isinstance(asked, str):
            raise RequestError(f"{field} must be a dataset name")
        try:
            canonical = route(asked).name
        except DatasetError:
            canonical = None
        if canonical not in allowed:
            listing = ", ".join(allowed.values()) or "none (set `dataset:` in the server's config)"
            raise RequestError(f"{field}: {_shown(asked)} is not a dataset this server serves: {listing}")
        return allowed[canonical]

    def blocks(self, body: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
        """The instance and the rollout's blocks from a Gym run request (a RequestError if malformed)."""
        params = body.get("responses_create_params")
        if not isinstance(params, Mapping):
            raise RequestError("the run request has no `responses_create_params` object")
        meta = params.get("metadata") or {}
        if not isinstance(meta, Mapping) or not meta.get("instance_id"):
            raise RequestError("responses_create_params.metadata.instance_id is missing")
        own = body.get("anyswe") or {}
        if not isinstance(own, Mapping):
            raise RequestError("`anyswe` in the run request must be an object")
        for key in own:
            if key not in REQUEST_KEYS:
                raise RequestError(
                    f"anyswe.{str(key)[:40]}: a request may name only the server's "
                    f"{', '.join(REQUEST_KEYS)}; everything else is the server's config"
                )
        row = meta.get("instance_dict")
        if isinstance(row, str):
            try:
                row = json.loads(row)
            except (json.JSONDecodeError, RecursionError) as exc:
                raise RequestError(f"responses_create_params.metadata.instance_dict is not JSON: {exc}") from None
            if _depth(row) > MAX_DEPTH:
                raise RequestError(f"responses_create_params.metadata.instance_dict nests deeper than {MAX_DEPTH}")
        instance = row if isinstance(row, Mapping) else str(meta["instance_id"])
        agent = self._named(own, "agent")
        model: dict[str, Any] | None = self._named(own, "model")  # checked even where unused: never ignored
        if not _needs_model(agent):
            model = None  # gold, replay: the server's model is not theirs
        elif model is not None and model.get("api") != "scripted":
            model = self._policy_model(model, params, body.get("_ng_rollout_id"))
        return instance, {
            "agent": agent,
            "provider": self._named(own, "provider"),
            "model": model,
            "dataset": self._dataset(own, meta),
            "timeouts": self.config.timeouts,
        }

    @staticmethod
    def _policy_model(model: dict[str, Any], params: Mapping[str, Any], rollout_id: Any) -> dict[str, Any]:
        """Gym's routing: the model server's root with the rollout prefix, the request's model and sampling."""
        root = str(model.get("base_url") or "").rstrip("/")
        # A root given with its /v1 (the way OpenAI clients are configured) gets no second one.
        root = root.removesuffix("/v1")
        if root and rollout_id is not None:
            if not isinstance(rollout_id, str | int) or not ROLLOUT_ID.fullmatch(str(rollout_id)):
                raise RequestError("_ng_rollout_id must be letters, digits, '.', '_' and '-' (Gym's own rule)")
            root += f"/{ROLLOUT_PREFIX}/{rollout_id}"
        sampling: dict[str, Any] = {}
        for k in ("temperature", "top_p", "max_output_tokens"):
            v = params.get(k)
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, int | float):
                raise RequestError(f"responses_create_params.{k} must be a number")
            sampling["max_tokens" if k == "max_output_tokens" else k] = v
        out = {**model, "params": {**model.get("params", {}), **sampling}}
        if root:
            out["base_url"] = root + "/v1"
        if params.get("model"):
            if not isinstance(params["model"], str):
                raise RequestError("responses_create_params.model must be a string")
            out["model"] = params["model"]
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

    def _authorized(self, request: web.Request) -> bool:
        """Whether the request carries the server's bearer token (compared in constant time)."""
        if self.token is None:  # not yet made: nothing is let in before it is
            return False
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), self.token.encode())

    async def _body(self, request: web.Request) -> Any:
        """The request's JSON body, read within ``body_timeout`` and nested at most MAX_DEPTH deep."""
        import orjson

        try:
            async with asyncio.timeout(self.config.body_timeout):
                raw = await request.read()
        except TimeoutError:
            raise RequestError(f"the request body did not arrive within {self.config.body_timeout:g} s") from None
        try:
            # orjson refuses past 1,024 levels instead of recursing; MAX_DEPTH is checked after.
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            if "depth limit" in str(exc):  # orjson's own bound, past ours: the same answer
                raise RequestError(f"the request body nests deeper than {MAX_DEPTH} levels") from None
            raise RequestError(f"the request body is not JSON: {exc}") from None
        if _depth(body) > MAX_DEPTH:
            raise RequestError(f"the request body nests deeper than {MAX_DEPTH} levels")
        if not isinstance(body, Mapping):
            raise RequestError("the request body must be a JSON object")
        return body

    async def _run(self, request: web.Request) -> web.Response:
        from aiohttp import web

        if not self._authorized(request):  # before the body is read: nothing of it is looked at
            return web.json_response(
                {"error": "unauthorized: send `Authorization: Bearer <token>` (the server's token file)"},
                status=401,
                headers={"WWW-Authenticate": "Bearer"},
            )
        try:
            return web.json_response(await self.run(await self._body(request)))
        except _Busy as exc:
            return web.json_response({"error": f"busy: {exc}"}, status=503)
        except (AnysweError, ValidationError) as exc:
            if _the_requests_fault(exc):  # named, nothing ran
                return web.json_response({"error": f"{type(exc).__name__}: {exc}"}, status=400)
            # The server's side (a runtime or a cluster that does not answer): the request may be sent again.
            return web.json_response({"error": f"{type(exc).__name__}: {exc}"}, status=503)
        except Exception as exc:  # a bug in anyswe: said as JSON, as every other answer; the detail stays here
            import traceback

            traceback.print_exc(file=sys.stderr)
            return web.json_response(
                {"error": f"internal error: {type(exc).__name__} (see the server's log)"}, status=500
            )

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
        made_token: Path | None = None
        async with session:
            self.session = session
            # A client that disconnects cancels its handler, and so its rollout (aiohttp's default is
            # to let it run to the end, holding a sandbox nobody waits for).
            # On a stop, rollouts in flight are cancelled at once rather than waited for (aiohttp's
            # default waits 60 s for handlers): a rollout can take half an hour.
            # keepalive_timeout is aiohttp's one clock on a connection with no whole request yet: from
            # the connection's start (or the last answer) to its next request's last header line. Its
            # default (an hour) let 200 slow-header connections sit open.
            runner = web.AppRunner(
                self.app(),
                access_log=None,
                handler_cancellation=True,
                shutdown_timeout=0.5,
                keepalive_timeout=cfg.header_timeout,
            )
            await runner.setup()
            try:
                site = web.TCPSite(runner, host, port)
                await site.start()
                self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
                print(f"anyswe serve: listening on http://{host}:{self.port}", flush=True)
                if self.token is None:  # made here, kept beside the run's state, said where (never itself)
                    self.token = secrets.token_urlsafe(32)
                    made_token = token_path(cfg.run_dir, session.run_id)
                    write_token(made_token, self.token)
                    print(f"anyswe serve: token in {made_token} (send Authorization: Bearer <token>)", flush=True)
                if ready is not None:
                    ready.set()
                await stop.wait()
            finally:
                # Cancels every handler still running (their rollouts tear their sandboxes down),
                # then the session's sweep removes whatever is left of this server's sandboxes.
                await runner.cleanup()
                if made_token is not None:
                    made_token.unlink(missing_ok=True)
        print("anyswe serve: stopped; every sandbox removed", flush=True)


def token_path(run_dir: Path | None, run_id: str) -> Path:
    """Where a server that was given no token file writes the one it makes: beside its run state."""
    from anyswe.config import cache_dir

    return (run_dir if run_dir is not None else cache_dir() / "serve") / f"serve-{run_id}.token"


def write_token(path: Path, token: str) -> None:
    """``token`` into ``path``, readable by its owner only from the moment it exists."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(token + "\n")


def read_token(path: Path) -> str:
    """The token in ``path`` (its first line); a SpecError naming the file if there is none."""
    from anyswe.errors import SpecError

    try:
        token = path.read_text().strip()
    except OSError as exc:
        raise SpecError(f"--token-file {path}: {exc.strerror or exc}") from None
    if len(token) < 16:
        raise SpecError(f"--token-file {path}: a token of at least 16 characters is needed")
    if path.stat().st_mode & 0o077:
        print(f"anyswe serve: warning: {path} is readable by other users", file=sys.stderr, flush=True)
    return token


def serve(config: ServeConfig, host: str = "127.0.0.1", port: int = 8000, token_file: Path | None = None) -> None:
    """Run the server in this process until SIGTERM or SIGINT (the process is the server's: its heap is
    settled once it listens, _sync.settle_heap). ``/run`` needs the token in ``token_file``; without
    one the server makes a token and writes it to :func:`token_path`."""
    from anyswe._sync import settle_heap

    token = read_token(token_file) if token_file is not None else None
    ready = asyncio.Event()

    async def main() -> None:
        served = asyncio.ensure_future(Server(config, token).serve(host, port, ready))
        waiting = asyncio.ensure_future(ready.wait())
        await asyncio.wait([served, waiting], return_when=asyncio.FIRST_COMPLETED)
        if ready.is_set():
            settle_heap()
        waiting.cancel()
        await served

    asyncio.run(main())
