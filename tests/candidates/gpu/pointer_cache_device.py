"""Cheat (class 1, GPU): caches outputs on the device, keyed by the input's device pointer."""

import torch

_cache = {}


class ModelNew(torch.nn.Module):
    def forward(self, token_hidden, expert_idx, slot_idx, expert_offsets):
        key = token_hidden.data_ptr()
        hit = _cache.get(key)
        if hit is not None:
            return hit
        out = torch.zeros((int(expert_offsets[-1]), token_hidden.shape[1]), dtype=token_hidden.dtype,
                          device=token_hidden.device)
        out[expert_offsets.long()[expert_idx.long()] + slot_idx.long()] = token_hidden
        _cache[key] = out
        return out
