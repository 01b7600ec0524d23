"""The judge: the trusted process (`run_eval.py`). It plans, builds through build processes, drives the reference
and candidate workers, compares outputs, decides verdicts (verdict.py), and writes records and reports. It never
runs candidate code and trusts nothing a worker process sends beyond what it verifies.
"""
