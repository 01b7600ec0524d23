"""Code that runs in the processes the judge starts: evaluation workers, builds, the fork server and the header
build.

Evaluation workers and builds import candidate code, so nothing in them is trusted, this package's own code
included: what they send the judge is evidence it checks, never a verdict. Entry points: `python -m
harness.worker FD` (an evaluation worker), `harness.worker.build_main` (a build), `harness.worker.forkserver_main`
(the fork server, which runs no candidate code and forks the other two) and `harness.worker.extcache --pch`
(torch's precompiled header, made by the judge).
"""
