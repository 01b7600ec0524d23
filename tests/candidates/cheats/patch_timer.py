"""Cheat (class 5 and 10): patches the clocks, the harness's own bound clock included, and the comparisons.

Each call also sleeps 20 ms of real time: the judge's clock can only accuse a call well over its IPC slack
(verdict.TIMER_BOUND) and over the scheduler's wake-up noise, which on a loaded 2-core host reached
milliseconds and hid a 2 ms call in 5 of about 14 runs."""

import sys
import time

import torch

_real = time.perf_counter_ns
_start = _real()


def _slow_clock():
    return _start + (_real() - _start) // 1000


time.perf_counter = lambda: _slow_clock() / 1e9
time.perf_counter_ns = _slow_clock
torch.allclose = lambda *a, **k: True
torch.equal = lambda *a, **k: True
for name, module in list(sys.modules.items()):
    if name.startswith("harness") and hasattr(module, "_perf_ns"):
        module._perf_ns = _slow_clock


class ModelNew(torch.nn.Module):
    def forward(self, token_hidden, expert_idx, slot_idx, expert_offsets):
        time.sleep(0.02)
        out = token_hidden.new_zeros((int(expert_offsets[-1]), token_hidden.shape[1]))
        out[expert_offsets.long()[expert_idx.long()] + slot_idx.long()] = token_hidden
        return out
