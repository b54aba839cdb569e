"""Paired comparison of two cells: same agent, model, instance and sample on two backends or runs.

Each pair is scored when both sides ran and ended, as the harness rate counts them
(:mod:`anyswe.results.tables`): an agent timeout or a forced stop is compared as its tests said, and
only a pair with an infra, grading or internal error on a side is left out (counted as
``errored_pairs``). Reported: agreement, the flips in each direction with their instance ids, the
resolve-rate delta (B - A) with a bootstrap 95% interval over instances, and a paired p-value: exact
McNemar on the discordant pairs with one sample per instance, a sign-flip test on per-instance mean
differences with several (samples of one instance are not independent).

Beside them, the RL rates of both sides over the pairs unmasked on both (``rl_pairs``,
``rl_rate_a``, ``rl_rate_b``): what a trainer's mask leaves, shown where it differs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from itertools import combinations
from typing import TYPE_CHECKING, Any

from anyswe.errors import ResultsError
from anyswe.results.stats import cluster_bootstrap, mcnemar_exact, sign_flip_test
from anyswe.results.tables import counted
from anyswe.sandbox import provider_rank

if TYPE_CHECKING:
    import polars as pl

PAIR_KEYS = ["instance_id", "sample"]
_TEST_NAMES = {"mcnemar-exact": "McNemar", "sign-flip": "sign-flip (by instance)"}


@dataclass
class Comparison:
    a: str
    b: str
    #: Pairs both of whose sides ran and ended: what the rates, delta, flips and test are over.
    pairs: int
    #: Pairs with a side masked for RL (an untrusted error, an agent timeout, a forced stop...).
    masked_pairs: int
    unpaired: int
    agreement: float
    rate_a: float
    rate_b: float
    delta: float
    ci_low: float
    ci_high: float
    p_value: float
    flips: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Instances whose two sides ran different images (by source image id): their verdicts may
    #: differ for that reason alone.
    image_mismatch: list[str] = field(default_factory=list)
    #: Instances with at least one scored pair (the unit of the interval and test with several samples).
    instances: int = 0
    #: The paired test: "mcnemar-exact" (one sample per instance) or "sign-flip" (several).
    test: str = "mcnemar-exact"
    #: Pairs left out: a side with an infra, grading or internal error has no verdict.
    errored_pairs: int = 0
    #: The RL view: pairs unmasked on both sides, and each side's rate over them.
    rl_pairs: int = 0
    rl_rate_a: float = 0.0
    rl_rate_b: float = 0.0

    @property
    def rates_differ(self) -> bool:
        """Whether the RL view leaves out a pair the harness view scores (masked pairs minus errored ones)."""
        return self.rl_pairs != self.pairs

    @property
    def warnings(self) -> list[str]:
        if not self.image_mismatch:
            return []
        ids = ", ".join(self.image_mismatch[:10]) + (", ..." if len(self.image_mismatch) > 10 else "")
        return [
            f"{self.a} vs {self.b}: {len(self.image_mismatch)} instance(s) ran on different image digests "
            f"(not the same image on both sides): {ids}"
        ]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        fa, fb = self.flips["resolved_only_in_a"]["count"], self.flips["resolved_only_in_b"]["count"]
        rl = (
            f"; RL (unmasked on both sides): {self.rl_pairs} pairs, rates {self.rl_rate_a:.3f} / {self.rl_rate_b:.3f}"
            if self.rates_differ
            else ""
        )
        return (
            f"{self.a} vs {self.b}: {self.pairs} pairs ({self.errored_pairs} without a verdict, "
            f"{self.unpaired} unpaired), rates {self.rate_a:.3f} / {self.rate_b:.3f}, "
            f"agreement {self.agreement:.3f}, flips {fa} A-only / {fb} B-only, delta {self.delta:+.3f} "
            f"[{self.ci_low:+.3f}, {self.ci_high:+.3f}], {_TEST_NAMES.get(self.test, self.test)} p={self.p_value:.4g}"
            + rl
        )


def compare_frames(
    a: pl.DataFrame, b: pl.DataFrame, *, label_a: str, label_b: str, seed: int = 0, resamples: int = 10_000
) -> Comparison:
    """Pair the task rows of two cells on (instance_id, sample) and compare them.

    With one sample per instance: the bootstrap over pairs and the exact McNemar test. With several,
    the instance is the unit: the bootstrap resamples instances, and the paired test is a sign-flip
    permutation test on per-instance mean differences (McNemar assumes independent pairs).
    """
    import polars as pl

    cols = [*PAIR_KEYS, "resolved", "mask_sample", "counted"]
    side_a, side_b = (f.with_columns(counted(f).alias("counted")).select(cols) for f in (a, b))
    joined = side_a.join(side_b, on=PAIR_KEYS, how="full", suffix="_b", coalesce=True)
    both = joined.filter(pl.col("resolved").is_not_null() & pl.col("resolved_b").is_not_null())
    unpaired = joined.height - both.height
    is_masked = pl.col("mask_sample") | pl.col("mask_sample_b")
    masked = both.filter(is_masked).height
    # The harness's view: a pair is scored when both sides have a verdict, masked for RL or not.
    scored = both.filter(pl.col("counted") & pl.col("counted_b"))
    unmasked = both.filter(~is_masked)
    n = scored.height
    several = bool(n) and scored.group_by("instance_id").len()["len"].max() > 1  # type: ignore[operator]
    by_sample = pl.concat_str(pl.col("instance_id"), pl.lit("#s"), pl.col("sample").cast(pl.Utf8))
    label = by_sample if several else pl.col("instance_id")

    def flips(condition: pl.Expr) -> list[str]:
        return scored.filter(condition).sort(PAIR_KEYS).select(label.alias("l"))["l"].to_list()

    only_a = flips(pl.col("resolved") & ~pl.col("resolved_b"))
    only_b = flips(pl.col("resolved_b") & ~pl.col("resolved"))
    delta, low, high, instances = _interval(scored, resamples=resamples, seed=seed)
    p_value, test = _paired_test(scored, len(only_a), len(only_b), bool(several), resamples=resamples, seed=seed)

    return Comparison(
        a=label_a,
        b=label_b,
        pairs=n,
        masked_pairs=masked,
        unpaired=unpaired,
        agreement=(n - len(only_a) - len(only_b)) / n if n else 1.0,
        rate_a=_rate(scored, "resolved"),
        rate_b=_rate(scored, "resolved_b"),
        delta=delta,
        ci_low=low,
        ci_high=high,
        p_value=p_value,
        flips={
            f"resolved_only_in_{s}": {"count": len(ids), "instance_ids": ids}
            for s, ids in (("a", only_a), ("b", only_b))
        },
        image_mismatch=_image_mismatch(a, b),
        instances=instances,
        test=test,
        errored_pairs=both.height - n,
        rl_pairs=unmasked.height,
        rl_rate_a=_rate(unmasked, "resolved"),
        rl_rate_b=_rate(unmasked, "resolved_b"),
    )


def _paired_test(
    scored: pl.DataFrame, only_a: int, only_b: int, several: bool, *, resamples: int, seed: int
) -> tuple[float, str]:
    """The paired test's p-value and name: McNemar's exact test on the flips with one sample per
    instance; with several, a sign-flip test on per-instance *sums* (the pooled delta the interval is about)."""
    if several:
        return sign_flip_test(_per_instance(scored)["s"].to_list(), resamples=resamples, seed=seed), "sign-flip"
    return mcnemar_exact(only_a, only_b), "mcnemar-exact"


def _rate(frame: pl.DataFrame, column: str) -> float:
    import polars as pl

    return float(frame[column].cast(pl.Int64).sum()) / frame.height if frame.height else 0.0


def _per_instance(scored: pl.DataFrame) -> pl.DataFrame:
    """Per instance: ``s``, the sum of (b - a) over its scored pairs, and ``n``, their number."""
    import polars as pl

    return scored.group_by("instance_id").agg(
        (pl.col("resolved_b").cast(pl.Int64) - pl.col("resolved").cast(pl.Int64)).sum().alias("s"),
        pl.len().alias("n"),
    )


def _interval(scored: pl.DataFrame, *, resamples: int, seed: int) -> tuple[float, float, float, int]:
    """(delta, low, high, instances): the bootstrap over instances (over pairs when each has one)."""
    per = _per_instance(scored)
    delta, low, high = cluster_bootstrap(per["s"].to_list(), per["n"].to_list(), resamples=resamples, seed=seed)
    return delta, low, high, per.height


def _image_mismatch(a: pl.DataFrame, b: pl.DataFrame) -> list[str]:
    """Instances whose sides ran different images: the source image id when both know it, and, on the
    same kind of backend, the artefact's own digest."""
    import polars as pl

    def digests(frame: pl.DataFrame) -> pl.DataFrame:
        if "image_source_digest" not in frame.columns:
            return pl.DataFrame(schema={"instance_id": pl.Utf8, "src": pl.Utf8, "art": pl.Utf8, "kind": pl.Utf8})
        return frame.select(
            "instance_id",
            pl.col("image_source_digest").alias("src"),
            pl.col("image_digest").alias("art"),
            pl.col("provider_type").alias("kind"),
        ).unique()

    j = digests(a).join(digests(b), on="instance_id", suffix="_b")
    differs = (pl.col("src").is_not_null() & pl.col("src_b").is_not_null() & (pl.col("src") != pl.col("src_b"))) | (
        (pl.col("kind") == pl.col("kind_b"))
        & pl.col("art").is_not_null()
        & pl.col("art_b").is_not_null()
        & (pl.col("art") != pl.col("art_b"))
    )
    return sorted(set(j.filter(differs)["instance_id"].to_list()))


