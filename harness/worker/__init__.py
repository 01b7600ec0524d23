"""Code run in the processes the judge starts. Evaluation workers and builds import candidate code, so nothing in
them is trusted, this package included: what they send is evidence the judge checks, never a verdict. Entry
points: `python -m harness.worker FD` (an evaluation worker), `build_main` (a build), `forkserver_main` (the fork
server: runs no candidate code, forks the other two) and `extcache --pch` (torch's precompiled header, made by the
judge)."""
