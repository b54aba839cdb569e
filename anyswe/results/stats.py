"""Small, exact statistics for resolve rates: Wilson intervals, paired bootstrap, exact McNemar."""

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
