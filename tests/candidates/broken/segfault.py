"""Broken: the process dies with a segmentation fault inside forward."""

import os
import signal

import torch


class ModelNew(torch.nn.Module):
    def forward(self, token_hidden, expert_idx, slot_idx, expert_offsets):
        os.kill(os.getpid(), signal.SIGSEGV)
        return token_hidden
