"""Statistics checked against scipy, and the paired comparison on hand-made frames."""

from __future__ import annotations

import random
from typing import Any

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


def frame(
    cell: str,
    provider: str,
    verdicts: dict[str, bool | None],
    agent: str = "gold",
    timed_out: frozenset[str] = frozenset(),
) -> pl.DataFrame:
    """None marks an infra error (no verdict, masked); an id in ``timed_out`` is an agent timeout:
    masked for RL, its verdict what its tests said (execute/decide.py)."""
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
                "mask_sample": v is None or iid in timed_out,
                "mask_reason": "infra" if v is None else "agent_timeout" if iid in timed_out else None,
                "error_kind": "infra" if v is None else None,
                "agent_timed_out": iid in timed_out,
                "patch_exists": True,
                "patch_applied": True,
                "time_total": 1.0,
            }
            for iid, v in verdicts.items()
        ],
        schema_overrides={"model": pl.String, "mask_reason": pl.String, "error_kind": pl.String},
    )


def test_compare_counts_flips_masked_and_unpaired() -> None:
    a = frame("g.d", "docker", {"x-1": True, "x-2": True, "y-3": False, "y-4": None, "z-5": True, "w-6": True})
    b = frame("g.a", "apptainer", {"x-1": True, "x-2": False, "y-3": True, "y-4": True, "z-5": None, "q-7": True})
    c = compare_frames(a, b, label_a="A", label_b="B", resamples=2000)
    # The two masked pairs are infra errors: no verdict in either view.
    assert (c.pairs, c.masked_pairs, c.errored_pairs, c.unpaired) == (3, 2, 2, 2)
    assert (c.rl_pairs, c.rates_differ) == (3, False) and "RL" not in str(c)
    assert c.flips["resolved_only_in_a"] == {"count": 1, "instance_ids": ["x-2"]}
    assert c.flips["resolved_only_in_b"] == {"count": 1, "instance_ids": ["y-3"]}
    assert c.agreement == pytest.approx(1 / 3) and c.delta == pytest.approx(0.0)
    assert c.p_value == 1.0
    j = c.to_json()
    assert {"agreement", "flips", "delta", "ci_low", "ci_high", "p_value", "masked_pairs"} <= set(j)


def test_a_diff_compares_harness_rates_and_shows_the_rl_rates_beside() -> None:
    """Issue 31, 6: B's agent times out on the task A fails; the harness counts it (unresolved on
    both sides, no flip), so a stalling B gains nothing. Only the RL view drops that pair."""
    a = frame("g.d", "docker", {"x-1": True, "x-2": False, "x-3": None})
    b = frame("g.a", "apptainer", {"x-1": True, "x-2": False, "x-3": True}, timed_out=frozenset({"x-2"}))
    c = compare_frames(a, b, label_a="A", label_b="B", resamples=2000)
    assert (c.pairs, c.errored_pairs, c.masked_pairs, c.rl_pairs) == (2, 1, 2, 1)
    assert (c.rate_a, c.rate_b, c.delta) == (0.5, 0.5, 0.0) and c.agreement == 1.0
    assert (c.rl_rate_a, c.rl_rate_b) == (1.0, 1.0) and c.rates_differ
    assert "2 pairs (1 without a verdict, 0 unpaired), rates 0.500 / 0.500" in str(c)
    assert "RL (unmasked on both sides): 1 pairs, rates 1.000 / 1.000" in str(c)
    # A resolve after the timeout is a flip for the harness, as swebench's report would have it.
    b2 = frame("g.a", "apptainer", {"x-1": True, "x-2": True, "x-3": True}, timed_out=frozenset({"x-2"}))
    c2 = compare_frames(a, b2, label_a="A", label_b="B", resamples=2000)
    assert c2.flips["resolved_only_in_b"]["instance_ids"] == ["x-2"] and c2.delta == 0.5


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
    # Nothing here is masked but for an infra error: the RL rate is the harness rate.
    assert (row["rl_resolved"], row["rl_scored"], row["rl_rate"]) == (2, 3, row["resolve_rate"])


