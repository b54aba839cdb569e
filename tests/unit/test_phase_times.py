"""A task's phase times partition its wall time (issue 35): a step between two named phases, or a
failure's cleanup, is in one of them, never in none."""

from __future__ import annotations

import asyncio
import time

import pytest

from anyswe.execute.classify import Trace


def test_phases_partition_the_wall_time_through_gaps_and_failures() -> None:
    async def go() -> Trace:
        trace = Trace()
        t0 = time.monotonic()
        with trace.phase("time_image"):
            await asyncio.sleep(0.02)
        time.sleep(0.03)  # a step between two phases: charged to the next one
        with trace.phase("time_sandbox_start"):
            await asyncio.sleep(0.01)
        with pytest.raises(RuntimeError), trace.phase("time_agent"):
            raise RuntimeError("the agent's phase failed")
        time.sleep(0.02)  # the failure's cleanup: charged to the phase it followed
        trace.close()
        wall = time.monotonic() - t0
        assert abs(trace.times["time_total"] - wall) < 0.01
        return trace

    trace = asyncio.run(go())
    times = trace.times
    assert set(times) == {"time_image", "time_sandbox_start", "time_agent", "time_total"}
    assert times["time_sandbox_start"] >= 0.04 and times["time_agent"] >= 0.02
    assert abs(sum(v for k, v in times.items() if k != "time_total") - times["time_total"]) <= 0.003


def test_a_task_that_never_started_has_no_times() -> None:
    assert Trace().times == {}
