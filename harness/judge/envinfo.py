"""What run.json records about the machine and the code, gathered without touching the GPU."""

import os
import platform
import re
import subprocess
import sys
from pathlib import Path


def command_output(cmd: list[str], cwd: Path | None = None) -> str:
    """The command's output; "" when it is missing, times out or fails (nvidia-smi prints its errors there)."""
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20, cwd=cwd)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def gpu_arch_hint() -> str | None:
    """The compute capability all GPUs report through nvidia-smi, or None: builds start while the reference
    workers still create their CUDA contexts (about 10 s on the H200); the runner checks it against torch."""
    caps = set(command_output(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"]).split())
    return caps.pop() if len(caps) == 1 and re.fullmatch(r"\d+\.\d+", next(iter(caps))) else None


def host_info(repo: Path) -> dict:
    import torch

    driver = command_output(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]).splitlines()
    commit = command_output(["git", "rev-parse", "HEAD"], repo)
    dirty = command_output(["git", "status", "--porcelain", "--untracked-files=no"], repo)
    return {"python": sys.version.split()[0], "platform": platform.platform(),
            "cpu_cores": len(os.sched_getaffinity(0)), "torch": torch.__version__,
            "torch_cuda": torch.version.cuda, "driver": driver[0] if driver else "",
            "git_commit": f"{commit}{'+dirty' if dirty else ''}" if commit else "unknown"}


def process_age_s() -> float | None:
    """Seconds since this process started (Linux): what the run's timeline counts from, imports included."""
    try:
        start_ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(uptime - start_ticks / os.sysconf("SC_CLK_TCK"), 0.0)
    except (OSError, ValueError, IndexError):
        return None
