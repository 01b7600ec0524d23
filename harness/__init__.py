"""KernelBench-style evaluation harness: build, check, time and rank kernel candidates.

Data moves one way: plan -> build -> check -> time -> verdict -> record -> report. `judge/` is the trusted process,
which never runs candidate code; `worker/` is the code that runs beside it, in processes whose reports the judge
verifies. settings, stats, problem, seeds, cachekeys and protocol are shared by both.
"""

__version__ = "0.1.0"
