"""Cheat (class 8): replaces the standard library's random.seed, which every draw calls first; its wrapper
finds the draw's frame, draws the same inputs itself and packs them before any clock starts, so forward is a
lookup. The harness seeds through functions it bound before the candidate's import, and the random module is
watched: the replacement is a patched runtime."""

import random
import sys

import torch

_ANSWERS: dict = {}
_seed = random.seed
_busy: list = []


def _pack(token_hidden, expert_idx, slot_idx, expert_offsets):
    out = token_hidden.new_zeros((int(expert_offsets[-1]), token_hidden.shape[1]))
    out[expert_offsets.long()[expert_idx.long()] + slot_idx.long()] = token_hidden
    return out


def _key(token_hidden):
    return tuple(token_hidden.shape), tuple(token_hidden.reshape(-1)[:4].float().tolist())


def seed(a=None, version=2):
    _seed(a, version)
    frame = sys._getframe(1)
    while frame is not None and not {"ns", "params", "seed", "device"} <= frame.f_locals.keys():
        frame = frame.f_back
    if frame is None or _busy:
        return
    f = frame.f_locals
    _busy.append(1)
    try:
        inputs = frame.f_globals["make_inputs"](f["ns"], f["params"], f["seed"], f["device"])
        _ANSWERS[_key(inputs[0])] = _pack(*inputs)
    finally:
        _busy.clear()
        _seed(a, version)


random.seed = seed


class ModelNew(torch.nn.Module):
    def forward(self, token_hidden, expert_idx, slot_idx, expert_offsets):
        found = _ANSWERS.get(_key(token_hidden))
        return found.clone() if found is not None else _pack(token_hidden, expert_idx, slot_idx, expert_offsets)
