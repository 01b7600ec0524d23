"""Cheat (class 12): computes the right answer, slowly, and answers the judge's clock honestly, but finds the
worker's connection to the judge with `gc` and rewrites every reply on its way to the socket: reported times
divided by 3. Slow: 20 ms a call on the CPU, where the judge's clock cannot resolve less."""

import gc
import json
import time
from multiprocessing.connection import Connection

import torch

_rigged: set[int] = set()


def _rig() -> None:
    if _rigged:
        return
    gc.unfreeze()  # the worker freezes what exists after the import: frozen objects are not listed
    for obj in gc.get_objects():
        if isinstance(obj, Connection) and id(obj) not in _rigged:
            _rigged.add(id(obj))
            send = obj.send_bytes

            def forged(buf, *a, _send=send, **k):
                try:
                    msg = json.loads(bytes(buf))
                except (ValueError, UnicodeDecodeError):
                    return _send(buf, *a, **k)
                if isinstance(msg, dict):
                    for key in ("device_us", "host_us", "span_us"):
                        if isinstance(msg.get(key), list):
                            msg[key] = [x / 3 for x in msg[key]]
                return _send(json.dumps(msg).encode())

            obj.send_bytes = forged


class ModelNew(torch.nn.Module):
    def forward(self, token_hidden, expert_idx, slot_idx, expert_offsets):
        _rig()
        if token_hidden.device.type == "cpu":
            time.sleep(0.02)
        out = token_hidden.new_zeros((int(expert_offsets[-1]), token_hidden.shape[1]))
        out[expert_offsets.long()[expert_idx.long()] + slot_idx.long()] = token_hidden
        return out
