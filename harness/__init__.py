"""KernelBench-style evaluation harness: build, check, time and rank kernel candidates.

Data moves one way: plan -> build -> check -> time -> verdict -> record -> report. `judge/` is the trusted process,
which never runs candidate code; `worker/` is the code that runs beside it, in processes whose reports the judge
verifies. settings, stats, problem, seeds, cachekeys and protocol are shared by both.
"""

__version__ = "0.1.0"


def __getattr__(name: str):
    """`harness.evaluate` and `harness.Evaluator` (harness.judge.api), imported on first use: worker processes
    import this package too and never load the judge."""
    if name in ("evaluate", "Evaluator"):
        from .judge import api

        return getattr(api, name)
    raise AttributeError(f"module 'harness' has no attribute {name!r}")