def compare_by(tasks: pl.DataFrame, by: str = "provider", *, seed: int = 0) -> list[Comparison]:
    """Within each group of the other cell keys, compare every pair of values of ``by`` (e.g. docker vs apptainer)."""
    import polars as pl

    if by not in ("provider", "agent", "model"):
        raise ResultsError(f"--by must be provider, agent or model, not {by!r}")
    fixed = [k for k in ("agent", "model", "provider") if k != by]
    out = []
    for _, group in tasks.group_by(fixed, maintain_order=True):
        # Providers in registration order (docker first): "docker vs apptainer" reads as the
        # reference against the other backend.
        kinds = (
            dict(zip(group[by].to_list(), group["provider_type"].to_list(), strict=True)) if by == "provider" else {}
        )
        values = sorted(set(group[by].to_list()), key=lambda v: (provider_rank(kinds.get(v)), v is None, str(v)))
        for va, vb in combinations(values, 2):
            ga = group.filter(pl.col(by).eq_missing(va))
            gb = group.filter(pl.col(by).eq_missing(vb))
            out.append(compare_frames(ga, gb, label_a=ga["cell"][0], label_b=gb["cell"][0], seed=seed))
    if not out:
        raise ResultsError(f"nothing to compare: every cell has a single {by}")
    return out


