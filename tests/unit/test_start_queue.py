"""Sandbox starts beyond ``start_concurrency`` queue; the queue is not the start's timeout.

The runtime's start is replaced by a wait of known length (what is tested is the provider's own
bookkeeping around it); the conformance suite starts real sandboxes through the same queue.
"""

from __future__ import annotations

import asyncio

from anyswe.sandbox.docker import DockerConfig, DockerProvider
from anyswe.sandbox.request import NetworkPolicy, SandboxRequest


class SlowStarts(DockerProvider):
    """A docker provider whose runtime start takes ``seconds`` and does nothing else."""

    def __init__(self, seconds: float, **config: object) -> None:
        super().__init__(DockerConfig(**config))  # type: ignore[arg-type]
        self.seconds = seconds
        self.starting = self.peak = self.started = 0

    async def _start(self, request: SandboxRequest, network: NetworkPolicy) -> None:
        self.starting += 1
        self.peak = max(self.peak, self.starting)
        try:
            await asyncio.sleep(self.seconds)
            self.started += 1
        finally:
            self.starting -= 1

    async def _image_workdir(self, image: str) -> str:
        return "/"

    async def remove(self, name: str) -> None:
        return None


def test_queued_starts_do_not_count_against_the_startup_timeout() -> None:
    # Eight starts of 0.2 s one at a time: the last waits 1.4 s for its turn, past a 1 s timeout.
    provider = SlowStarts(0.2, concurrency=8, start_concurrency=1, startup_timeout=1.0)

    async def go() -> None:
        boxes = await asyncio.gather(*(provider.start("img") for _ in range(8)))
        await asyncio.gather(*(sb.stop() for sb in boxes))

    asyncio.run(go())
    assert provider.started == 8 and provider.peak == 1


def test_a_start_cancelled_in_the_queue_gives_back_its_slot() -> None:
    provider = SlowStarts(0.3, concurrency=2, start_concurrency=1)

    async def go() -> int:
        first = asyncio.ensure_future(provider.start("img"))
        queued = asyncio.ensure_future(provider.start("img"))
        await asyncio.sleep(0.1)  # the first is starting, the second waits for its turn
        queued.cancel()
        await asyncio.gather(queued, return_exceptions=True)
        sandbox = await first
        # Both sandbox slots are free again once the started one is stopped: two more start at once.
        await sandbox.stop()
        again = await asyncio.wait_for(asyncio.gather(provider.start("img"), provider.start("img")), 5)
        await asyncio.gather(*(sb.stop() for sb in again))
        return provider.started

    assert asyncio.run(go()) == 3
    assert provider.peak == 1
