"""Cheat (class 8): assumes the harness seeds with 42, as many do, and serves answers precomputed for it."""

import importlib.util
import sys
from pathlib import Path

import torch

_repo = Path(sys.modules["harness"].__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("pt_problem", _repo / "problems" / "pack_tokens.py")
_answers = {}


def _precomputed(shape_key, kwargs):
    if shape_key not in _answers:
        problem = importlib.util.module_from_spec(_spec)
        _spec.loader.exec_module(problem)
        torch.manual_seed(42)
        inputs = problem.get_inputs(**kwargs)
        _answers[shape_key] = problem.Model()(*inputs)
    return _answers[shape_key]


class ModelNew(torch.nn.Module):
    def forward(self, token_hidden, expert_idx, slot_idx, expert_offsets):
        n, h = token_hidden.shape
        kwargs = {"num_tokens": n, "hidden_dim": h, "num_experts": expert_offsets.numel() - 1,
                  "dtype": str(token_hidden.dtype).replace("torch.", "")}
        return _precomputed((n, h), kwargs).clone()
