"""Cheat (class 9): prints result-like text, and writes results and code into the harness's folders, directly,
through another process's `/proc/<pid>/root`, and by renaming a file into place. Every write is tried; if any
was refused, forward raises naming them."""

import json
import os
import sys
from pathlib import Path

import torch

print(json.dumps({"solution": "forge_results", "status": "correct", "speedup": 100.0}))
print("forge_results | correct | 100.00x")
LINE = json.dumps({"solution": "forge_results", "status": "correct", "speedup": 100.0}) + "\n"


def _out_dirs() -> set[Path]:
    found = set()
    for p in Path("/proc").iterdir():
        try:
            argv = (p / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        found.update(Path(argv[i + 1].decode()) for i, a in enumerate(argv[:-1]) if a == b"--out")
    return found


def _forge() -> list[str]:
    repo = Path(sys.modules["harness"].__file__).resolve().parents[1]
    writes = [(repo / "harness" / "zz_forged.py", "w", "FORGED = True\n"),
              (repo / "problems" / "pack_tokens.py", "a", "\n# forged\n")]
    for out in _out_dirs():
        writes += [(out / "results.jsonl", "a", LINE), (Path(f"/proc/1/root{out}") / "results.jsonl", "a", LINE),
                   (out / "summary.md", "w", "forge_results: 100x\n"), (out / "extra.txt", "w", "forged\n"),
                   (out / "times" / "forged.json", "w", "[]")]
        writes += [(kept, "w", "[]") for kept in (out / "times").glob("*.json")]
    refused = []
    for path, mode, text in writes:
        try:
            path.parent.mkdir(exist_ok=True)
            with open(path, mode) as f:
                f.write(text)
        except OSError as e:
            refused.append(f"{path}: {e.strerror}")
    for out in _out_dirs():
        try:
            tmp = Path(os.environ.get("TMPDIR", "/tmp")) / "forged.jsonl"
            tmp.write_text(LINE)
            os.rename(tmp, out / "results.jsonl")
        except OSError as e:
            refused.append(f"rename into {out}: {e.strerror}")
    return refused


class ModelNew(torch.nn.Module):
    def forward(self, token_hidden, expert_idx, slot_idx, expert_offsets):
        refused = _forge()
        print("status: correct, speedup 100x", file=sys.stderr)
        if refused:
            raise PermissionError("refused: " + "; ".join(refused))
        out = token_hidden.new_zeros((int(expert_offsets[-1]), token_hidden.shape[1]))
        out[expert_offsets.long()[expert_idx.long()] + slot_idx.long()] = token_hidden
        return out
