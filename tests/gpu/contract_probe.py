"""Calls the fast kernel with inputs outside its contract, one case per line of output (run as a
subprocess by test_fast_kernel.py, so a crash fails that test instead of ending the session)."""

import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from harness.worker.build_main import import_on_this_gpu  # noqa: E402

CASES = {
    "int64 index": lambda x, e, s, o: (x, e.long(), s, o),
    "cpu token_hidden": lambda x, e, s, o: (x.cpu(), e, s, o),
    "3-D token_hidden": lambda x, e, s, o: (x.unsqueeze(0), e, s, o),
    "cpu slot_idx": lambda x, e, s, o: (x, e, s.cpu(), o),
    "short expert_idx": lambda x, e, s, o: (x, e[:-1], s, o),
}


def main() -> None:
    path = sys.argv[2] if len(sys.argv) > 2 else str(REPO / "solutions" / "pack_tokens" / "fast_vec16.py")
    module = import_on_this_gpu(path, sys.argv[1])
    kernel = module.ModelNew()
    x = torch.randn(100, 32, device="cuda")
    e = torch.randint(0, 4, (100,), device="cuda", dtype=torch.int32)
    s = torch.zeros(100, device="cuda", dtype=torch.int32)
    o = torch.tensor([0, 100, 200, 300, 400], device="cuda", dtype=torch.int32)
    calls = [(name, kernel, mutate) for name, mutate in CASES.items()]
    calls.append(("3-D token_hidden, extension called directly", module.pack_ext.pack_tokens, CASES["3-D token_hidden"]))
    for name, fn, mutate in calls:
        print(f"{name}: calling", flush=True)
        try:
            fn(*mutate(x, e, s, o))
            print(f"{name}: no error", flush=True)
        except (RuntimeError, ValueError) as err:
            print(f"{name}: raised {str(err).splitlines()[0]}", flush=True)
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
