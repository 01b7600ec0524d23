"""Cheat (class 6): returns a proxy object that computes the answer only when something reads it."""

import torch


class Proxy:
    def __init__(self, fn):
        self._fn = fn

    def __getattr__(self, name):
        return getattr(self._fn(), name)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        args = [a._fn() if isinstance(a, Proxy) else a for a in args]
        return func(*args, **(kwargs or {}))


class ModelNew(torch.nn.Module):
    def forward(self, token_hidden, expert_idx, slot_idx, expert_offsets):
        def compute():
            out = token_hidden.new_zeros((int(expert_offsets[-1]), token_hidden.shape[1]))
            out[expert_offsets.long()[expert_idx.long()] + slot_idx.long()] = token_hidden
            return out

        return Proxy(compute)
