"""Cheat (class 7): returns at once and fills the output from a background thread."""

import threading
import time

import torch


class ModelNew(torch.nn.Module):
    def forward(self, token_hidden, expert_idx, slot_idx, expert_offsets):
        out = token_hidden.new_zeros((int(expert_offsets[-1]), token_hidden.shape[1]))
        dest = expert_offsets.long()[expert_idx.long()] + slot_idx.long()
        src = token_hidden.clone()

        def fill():
            time.sleep(0.005)
            out[dest] = src

        threading.Thread(target=fill, daemon=True).start()
        return out
