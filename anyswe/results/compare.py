"""Paired comparison of two cells: same agent, model, instance and sample on two backends or runs.

Each pair is scored only when neither side is masked (masked pairs are counted). Reported:
agreement, the flips in each direction with their instance ids, the resolve-rate delta (B - A)
with a paired bootstrap 95% interval, and the exact McNemar p-value on the discordant pairs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from itertools import combinations
from typing import TYPE_CHECKING, Any

from anyswe.errors import ResultsError
from anyswe.results.stats import mcnemar_exact, paired_bootstrap
from anyswe.sandbox import provider_rank

if TYPE_CHECKING:
    import polars as pl

PAIR_KEYS = ["instance_id", "sample"]


@dataclass
class Comparison:
    a: str
    b: str
    pairs: int
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
        return (
            f"{self.a} vs {self.b}: {self.pairs} pairs ({self.masked_pairs} masked, {self.unpaired} unpaired), "
            f"agreement {self.agreement:.3f}, flips {fa} A-only / {fb} B-only, delta {self.delta:+.3f} "
            f"[{self.ci_low:+.3f}, {self.ci_high:+.3f}], McNemar p={self.p_value:.4g}"
        )


def _label(row_id: str, sample: int, samples: int) -> str:
    return row_id if samples <= 1 else f"{row_id}#s{sample}"


def compare_frames(
    a: pl.DataFrame, b: pl.DataFrame, *, label_a: str, label_b: str, seed: int = 0, resamples: int = 10_000
) -> Comparison:
    """Pair the task rows of two cells on (instance_id, sample) and compare them."""
    cols = [*PAIR_KEYS, "resolved", "mask_sample"]
    joined = a.select(cols).join(b.select(cols), on=PAIR_KEYS, how="full", suffix="_b", coalesce=True)
    both = joined.filter(joined["resolved"].is_not_null() & joined["resolved_b"].is_not_null())
    unpaired = joined.height - both.height
    masked = both.filter(both["mask_sample"] | both["mask_sample_b"])
    scored = both.filter(~(both["mask_sample"] | both["mask_sample_b"])).sort(PAIR_KEYS)
    ra = [int(x) for x in scored["resolved"]]
    rb = [int(x) for x in scored["resolved_b"]]
    samples = len(set(a["sample"].to_list()) | set(b["sample"].to_list()))
    only_a = [
        _label(i, s, samples)
        for i, s, x, y in zip(scored["instance_id"], scored["sample"], ra, rb, strict=True)
        if x and not y
    ]
    only_b = [
        _label(i, s, samples)
        for i, s, x, y in zip(scored["instance_id"], scored["sample"], ra, rb, strict=True)
        if y and not x
    ]
    n = len(ra)
    delta, low, high = paired_bootstrap(ra, rb, resamples=resamples, seed=seed)
    mismatch = _image_mismatch(a, b)
    return Comparison(
        a=label_a,
        b=label_b,
        pairs=n,
        masked_pairs=masked.height,
        unpaired=unpaired,
        agreement=(n - len(only_a) - len(only_b)) / n if n else 1.0,
        rate_a=sum(ra) / n if n else 0.0,
        rate_b=sum(rb) / n if n else 0.0,
        delta=delta,
        ci_low=low,
        ci_high=high,
        p_value=mcnemar_exact(len(only_a), len(only_b)),
        flips={
            "resolved_only_in_a": {"count": len(only_a), "instance_ids": only_a},
            "resolved_only_in_b": {"count": len(only_b), "instance_ids": only_b},
        },
        image_mismatch=mismatch,
    )


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