def test_a_cell_whose_agent_times_out_on_one_of_two_tasks_has_a_rate_over_both() -> None:
    """Issue 31, 6: the harness rate counts the timed-out task as its tests said; only the RL rate
    (Gym's mask) leaves it out. Else an agent that stalls on hard tasks outscores one that fails them."""
    tasks = frame("g.d", "docker", {"x-1": True, "x-2": False}, timed_out=frozenset({"x-2"}))
    (row,) = cell_table(tasks).to_dicts()
    assert (row["tasks"], row["resolved"], row["scored"], row["masked"]) == (2, 1, 2, 1)
    assert row["resolve_rate"] == 0.5 and (row["ci_low"], row["ci_high"]) == pytest.approx(wilson(1, 2))
    assert (row["rl_resolved"], row["rl_scored"], row["rl_rate"]) == (1, 1, 1.0)
    assert instance_matrix(tasks)["g.d"].to_list() == [1.0, 0.0]
    assert instance_matrix(tasks, rl=True)["g.d"].to_list() == [1.0, None]
    # Tests that passed after the timeout count as resolved for the harness, as swebench's report would.
    passed = frame("g.d", "docker", {"x-1": False, "x-2": True}, timed_out=frozenset({"x-2"}))
    (row,) = cell_table(passed).to_dicts()
    assert (row["resolved"], row["scored"], row["rl_resolved"], row["rl_scored"]) == (1, 2, 0, 1)


def test_untrusted_errors_leave_both_denominators() -> None:
    tasks = frame("g.d", "docker", {"x-1": True, "x-2": False, "x-3": None}, timed_out=frozenset({"x-2"}))
    grading = tasks.with_columns(
        pl.when(pl.col("instance_id") == "x-1")
        .then(pl.lit("grading"))
        .otherwise(pl.col("error_kind"))
        .alias("error_kind")
    )
    (row,) = cell_table(tasks).to_dicts()
    assert (row["tasks"], row["scored"], row["rl_scored"], row["masked"]) == (3, 2, 1, 2)
    # decide() never resolves a row whose error is untrusted; the table leaves it out whatever it says.
    (row,) = cell_table(grading).to_dicts()
    assert (row["resolved"], row["scored"], row["resolve_rate"]) == (0, 1, 0.0)
    # An agent's own error (its crash, a capture it broke) is a task that ran and ended: it counts.
    crashed = tasks.with_columns(pl.lit("agent").alias("error_kind"))
    (row,) = cell_table(crashed).to_dicts()
    assert row["scored"] == 3


def _simulate(rng: Any, instances: int, samples: int, shift: float, spread: float) -> tuple[Any, Any, Any]:
    """Per-instance pairs: A resolves with p_i, B with p_i moved by N(shift, spread) (clipped):
    samples of one instance share p_i, so they are correlated."""
    import numpy as np

    p_a = rng.beta(0.6, 0.8, size=instances)
    p_b = np.clip(p_a + rng.normal(shift, spread, size=instances), 0, 1)
    a = rng.random((instances, samples)) < p_a[:, None]
    b = rng.random((instances, samples)) < p_b[:, None]
    return a.astype(int), b.astype(int), p_b - p_a


def test_clustered_interval_covers_a_known_difference_and_the_naive_one_does_not() -> None:
    import numpy as np

    from anyswe.results.stats import cluster_bootstrap

    rng = np.random.default_rng(7)
    # The population difference (instances drawn afresh each replicate), by a large draw.
    big = rng.beta(0.6, 0.8, size=2_000_000)
    true_delta = float(np.mean(np.clip(big + rng.normal(0.05, 0.25, size=big.size), 0, 1) - big))
    clustered = naive = 0
    replicates = 300
    for r in range(replicates):
        a, b, _ = _simulate(rng, instances=100, samples=8, shift=0.05, spread=0.25)
        d = b - a
        _, low, high = cluster_bootstrap(d.sum(axis=1), np.full(100, 8), resamples=1000, seed=r)
        clustered += low <= true_delta <= high
        _, low2, high2 = paired_bootstrap(a.ravel().tolist(), b.ravel().tolist(), resamples=1000, seed=r)
        naive += low2 <= true_delta <= high2
    print(f"coverage: clustered {clustered / replicates:.3f}, naive {naive / replicates:.3f}")
    assert 0.90 <= clustered / replicates <= 0.99, clustered / replicates
    assert naive / replicates < 0.85, naive / replicates  # pairs as if independent: too narrow


