"""KernelBench-style evaluation harness: build, check, time and rank kernel candidates.

Data moves one way: config -> plan -> build -> check -> time -> record -> report.
The judging process never runs candidate code; workers do.
"""

__version__ = "0.1.0"
