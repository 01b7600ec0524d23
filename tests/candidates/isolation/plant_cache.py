"""Plants a file in the build cache at import (in its build and in its evaluation), as a candidate would
plant a library under another candidate's extension key; prints what happened. Otherwise honest."""

import os

import torch

target = os.environ.get("KBH_TEST_PLANT")
if target:
    try:
        with open(os.path.join(target, f"planted-{os.getpid()}"), "w") as f:
            f.write("not the judge's")
        print("plant_cache: planted", flush=True)
    except OSError as e:
        print(f"plant_cache: {type(e).__name__}", flush=True)


class ModelNew(torch.nn.Module):
    def forward(self, token_hidden, expert_idx, slot_idx, expert_offsets):
        rows = int(expert_offsets[-1].item())
        packed = torch.zeros((rows, token_hidden.shape[1]), dtype=token_hidden.dtype, device=token_hidden.device)
        packed.index_copy_(0, expert_offsets.long()[expert_idx.long()] + slot_idx.long(), token_hidden)
        return packed