def compare_cells(tasks: pl.DataFrame, cell_a: str, cell_b: str, *, seed: int = 0) -> Comparison:
    """Compare any two cells of one task table (e.g. two models on one provider)."""
    import polars as pl

    missing = [c for c in (cell_a, cell_b) if c not in set(tasks["cell"])]
    if missing:
        raise ResultsError(f"no such cell: {', '.join(missing)}; cells: {', '.join(sorted(set(tasks['cell'])))}")
    return compare_frames(
        tasks.filter(pl.col("cell") == cell_a),
        tasks.filter(pl.col("cell") == cell_b),
        label_a=cell_a,
        label_b=cell_b,
        seed=seed,
    )


def compare_runs(tasks_a: pl.DataFrame, tasks_b: pl.DataFrame, *, seed: int = 0) -> list[Comparison]:
    """Compare each cell present in both runs with itself."""
    import polars as pl

    common = sorted(set(tasks_a["cell"]) & set(tasks_b["cell"]))
    if not common:
        raise ResultsError("the two runs have no cell in common")
    return [
        compare_frames(
            tasks_a.filter(pl.col("cell") == c),
            tasks_b.filter(pl.col("cell") == c),
            label_a=f"A:{c}",
            label_b=f"B:{c}",
            seed=seed,
        )
        for c in common
    ]
