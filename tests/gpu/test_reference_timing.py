"""The reference is timed as users time it: for a launch-bound, a cuBLAS-heavy and a bandwidth-bound problem, the
harness's figures (the record's eager reference, `--reference-only`'s baseline, and the reference's own code as a
candidate) agree within 5% with plain PyTorch timing (warm-up, L2 flushed, CUDA events, median) in a fresh
process with the user's environment. bench/reftime.py does the timing and prints the table."""

import subprocess
import sys

import pytest

from conftest import REPO

pytestmark = pytest.mark.gpu


def test_reference_timings_agree_with_plain_pytorch(tmp_path):
    p = subprocess.run([sys.executable, str(REPO / "bench" / "reftime.py"), "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=900, cwd=REPO)
    print(p.stdout)
    assert p.returncode == 0 and "reftime: PASS" in p.stdout, p.stdout[-4000:] + p.stderr[-2000:]
