"""Statistics over lists of times and speedups: pure functions, no I/O, used by the judge and the workers."""

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
    mean, cv = mean_cv(xs) if len(xs) >= 2 else (0.0, 0.0)
    return cv / math.sqrt(len(xs)) if mean > 0 else math.inf


def quantile_rse(sorted_xs: Sequence[float], q: float, z: float = 2.0) -> float:
    """Distribution-free relative standard error of the q-quantile: the order statistics z binomial standard
    deviations either side of rank n q, their spread over 2 z over the quantile; inf until both ranks exist
    (36 calls at q = 0.1, z = 2). Host hiccups inflate the mean's error but leave a low quantile alone."""
    n = len(sorted_xs)
    c, h = n * q, z * math.sqrt(n * q * (1 - q))
    lo, hi = math.floor(c - h), math.ceil(c + h)
    if n < 2 or lo < 0 or hi > n - 1:
        return math.inf
    mid = quantile(sorted_xs, q)
    return (sorted_xs[hi] - sorted_xs[lo]) / (2 * z * mid) if mid > 0 else math.inf


def summarize(times_us: Sequence[float]) -> Measurement:
    s = sorted(times_us)  # quantile raises on an empty list
    return Measurement(median_us=quantile(s, 0.5), iqr_us=quantile(s, 0.75) - quantile(s, 0.25), min_us=s[0],
                       mean_us=sum(s) / len(s), rse=rse(s), runs=len(s))


@dataclass(frozen=True)
class Round:
    """One paired round (us): the candidate's timed calls, then, with it stopped, short timings of the eager
    reference, of an empty launch (the host's phase) and of a copy of the same bytes."""

    reference: tuple[float, ...]
    candidate: tuple[float, ...]
    copy: tuple[float, ...] = ()
    launch: tuple[float, ...] = ()
    flush: tuple[float, ...] = ()  # with launches queued behind the flush: its length, on the reference's events

    def medians(self) -> dict:
        return {k: (round(quantile(sorted(v), 0.5), 3) if v else None)
                for k, v in (("reference_us", self.reference), ("time_us", self.candidate),
                             ("copy_us", self.copy), ("launch_us", self.launch))}


def pooled_ratio(num: Sequence[Sequence[float]], den: Sequence[Sequence[float]], q: float) -> float | None:
    """q-quantile of every call of one side over that of the other, each pooled over alternating rounds. The
    H200 host has phases (up to 4.7 s) in which host-bound times are up to 2.5 times as long; a low quantile
    reads each side in the fast phase: over 5 evaluations' raw times it gave speedup CVs of 4.2%, 3.7% and
    1.0% where the median of per-round ratios gave 14.2%, 3.5% and 2.7% (docs/methodology.md)."""
    a = sorted(x for xs in num for x in xs)
    b = sorted(x for xs in den for x in xs)
    if not a or not b:
        return None
    d = quantile(b, q)
    return quantile(a, q) / d if d > 0 else None


T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
"""Student t's 0.975 quantile for 1 to 30 degrees of freedom; 1.96 beyond."""


def ratio_interval(num: Sequence[Sequence[float]], den: Sequence[Sequence[float]], q: float,
                   center: float | None) -> tuple[float, float] | None:
    """95% interval of a pooled ratio (pooled_ratio) from its paired rounds: Student t over the rounds' own log
    ratios (each round's q-quantile over the other side's), centred on the pooled ratio. The rounds run apart in
    time, so their spread holds the host's drift as well as each round's sampling noise. None under 2 rounds."""
    logs = []
    for a, b in zip(num, den):
        if a and b and (qa := quantile(sorted(a), q)) > 0 and (qb := quantile(sorted(b), q)) > 0:
            logs.append(math.log(qa / qb))
    if len(logs) < 2 or not center:
        return None
    mean = sum(logs) / len(logs)
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1))
    half = (T975[len(logs) - 2] if len(logs) <= len(T975) + 1 else 1.96) * sd / math.sqrt(len(logs))
    return center * math.exp(-half), center * math.exp(half)


def measured_ratio_interval(num: Measurement, den: Measurement) -> tuple[float, float] | None:
    """95% interval of num's median over den's where no rounds exist: each side's relative standard error
    (Measurement.rse) combined in log space, normal approximation."""
    if num.median_us <= 0 or den.median_us <= 0 or not math.isfinite(num.rse) or not math.isfinite(den.rse):
        return None
    ratio, half = num.median_us / den.median_us, 1.96 * math.hypot(num.rse, den.rse)
    return ratio * math.exp(-half), ratio * math.exp(half)


def geomean(xs: Iterable[float | None]) -> float | None:
    vals = [x for x in xs if x is not None and x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in vals) / len(vals)) if vals else None


def fast_p(speedups: Sequence[float | None], p: float) -> float:
    """Share of entries that are correct (not None) and faster than p: KernelBench's fast_p. The judge passes
    each speedup's lower 95% bound, so a speedup counts only where its interval clears p."""
    return sum(1 for s in speedups if s is not None and s > p) / len(speedups) if speedups else 0.0


def mean_cv(xs: Sequence[float]) -> tuple[float, float]:
    """Mean and coefficient of variation (sample std / mean)."""
    n = len(xs)
    mean = sum(xs) / n
    if n < 2 or mean == 0:
        return mean, 0.0
    return mean, math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1)) / mean
