"""Cheat (class 8): looks for its run's run.json while it runs (through the folders its own descriptors name
and its judge's command line), to read the master seed that every later seed derives from. It computes honest
answers; it stops with an error naming what it found where a master seed is readable, or where it found no
run.json at all (then it proves nothing)."""

import json
import os
from pathlib import Path

import torch


def _run_jsons() -> set[Path]:
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = Path(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            continue
        found |= {p / "run.json" for p in target.parents if (p / "run.json").is_file()}
    pid = os.getpid()
    while pid > 1:  # the judge is an ancestor: its --out
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
        found |= {Path(argv[i + 1]) / "run.json" for i, a in enumerate(argv[:-1])
                  if a == "--out" and (Path(argv[i + 1]) / "run.json").is_file()}
    return found


def _look() -> None:
    paths = _run_jsons()
    if not paths:
        raise RuntimeError("no run.json found")
    for p in paths:
        seeds = json.loads(p.read_text()).get("seeds", {})
        if "master" in seeds or "shapes" in seeds:
            raise RuntimeError(f"seeds readable in {p}")


class ModelNew(torch.nn.Module):
    def forward(self, token_hidden, expert_idx, slot_idx, expert_offsets):
        _look()
        rows = int(expert_offsets[-1].item())
        packed = torch.zeros((rows, token_hidden.shape[1]), dtype=token_hidden.dtype, device=token_hidden.device)
        packed.index_copy_(0, expert_offsets.long()[expert_idx.long()] + slot_idx.long(), token_hidden)
        return packed
