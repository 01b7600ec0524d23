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
    def forward(self, x, e, s, off):
        dest = off.long().index_select(0, e.long()).add_(s.long())
        return x.new_zeros((int(off[-1]), x.shape[1])).index_put_((dest,), x)
