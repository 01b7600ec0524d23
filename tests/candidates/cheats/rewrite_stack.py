"""Cheat (class 12): computes the right answer, slowly, then reaches the worker that reports on it through the
call stack and rewrites it through instance attributes (no class or module attribute changes): the times it
reports are divided by 3, and the judge's own clock is answered without calling the model (every "call" it
is told to make becomes a no-op). Slow: 20 ms a call on the CPU, where the judge's clock cannot resolve less."""

import sys
import time

import torch


def _worker():
    f = sys._getframe(1)
    while f is not None:
        s = f.f_locals.get("self")
        if s is not None and all(hasattr(s, a) for a in ("conn", "send", "recv")):
            return s
        f = f.f_back
    return None


def _rig(w) -> None:
    if w is None or "send" in vars(w):
        return
    send, recv = w.send, w.recv

    def forged_send(obj):
        for key in ("device_us", "host_us", "span_us"):
            if isinstance(obj.get(key), list):
                obj[key] = [x / 3 for x in obj[key]]
        send(obj)

    def forged_recv():
        msg = recv()
        if msg.get("go") == "call":
            msg["go"] = "noop"
        return msg

    w.send, w.recv = forged_send, forged_recv


class ModelNew(torch.nn.Module):
    def forward(self, token_hidden, expert_idx, slot_idx, expert_offsets):
        _rig(_worker())
        if token_hidden.device.type == "cpu":
            time.sleep(0.02)
        out = token_hidden.new_zeros((int(expert_offsets[-1]), token_hidden.shape[1]))
        out[expert_offsets.long()[expert_idx.long()] + slot_idx.long()] = token_hidden
        return out
