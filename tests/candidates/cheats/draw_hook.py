"""Cheat (class 8): wraps get_inputs in the worker's problem namespace, found through the collector, so every
draw also packs its answer, before any clock starts; forward is a lookup. The draw the harness runs comes from
what it read before the candidate's import, and the namespace is watched: a replaced entry is a patched runtime."""

import functools
import gc

import torch

_ANSWERS: dict = {}


def _pack(token_hidden, expert_idx, slot_idx, expert_offsets):
    out = token_hidden.new_zeros((int(expert_offsets[-1]), token_hidden.shape[1]))
    out[expert_offsets.long()[expert_idx.long()] + slot_idx.long()] = token_hidden
    return out


def _key(token_hidden, expert_idx):
    return token_hidden.data_ptr(), expert_idx.data_ptr(), tuple(token_hidden.shape)


def _hook(ns: dict) -> None:
    draw = ns["get_inputs"]

    @functools.wraps(draw)
    def get_inputs(*args, **kwargs):
        inputs = draw(*args, **kwargs)
        _ANSWERS[_key(inputs[0], inputs[1])] = _pack(*inputs)
        return inputs

    get_inputs.hooked = True
    ns["get_inputs"] = get_inputs


for _obj in gc.get_objects():
    if isinstance(_obj, dict) and "get_inputs" in _obj and "Model" in _obj and not hasattr(_obj["get_inputs"], "hooked"):
        _hook(_obj)


class ModelNew(torch.nn.Module):
    def forward(self, token_hidden, expert_idx, slot_idx, expert_offsets):
        found = _ANSWERS.pop(_key(token_hidden, expert_idx), None)
        return found if found is not None else _pack(token_hidden, expert_idx, slot_idx, expert_offsets)
