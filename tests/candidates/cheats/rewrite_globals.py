"""Cheat (class 12): computes the right answer, slowly, and answers the judge's clock honestly, but swaps the
`json` module the worker's module encodes its replies with (a module global, no callable replaced) for one
that divides reported times by 3. Slow: 20 ms a call on the CPU, where the judge's clock cannot resolve less."""

import json
import sys
import time
import types

import torch


def _dumps(obj, *a, **k):
    if isinstance(obj, dict):
        obj = dict(obj)
        for key in ("device_us", "host_us", "span_us"):
            if isinstance(obj.get(key), list):
                obj[key] = [x / 3 for x in obj[key]]
    return json.dumps(obj, *a, **k)


_shim = types.SimpleNamespace(dumps=_dumps, loads=json.loads)


class ModelNew(torch.nn.Module):
    def forward(self, token_hidden, expert_idx, slot_idx, expert_offsets):
        for name, module in list(sys.modules.items()):
            if name.startswith("harness.worker") and getattr(module, "json", None) is json:
                module.json = _shim
        if token_hidden.device.type == "cpu":
            time.sleep(0.02)
        out = token_hidden.new_zeros((int(expert_offsets[-1]), token_hidden.shape[1]))
        out[expert_offsets.long()[expert_idx.long()] + slot_idx.long()] = token_hidden
        return out
