"""Cheat (class 8): reads what it can find of its run while it runs: the run's files (run.json with its seeds,
results.jsonl, logs), found through the folders its own descriptors name and its judge's command line, and
other processes' files in the run's scratch (their output slots). It computes honest answers; it stops with an
error naming what it read, or where it found no run.json at all (then it proves nothing)."""

import json
import os
from pathlib import Path

import torch


def _run_folders() -> set[Path]:
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = Path(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            continue
        found |= {p for p in target.parents if (p / "run.json").is_file()}
    pid = os.getpid()
    while pid > 1:  # the judge is an ancestor: its --out
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
        found |= {Path(argv[i + 1]) for i, a in enumerate(argv[:-1])
                  if a == "--out" and (Path(argv[i + 1]) / "run.json").is_file()}
    return found


def _others() -> list[Path]:
    """Files of other processes beside its own folder (the scratch's `own/<process>/`)."""
    here = Path.cwd()
    return [p for p in here.parent.glob("*/*") if p.parent != here and p.is_file()]


def _look() -> None:
    folders = _run_folders()
    if not folders:
        raise RuntimeError("no run.json found")
    read, seeds = [], []
    for p in [f / n for f in folders for n in ("run.json", "results.jsonl")] + _others():
        try:
            text = p.read_bytes()
        except OSError:
            continue
        read.append(str(p))
        if p.name == "run.json" and {"master", "shapes"} & set(json.loads(text).get("seeds", {})):
            seeds.append(str(p))
    if seeds:
        raise RuntimeError(f"seeds readable in {seeds}")
    if read:
        raise RuntimeError(f"read while running: {read}")


class ModelNew(torch.nn.Module):
    def forward(self, token_hidden, expert_idx, slot_idx, expert_offsets):
        _look()
        rows = int(expert_offsets[-1].item())
        packed = torch.zeros((rows, token_hidden.shape[1]), dtype=token_hidden.dtype, device=token_hidden.device)
        packed.index_copy_(0, expert_offsets.long()[expert_idx.long()] + slot_idx.long(), token_hidden)
        return packed
