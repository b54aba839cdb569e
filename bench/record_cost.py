"""Benchmark: what the tests' record (anyswe/grading/testrecord) costs a grading, against the same grading
without it, on real SWE-bench Verified images (pytest's own repository records nothing, so the sphinx
instances and one pytest one) and the demo's pytest tasks: each gold patch graded in a fresh docker
sandbox, with and without the record, alternating, ``--rounds`` times; the medians per instance and in
all, and their ratio. Figures, never asserts.

    uv run python bench/record_cost.py [--rounds 3] [--provider docker]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from _common import SHARED

INSTANCES = ("sphinx-doc__sphinx-10466", "sphinx-doc__sphinx-11445", "pytest-dev__pytest-7490")
DEMO = ("demo__calc-1", "demo__inventory-4", "demo__stack-8")


async def graded(provider_name: str, dataset: object, iid: str, record: bool) -> tuple[float, str | None]:
    from anyswe.execute.grade import dataset_and_instance, grade_in_sandbox
    from anyswe.grading import get_harness, harness_for
    from anyswe.images.resolve import ImageResolver, ImageSource
    from anyswe.sandbox import get_provider

    ds, row = dataset_and_instance(iid, dataset)  # type: ignore[arg-type]
    provider = get_provider(provider_name)
    image = await ImageResolver().image_for(provider, ImageSource.choose(ds, provider.config), row)
    harness = get_harness(harness_for(row, spec_harness=None, dataset_harness=ds.harness))
    t0 = time.monotonic()
    verdict = await grade_in_sandbox(
        provider, image, row, harness, row.patch, timeout=1800, stop_in_background=False, record=record
    )
    assert verdict.resolved or iid.startswith("sphinx-doc__sphinx-10323"), (iid, verdict.test_output[-2000:])
    return time.monotonic() - t0, verdict.check.record if verdict.check else None


def main() -> None:
    from anyswe.datasets import load_dataset

    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--provider", default="docker")
    args = ap.parse_args()
    sets = [(load_dataset("swe-bench-verified", SHARED / "verified.jsonl"), INSTANCES), (load_dataset("demo"), DEMO)]
    times: dict[tuple[str, bool], list[float]] = {}
    kinds: dict[str, str | None] = {}
    for _ in range(args.rounds):
        for dataset, ids in sets:
            for iid in ids:
                for record in (True, False):
                    seconds, kind = asyncio.run(graded(args.provider, dataset, iid, record))
                    times.setdefault((iid, record), []).append(seconds)
                    kinds[iid] = kind if record else kinds.get(iid)
    print(f"grading with and without the tests' record, {args.provider}, medians of {args.rounds} rounds")
    print(f"{'instance':32} {'record':>10} {'with':>8} {'without':>8} {'ratio':>6}")
    total = {True: 0.0, False: 0.0}
    for _, ids in sets:
        for iid in ids:
            on, off = statistics.median(times[iid, True]), statistics.median(times[iid, False])
            total[True] += on
            total[False] += off
            print(f"{iid:32} {kinds[iid] or '-':>10} {on:8.2f} {off:8.2f} {on / off:6.3f}")
    print(f"{'all':32} {'':>10} {total[True]:8.2f} {total[False]:8.2f} {total[True] / total[False]:6.3f}")


if __name__ == "__main__":
    main()
