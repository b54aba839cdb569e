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
import secrets
import signal
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from anyswe.errors import AnysweError, RequestError, SpecError
from anyswe.gym import gym_response
from anyswe.serve_request import (
    MAX_DEPTH,
    Requests,
    ServeConfig,
    json_depth,
    read_token,
    token_path,
    write_token,
)

__all__ = ["RequestError", "ServeConfig", "Server", "serve"]

if TYPE_CHECKING:
    from aiohttp import web

    from anyswe.execute.rollout import Rollouts


class _Busy(Exception):
    pass


#: Errors that are the request's own (a malformed row, an unknown dataset or agent): a 400, nothing ran.
def _the_requests_fault(exc: BaseException) -> bool:
    from anyswe.errors import DatasetError, PlanError, SpecError

    return isinstance(exc, RequestError | SpecError | DatasetError | PlanError | ValidationError)


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
        self._requests = Requests(config)

    # -- requests ---------------------------------------------------------------------------------

    def blocks(self, body: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
        """The instance and the rollout's blocks from a Gym run request (a RequestError if malformed)."""
        return self._requests.blocks(body)

    async def run(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """One rollout for one run request; the Gym-shaped response."""
        assert self.session is not None
        instance, blocks = self.blocks(body)
        unit = self.session.unit(instance, **blocks, sample="next")  # bad input is refused before it waits
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
        return gym_response(body, rollout, queued_s=time.monotonic() - started, private=self._requests.private())

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
        """Whether the request carries the server's bearer token (compared in constant time); every
        request is, under the config's ``auth: none`` (a Gym deployment's trust domain)."""
        if self.config.auth == "none":
            return True
        if self.token is None:  # not yet made: nothing is let in before it is
            return False
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        # aiohttp decodes header bytes with surrogateescape: encoded back the same way, any bytes compare.
        given_bytes = given.strip().encode(errors="surrogateescape")
        return scheme.lower() == "bearer" and hmac.compare_digest(given_bytes, self.token.encode())

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
        if json_depth(body) > MAX_DEPTH:
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
                if cfg.auth == "none":
                    print(
                        f"anyswe serve: warning: auth: none: /run answers any client that reaches {host}:{self.port}, "
                        "without a token (the config's choice, for servers in one trust domain)",
                        file=sys.stderr,
                        flush=True,
                    )
                elif self.token is None:  # made here, kept beside the run's state, said where (never itself)
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


def check_auth(config: ServeConfig, host: str, token_file: Path | None) -> None:
    """Refuse ``auth: none`` on an address other than loopback unless the config also allows it, and a
    token file that ``auth: none`` would ignore (a SpecError naming the field)."""
    import ipaddress

    if config.auth != "none":
        return
    if token_file is not None:
        raise SpecError("auth: none takes no --token-file: no request is asked for a token")
    try:
        loopback = ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback and not config.auth_none_off_loopback:
        raise SpecError(
            f"auth: none on {host}: any client that reaches this address could run rollouts; listen on "
            "127.0.0.1, or say auth_none_off_loopback: true in the config as well"
        )


def serve(config: ServeConfig, host: str = "127.0.0.1", port: int = 8000, token_file: Path | None = None) -> None:
    """Run the server in this process until SIGTERM or SIGINT (the process is the server's: its heap is
    settled once it listens, _sync.settle_heap). ``/run`` needs the token in ``token_file``; without
    one the server makes a token and writes it to :func:`token_path`."""
    from anyswe._sync import settle_heap

    check_auth(config, host, token_file)
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
