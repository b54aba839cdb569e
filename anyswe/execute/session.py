"""The one owner of attempts: a :class:`Session` runs each as grant -> run -> settle -> record.

`anyswe apply` (local and on Ray), :class:`~anyswe.execute.rollout.Rollouts` and ``anyswe serve`` each
hold one Session: one runner; one model gateway, started here
alone (on the first unit with a model, or at once with :meth:`Session.start_gateway`), listening
where the runner's units reach it; one recording path into the run directory, when there is one. The
runner itself is chosen in execute/runner.py alone (``make_runner``).
What stays outside: the driver's concurrency, retries and progress (execute/local.py), samples and
groups (execute/rollout.py), HTTP (serve.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from anyswe._text import valid_text
from anyswe.errors import RuntimeNotAvailable
from anyswe.execute import models
from anyswe.execute.runner import Runner
from anyswe.execute.unit import TaskOutput, WorkUnit
from anyswe.gateway import Gateway
from anyswe.results.schema import Failure

if TYPE_CHECKING:
    from anyswe.results.store import RunStore

__all__ = ["Session", "serving_gateway"]


@contextlib.asynccontextmanager
async def serving_gateway(relay_host: str | None = None, port: int = 0) -> AsyncIterator[Gateway]:
    """A started model gateway, torn down on every path. ``relay_host``: units run elsewhere (on Ray) and
    reach it at this address of this machine (it listens there as well, on ``port`` if given)."""
    loopback = relay_host is None or models.is_loopback(relay_host)
    hosts = ("127.0.0.1",) if loopback else ("127.0.0.1", str(relay_host))
    with tempfile.TemporaryDirectory(prefix="anyswe-gw-") as tmp:
        async with Gateway(socket_dir=Path(tmp)) as gateway:
            try:
                await gateway.start(hosts, port=port)
            except OSError as exc:
                where = f"{' and '.join(hosts)}, port {port or 'any'}"
                raise RuntimeNotAvailable(
                    f"the model gateway cannot listen on {where} (executor.gateway_host/gateway_port): {exc}"
                ) from None
            if relay_host is not None:
                gateway.relay_host = "127.0.0.1" if loopback else relay_host
            yield gateway


class Session:
    """Attempts of one run (or one rollout session): ``async with Session(runner, run_id=...) as s``.

    ``store``: the run directory each attempt is recorded into (None: nothing is written but what a task
    dir given to :meth:`attempt` receives). Leaving it removes every sandbox of ``run_id``, closes the
    runner and stops the gateway.
    """

    def __init__(self, runner: Runner, *, run_id: str, store: RunStore | None = None, gateway_port: int = 0) -> None:
        self.runner, self.run_id, self.store, self.gateway_port = runner, run_id, store, gateway_port
        self._gateway: Gateway | None = None
        self._gateway_context: contextlib.AsyncExitStack | None = None
        self._starting = asyncio.Lock()
        self._recording = asyncio.Lock()

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.shield(self.close())

    async def start_gateway(self) -> Gateway:
        """The session's gateway, started on first use (a port that cannot be had is RuntimeNotAvailable)."""
        async with self._starting:
            if self._gateway is None:
                stack = contextlib.AsyncExitStack()
                self._gateway = await stack.enter_async_context(
                    serving_gateway(self.runner.gateway_host, self.gateway_port)
                )
                self._gateway_context = stack
        return self._gateway

    @contextlib.contextmanager
    def task_dir(self, unit: WorkUnit) -> Iterator[Path]:
        """Where an attempt's trajectory and files go: the task's directory in the run, or (a session
        that records nowhere) a scratch directory removed afterwards."""
        if self.store is not None:
            yield self.store.task_dir(unit.key)
            return
        scratch = Path(tempfile.mkdtemp(prefix="anyswe-rollout-"))
        try:
            yield scratch
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    async def attempt(self, unit: WorkUnit, task_dir: Path) -> TaskOutput:
        """One attempt at one task, the same for every caller: a grant of the model (its trajectory into
        ``task_dir``), the unit run, the grant settled into the outcome. Never raises for the task's own
        failure; its grant is revoked on every path."""
        from anyswe.errors import AnysweError
        from anyswe.execute.classify import failed_output

        gateway = await self.start_gateway() if unit.model is not None else None
        (task_dir / models.TRAJECTORY).unlink(missing_ok=True)  # an earlier attempt's calls
        try:
            unit, token = await models.grant(gateway, unit, task_dir)
        except AnysweError as exc:  # e.g. nothing recorded to replay: this task's error only
            return failed_output(unit, "agent", f"{type(exc).__name__}: {exc}", source="grant")
        if gateway is None or token is None:
            return await self.runner.run(unit)
        try:
            output = await self.runner.run(unit)
        except BaseException:
            gateway.revoke(token)  # a cancelled attempt's token and socket go with it
            raise
        return models.settle(output, gateway.revoke(token), task_dir, unit.model)

    async def record(self, output: TaskOutput) -> TaskOutput:
        """Write the attempt into the run directory (its files, then its row; one at a time, in a thread);
        the output as recorded. Waiting and writing are one step a cancellation cannot cut: a finished
        task's row is written before the run stops. Without a run directory, the output as it is."""
        if self.store is None:
            return output
        store = self.store

        async def write() -> TaskOutput:
            async with self._recording:
                return await asyncio.to_thread(record, store, output)

        writing = asyncio.ensure_future(write())
        try:
            return await asyncio.shield(writing)
        except asyncio.CancelledError:
            await writing
            raise

    async def close(self) -> None:
        """Remove every sandbox of this session's run id, close the runner, stop the gateway."""
        try:
            try:
                await self.runner.sweep(self.run_id)
            finally:
                await self.runner.close()
        finally:
            if self._gateway_context is not None:
                await self._gateway_context.aclose()
                self._gateway, self._gateway_context = None, None


#: The task's patch as graded (execute/task.py writes it).
PATCH_FILE = "patch.diff"


def record(store: RunStore, output: TaskOutput) -> TaskOutput:
    """Write a task's artefacts, then its result row (a row always has its files beside it); the output as
    recorded.

    What one task produced cannot stop the run: text UTF-8 cannot hold (a surrogate code point, from
    JSON an agent or a model wrote) is written with U+FFFD in its place, in the files and in the row,
    but for the patch, which was graded as it is. If its artefacts or row still cannot be written (such
    a patch, a full disk), the recorder's failure is appended (an internal error, retried next apply:
    unresolved, reward 0, no patch, since its verdict has no files beside it) and that row is written.
    """
    try:
        _write(store, output)
    except (OSError, UnicodeError, ValueError) as exc:
        failure = f"recording the task's results failed: {type(exc).__name__}: {exc}"
        failed = output.failed(Failure(kind="internal", source="recorder", message=failure))
        store.append(failed.result)
        return failed
    return output


def _write(store: RunStore, output: TaskOutput) -> None:
    out_dir = store.task_dir(output.result.key)
    # A retried task's folder must not keep the earlier attempt's error.
    (out_dir / "error.txt").unlink(missing_ok=True)
    for name, text in output.artifacts.items():
        try:
            data = text.encode()
        except UnicodeEncodeError:  # a surrogate code point (from JSON the agent printed): U+FFFD
            if name == PATCH_FILE:  # but the patch is what was graded: never another
                raise
            data = valid_text(text).encode()
        (out_dir / name).write_bytes(data)
    store.append(output.result)
