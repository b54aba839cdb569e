"""Statistics checked against scipy, and the paired comparison on hand-made frames."""

from __future__ import annotations

import random

import numpy as np
import polars as pl
import pytest
from scipy import stats

from anyswe.errors import ResultsError
from anyswe.results.compare import compare_by, compare_cells, compare_frames, compare_runs
from anyswe.results.stats import mcnemar_exact, paired_bootstrap, wilson
from anyswe.results.tables import cell_table, instance_matrix, repo_table


@pytest.mark.parametrize(("k", "n"), [(0, 1), (1, 1), (0, 10), (3, 10), (10, 10), (37, 80), (250, 500), (1, 500)])
def test_wilson_matches_scipy(k: int, n: int) -> None:
    ci = stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    assert wilson(k, n) == pytest.approx((ci.low, ci.high), abs=1e-9)


@pytest.mark.parametrize(("b", "c"), [(0, 0), (1, 0), (0, 5), (3, 7), (10, 10), (2, 15), (40, 25), (0, 60)])
def test_mcnemar_exact_matches_a_binomial_test(b: int, c: int) -> None:
    expected = 1.0 if b + c == 0 else stats.binomtest(b, b + c, 0.5, alternative="two-sided").pvalue
    assert mcnemar_exact(b, c) == pytest.approx(expected, rel=1e-12)


def test_paired_bootstrap_agrees_with_an_independent_resampler() -> None:
    rng = random.Random(7)
    a = [int(rng.random() < 0.4) for _ in range(300)]
    b = [int(rng.random() < 0.5) if x == 0 else int(rng.random() < 0.9) for x in a]
    delta, low, high = paired_bootstrap(a, b, resamples=20_000, seed=1)
    assert delta == pytest.approx(np.mean(b) - np.mean(a))
    # An independent resampler (pure Python, other seed) lands on the same interval within noise.
    d = [y - x for x, y in zip(a, b, strict=True)]
    r = random.Random(99)
    means = sorted(sum(d[r.randrange(len(d))] for _ in d) / len(d) for _ in range(4000))
    assert low == pytest.approx(means[int(0.025 * 4000)], abs=0.01)
    assert high == pytest.approx(means[int(0.975 * 4000)], abs=0.01)
    assert low < delta < high
    assert paired_bootstrap([1, 1], [1, 1]) == (0.0, 0.0, 0.0)


def frame(cell: str, provider: str, verdicts: dict[str, bool | None], agent: str = "gold") -> pl.DataFrame:
    """None marks a masked sample."""
    return pl.DataFrame(
        [
            {
                "cell": cell,
                "agent": agent,
                "model": None,
                "provider": provider,
                "provider_type": provider,
                "instance_id": iid,
                "sample": 0,
                "repo": iid.split("-")[0],
                "resolved": bool(v),
                "reward": float(bool(v)),
                "mask_sample": v is None,
                "patch_exists": True,
                "patch_applied": True,
                "time_total": 1.0,
            }
            for iid, v in verdicts.items()
        ],
        schema_overrides={"model": pl.String},
    )


def test_compare_counts_flips_masked_and_unpaired() -> None:
    a = frame("g.d", "docker", {"x-1": True, "x-2": True, "y-3": False, "y-4": None, "z-5": True, "w-6": True})
    b = frame("g.a", "apptainer", {"x-1": True, "x-2": False, "y-3": True, "y-4": True, "z-5": None, "q-7": True})
    c = compare_frames(a, b, label_a="A", label_b="B", resamples=2000)
    assert (c.pairs, c.masked_pairs, c.unpaired) == (3, 2, 2)
    assert c.flips["resolved_only_in_a"] == {"count": 1, "instance_ids": ["x-2"]}
    assert c.flips["resolved_only_in_b"] == {"count": 1, "instance_ids": ["y-3"]}
    assert c.agreement == pytest.approx(1 / 3) and c.delta == pytest.approx(0.0)
    assert c.p_value == 1.0
    j = c.to_json()
    assert {"agreement", "flips", "delta", "ci_low", "ci_high", "p_value", "masked_pairs"} <= set(j)


def test_compare_by_provider_puts_docker_first() -> None:
    tasks = pl.concat([frame("g.a", "apptainer", {"x-1": True}), frame("g.d", "docker", {"x-1": True})])
    (c,) = compare_by(tasks, "provider")
    assert (c.a, c.b, c.agreement) == ("g.d", "g.a", 1.0)
    both = pl.concat([frame("g.d", "docker", {"x-1": True}), frame("n.d", "docker", {"x-1": False}, agent="noop")])
    assert compare_cells(both, "n.d", "g.d").flips["resolved_only_in_b"]["instance_ids"] == ["x-1"]
    with pytest.raises(ResultsError, match="no such cell: q"):
        compare_cells(both, "q", "g.d")
    (r,) = compare_runs(frame("g.d", "docker", {"x-1": True}), frame("g.d", "docker", {"x-1": False}))
    assert r.flips["resolved_only_in_a"]["instance_ids"] == ["x-1"]


def test_tables() -> None:
    tasks = frame("g.d", "docker", {"x-1": True, "x-2": False, "y-3": None, "y-4": True})
    (row,) = cell_table(tasks).to_dicts()
    assert (row["tasks"], row["resolved"], row["scored"], row["masked"]) == (4, 2, 3, 1)
    assert row["resolve_rate"] == pytest.approx(2 / 3)
    assert (row["ci_low"], row["ci_high"]) == pytest.approx(wilson(2, 3))
    repos = {r["repo"]: r for r in repo_table(tasks).to_dicts()}
    assert repos["x"]["resolve_rate"] == 0.5 and repos["y"]["scored"] == 1
    m = instance_matrix(tasks)
    assert m.columns == ["instance_id", "g.d"] and m["g.d"].to_list() == [1.0, 0.0, None, 1.0]