def test_the_cluster_bootstrap_gives_what_its_plain_gather_gave() -> None:
    """Its integer and equal-count shortcuts draw the same indices and give the same figures, to the bit."""
    import numpy as np

    from anyswe.results.stats import cluster_bootstrap

    def plain(s: np.ndarray, n: np.ndarray, resamples: int, seed: int) -> tuple[float, float, float]:
        rng, deltas = np.random.default_rng(seed), np.empty(resamples)
        for start in range(0, resamples, 300):
            k = min(300, resamples - start)
            idx = rng.integers(0, len(s), size=(k, len(s)), dtype=np.int32)
            deltas[start : start + k] = s[idx].sum(axis=1) / np.maximum(n[idx].sum(axis=1), 1.0)
        alpha = (1 - 0.95) / 2
        low, high = np.quantile(deltas, [alpha, 1 - alpha])
        return float(s.sum() / n.sum()), float(low), float(high)

    rng = np.random.default_rng(3)
    counts = rng.integers(1, 5, 400)
    cases = [
        (rng.integers(-1, 2, 500), np.ones(500)),  # one sample per instance
        (rng.integers(-4, 5, 400), counts),  # several, unequal
        (rng.integers(-300, 301, 50), np.full(50, 300)),  # sums past int8
        (rng.normal(0, 1, 80), np.ones(80)),  # not integers: the plain path
    ]
    for s, n in cases:
        s, n = s.astype(float), n.astype(float)
        assert cluster_bootstrap(s, n, resamples=1000, seed=5, chunk=300) == plain(s, n, 1000, 5)


def test_sign_flip_test_holds_its_level_where_mcnemar_over_samples_does_not() -> None:
    import numpy as np

    from anyswe.results.stats import sign_flip_test

    rng = np.random.default_rng(11)
    flip_rejects = mcnemar_rejects = 0
    replicates = 300
    for r in range(replicates):
        # Exchangeable sides: each instance's two rates drawn alike around a shared difficulty.
        q = rng.beta(0.6, 0.8, size=60)
        p_a, p_b = (np.clip(q + rng.normal(0, 0.25, size=60), 0, 1) for _ in range(2))
        a = (rng.random((60, 8)) < p_a[:, None]).astype(int)
        b = (rng.random((60, 8)) < p_b[:, None]).astype(int)
        flip_rejects += sign_flip_test((b - a).mean(axis=1), resamples=2000, seed=r) < 0.05
        only_a, only_b = int(((a == 1) & (b == 0)).sum()), int(((b == 1) & (a == 0)).sum())
        mcnemar_rejects += mcnemar_exact(only_a, only_b) < 0.05
    print(f"level 0.05: sign-flip {flip_rejects / replicates:.3f}, McNemar {mcnemar_rejects / replicates:.3f}")
    assert flip_rejects / replicates <= 0.09, flip_rejects / replicates
    assert mcnemar_rejects / replicates > 0.15, mcnemar_rejects / replicates


def test_sign_flip_is_exact_for_few_instances() -> None:
    from anyswe.results.stats import sign_flip_test

    # Three instances all better in B: 2 of the 8 sign patterns are as extreme, p = 1/4.
    assert sign_flip_test([0.5, 1.0, 0.25]) == pytest.approx(0.25)
    assert sign_flip_test([0.0, 0.0]) == 1.0


def test_several_samples_compare_by_instance() -> None:
    import polars as pl

    rows = []
    for i in range(30):
        for s in range(4):
            for provider, resolved in (("docker", i % 2 == 0), ("apptainer", i % 3 == 0)):
                rows.append(
                    {"cell": f"g.none.{provider}", "agent": "g", "model": None, "provider": provider,
                     "provider_type": provider, "instance_id": f"i{i}", "sample": s, "resolved": resolved,
                     "mask_sample": False}
                )  # fmt: skip
    tasks = pl.DataFrame(rows)
    (c,) = compare_by(tasks, "provider")
    assert c.test == "sign-flip" and c.instances == 30 and c.pairs == 120
    assert c.flips["resolved_only_in_a"]["instance_ids"][0].endswith("#s0")
    assert c.ci_low < c.delta < c.ci_high and "sign-flip (by instance)" in str(c)
