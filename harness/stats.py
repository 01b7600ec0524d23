"""Statistics over lists of times and speedups: pure functions, no I/O."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Measurement:
    """One timing summary; median, spread and run count always travel together."""

    median_us: float
    iqr_us: float
    min_us: float
    mean_us: float
    rse: float
    runs: int

    def to_json(self) -> dict:
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def quantile(sorted_xs: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile of an already sorted, non-empty sequence."""
    if not sorted_xs:
        raise ValueError("quantile of an empty sequence")
    pos = (len(sorted_xs) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


def rse(xs: Sequence[float]) -> float:
    """Relative standard error of the mean; inf until two samples exist."""
    n = len(xs)
    if n < 2:
        return math.inf
    mean = sum(xs) / n
    if mean <= 0:
        return math.inf
    var = sum((x - mean) ** 2 for x in xs) / (n - 1)
    return math.sqrt(var / n) / mean


def summarize(times_us: Sequence[float]) -> Measurement:
    if not times_us:
        raise ValueError("no times to summarize")
    s = sorted(times_us)
    return Measurement(
        median_us=quantile(s, 0.5),
        iqr_us=quantile(s, 0.75) - quantile(s, 0.25),
        min_us=s[0],
        mean_us=sum(s) / len(s),
        rse=rse(s),
        runs=len(s),
    )


def converged(times_us: Sequence[float], target_rse: float, min_runs: int) -> bool:
    return len(times_us) >= min_runs and rse(times_us) <= target_rse


def paired_ratio(pairs: Sequence[tuple[Sequence[float], Sequence[float]]]) -> float | None:
    """Median over pairs of (median of the first / median of the second), each pair timed back to back:
    a host that slows both for a while (seen on the H200 host: every host-bound time x1.8 for seconds)
    moves the pair together, so the ratio holds where the two pooled medians would not. Speedup:
    (reference, candidate) pairs; time over a copy: (candidate, copy)."""
    ratios = []
    for num, den in pairs:
        if num and den:
            d = quantile(sorted(den), 0.5)
            if d > 0:
                ratios.append(quantile(sorted(num), 0.5) / d)
    return quantile(sorted(ratios), 0.5) if ratios else None


def geomean(xs: Iterable[float | None]) -> float | None:
    vals = [x for x in xs if x is not None and x > 0 and math.isfinite(x)]
    if not vals:
        return None
    return math.exp(sum(math.log(x) for x in vals) / len(vals))


def ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or den <= 0:
        return None
    return num / den


def fast_p(speedups: Sequence[float | None], p: float) -> float:
    """Share of entries that are correct (not None) and faster than p: KernelBench's fast_p."""
    if not speedups:
        return 0.0
    return sum(1 for s in speedups if s is not None and s > p) / len(speedups)


def mean_cv(xs: Sequence[float]) -> tuple[float, float]:
    """Mean and coefficient of variation (sample std / mean)."""
    n = len(xs)
    mean = sum(xs) / n
    if n < 2 or mean == 0:
        return mean, 0.0
    std = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    return mean, std / mean
