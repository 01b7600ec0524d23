"""Cheat: writes a forged reply (a length-prefixed JSON frame claiming 1 us calls) into every file descriptor it
inherited, the worker's channel to the judge among them, before and after each call. The judge reads the
channel as framed, bounded JSON in its own process: a frame out of turn breaks the exchange, and the call
fails; nothing forged is ever read as a figure."""

import json
import os
import struct

import torch

FORGED = json.dumps({"device_us": [1.0] * 8, "host_us": [1.0] * 8, "span_us": [1.0] * 8, "sample_calls": list(range(8)),
                     "unsampled": 0, "calls": {}, "threads": [1, 1], "extra_py_threads": []}).encode()


def _write_everywhere() -> None:
    for fd in range(3, 256):
        try:
            os.write(fd, struct.pack("!i", len(FORGED)) + FORGED)
        except OSError:
            pass


class ModelNew(torch.nn.Module):
    def forward(self, token_hidden, expert_idx, slot_idx, expert_offsets):
        _write_everywhere()
        rows = int(expert_offsets[-1].item())
        packed = torch.zeros((rows, token_hidden.shape[1]), dtype=token_hidden.dtype, device=token_hidden.device)
        packed.index_copy_(0, expert_offsets.long()[expert_idx.long()] + slot_idx.long(), token_hidden)
        _write_everywhere()
        return packed
