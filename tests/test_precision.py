"""--precision (KernelBench's option): every floating input and the models' weights are cast, for the reference
and the candidate alike; outputs are compared at that dtype's tolerance."""

import json
import textwrap

import pytest

PROBLEM = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)

    def forward(self, x, idx):
        return self.lin(x) + idx.sum()

def get_inputs(batch=8, n=16):
    return [torch.randn(batch, n), torch.randint(0, 3, (batch,))]

def get_init_inputs():
    return [16]
'''
SAME = '''
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)

    def forward(self, x, idx):
        assert x.dtype == self.lin.weight.dtype and not idx.is_floating_point(), (x.dtype, idx.dtype)
        return self.lin(x) + idx.sum()
'''
WIDENED = SAME.replace("return self.lin(x) + idx.sum()", "return (self.lin(x) + idx.sum()).float()")


@pytest.fixture(scope="module")
def runs(run_eval, tmp_path_factory):
    d = tmp_path_factory.mktemp("precision")
    for name, text in (("linear", PROBLEM), ("same", SAME), ("widened", WIDENED)):
        (d / f"{name}.py").write_text(textwrap.dedent(text))
    return {p: run_eval(d / "linear.py", "--device", "cpu", "--static-checks", "off", "--seeds", "2",
                        "--solution", str(d / "same.py"), str(d / "widened.py"), *(["--precision", p] if p else []))
            for p in (None, "bf16")}


def test_bf16_casts_floating_inputs_and_weights_for_both_sides(runs):
    res = runs["bf16"]
    assert res.rc == 0, res.stderr
    by = {r["solution"]: r for r in res.records}
    assert by["same"]["status"] == "correct", by["same"]
    assert by["widened"]["status"] == "incorrect" and "wrong_dtype" in by["widened"]["flags"]
    assert json.loads((res.out / "run.json").read_text())["config"]["check"]["precision"] == "bf16"


def test_as_written_without_the_option(runs):
    by = {r["solution"]: r for r in runs[None].records}
    assert by["same"]["status"] == "correct" and by["widened"]["status"] == "correct", runs[None].stderr
