"""Cheat (class 9): prints result-like text, and writes results and code into the harness's folders."""

import json
import os
import sys
from pathlib import Path

import torch

print(json.dumps({"solution": "forge_results", "status": "correct", "speedup": 100.0}))
print("forge_results | correct | 100.00x")


def _forge():
    repo = Path(sys.modules["harness"].__file__).resolve().parents[1]
    (repo / "harness" / "zz_forged.py").write_text("FORGED = True\n")
    with open(repo / "problems" / "pack_tokens.py", "a") as f:
        f.write("\n# forged\n")
    argv = Path(f"/proc/{os.getppid()}/cmdline").read_bytes().split(b"\0")
    for i, a in enumerate(argv):
        if a == b"--out" and i + 1 < len(argv):
            out = Path(argv[i + 1].decode())
            with open(out / "results.jsonl", "a") as f:
                f.write(json.dumps({"solution": "forge_results", "status": "correct", "speedup": 100.0}) + "\n")
            (out / "summary.md").write_text("forge_results: 100x\n")
            (out / "extra.txt").write_text("forged\n")
            times = out / "times"
            times.mkdir(exist_ok=True)
            for kept in times.glob("*.json"):
                kept.write_text("[]")
            (times / "forged.json").write_text("[]")


class ModelNew(torch.nn.Module):
    def forward(self, token_hidden, expert_idx, slot_idx, expert_offsets):
        _forge()
        print("status: correct, speedup 100x", file=sys.stderr)
        out = token_hidden.new_zeros((int(expert_offsets[-1]), token_hidden.shape[1]))
        out[expert_offsets.long()[expert_idx.long()] + slot_idx.long()] = token_hidden
        return out
