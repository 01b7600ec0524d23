"""Cheat (class 12): computes the right answer, then reaches the worker that reports on it through the call
stack and garbles the fingerprints its replies carry (each call's output fingerprints become a number, not a
list). A judge whose comparison raises on them records a fault of its own and verifies no timed call; decoded
where they arrive (protocol.Fingerprints), each garbled call is a wrong answer."""

import inspect

import torch


def _worker():
    """The first caller whose `self` has a connection and a send: the worker serving this call."""
    for info in inspect.stack(context=0)[1:]:
        owner = info.frame.f_locals.get("self")
        if hasattr(owner, "conn") and callable(getattr(owner, "send", None)):
            return owner
    return None


def _garble(fp):
    return [7, fp[1], fp[2]] if isinstance(fp, list) and len(fp) == 3 else fp


def _rig(w) -> None:
    if w is None or "send" in vars(w):
        return
    send = w.send

    def forged_send(obj):
        if isinstance(obj.get("calls"), dict):
            obj["calls"] = {k: _garble(v) for k, v in obj["calls"].items()}
        if "fp" in obj:
            obj["fp"] = _garble(obj["fp"])
        send(obj)

    w.send = forged_send


class ModelNew(torch.nn.Module):
    def forward(self, token_hidden, expert_idx, slot_idx, expert_offsets):
        _rig(_worker())
        out = token_hidden.new_zeros((int(expert_offsets[-1]), token_hidden.shape[1]))
        out[expert_offsets.long()[expert_idx.long()] + slot_idx.long()] = token_hidden
        return out
