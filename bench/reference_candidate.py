"""The bundled problem's own reference as the candidate (torch only: run it with --static-checks off). Its true
speedup is 1, so how often its interval clears 1 is the false fast_1 rate (bench/stability.py)."""

from problems.pack_tokens import Model


class ModelNew(Model):
    pass
