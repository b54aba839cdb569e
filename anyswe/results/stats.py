"""Small, exact statistics for resolve rates: Wilson intervals, paired bootstrap, exact McNemar, and
their clustered forms for several samples per instance.

Samples of one instance are correlated (an easy instance is resolved in most samples on both
sides), so with several samples the *instance* is the unit: the bootstrap resamples instances and
the paired test flips the sign of per-instance mean differences. Both work from per-instance
aggregates (sum of differences, number of pairs), never from a resamples x pairs matrix, so their
cost grows with the number of instances, not of rows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

#: z for a two-sided 95% interval
Z95 = 1.959963984540054


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion; (0, 1) when n is 0."""
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value: a binomial test of b successes in b + c discordant pairs at 1/2."""
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    tail: float = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2.0 * tail)


def paired_bootstrap(
    a: Sequence[int], b: Sequence[int], *, resamples: int = 10_000, seed: int = 0, level: float = 0.95
) -> tuple[float, float, float]:
    """(delta, low, high): mean(b) - mean(a) and its percentile interval over resampled pairs."""
    import numpy as np

    if len(a) != len(b):
        raise ValueError("paired samples must have the same length")
    if not a:
        return 0.0, 0.0, 0.0
    diff = np.asarray(b, dtype=float) - np.asarray(a, dtype=float)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(diff), size=(resamples, len(diff)))
    means = diff[idx].mean(axis=1)
    alpha = (1 - level) / 2
    low, high = np.quantile(means, [alpha, 1 - alpha])
    return float(diff.mean()), float(low), float(high)


def cluster_bootstrap(
    sums: Sequence[float],
    counts: Sequence[int],
    *,
    resamples: int = 10_000,
    seed: int = 0,
    level: float = 0.95,
    chunk: int = 1000,
) -> tuple[float, float, float]:
    """(delta, low, high) for clustered pairs: ``sums[i]`` is the sum of (b - a) over instance i's
    pairs, ``counts[i]`` their number. Instances are resampled with replacement (``chunk`` resamples
    at a time, as index draws), and each resample's delta is its pooled mean difference."""
    import numpy as np

    s = np.asarray(sums, dtype=float)
    n = np.asarray(counts, dtype=float)
    if len(s) != len(n):
        raise ValueError("sums and counts must have the same length")
    if len(s) == 0 or n.sum() == 0:
        return 0.0, 0.0, 0.0
    rng = np.random.default_rng(seed)
    m = len(s)
    # The same draws and the same figures, cheaper: integer sums (exact, as float sums of integers
    # are) gathered from the smallest integer type that holds them, and with one count for every
    # instance (one sample each, the usual case) no gather of counts at all. At 10,000 tasks the
    # gathers were most of the report's comparison.
    top = float(np.abs(s).max())
    whole = bool(np.all(s == np.trunc(s))) and top < 2**31
    small = s.astype(np.int8 if top < 128 else np.int32) if whole else s
    same = float(n[0]) * m if bool(np.all(n == n[0])) else None
    deltas = np.empty(resamples)
    for start in range(0, resamples, chunk):
        k = min(chunk, resamples - start)
        idx = rng.integers(0, m, size=(k, m), dtype=np.int32)
        total = small[idx].sum(axis=1, dtype=np.int64 if whole else np.float64)
        deltas[start : start + k] = total / (np.maximum(n[idx].sum(axis=1), 1.0) if same is None else max(same, 1.0))
    alpha = (1 - level) / 2
    low, high = np.quantile(deltas, [alpha, 1 - alpha])
    return float(s.sum() / n.sum()), float(low), float(high)


def sign_flip_test(diffs: Sequence[float], *, resamples: int = 10_000, seed: int = 0, chunk: int = 1000) -> float:
    """Two-sided paired permutation p-value for per-instance differences ``diffs`` (sums or means of
    b - a; exact up to 16 non-zero instances, Monte Carlo with ``resamples`` sign patterns beyond)."""
    import numpy as np

    d = np.asarray([x for x in diffs if x != 0], dtype=float)
    if len(d) == 0:
        return 1.0
    observed = abs(d.sum()) - 1e-12
    if len(d) <= 16:
        signs = ((np.arange(2 ** len(d))[:, None] >> np.arange(len(d))) & 1) * 2 - 1
        return float(np.mean(np.abs(signs @ d) >= observed))
    rng = np.random.default_rng(seed)
    hits = 0
    for start in range(0, resamples, chunk):
        k = min(chunk, resamples - start)
        signs = rng.integers(0, 2, size=(k, len(d))) * 2 - 1
        hits += int(np.sum(np.abs(signs @ d) >= observed))
    return (hits + 1) / (resamples + 1)
