"""The worker's timed commands (mixed into `commands.Worker`): loops on fresh inputs, graph replays, and calls
the judge times with its own clock."""

from typing import Any

import torch

from ..protocol import OVERWRITTEN
from ..seeds import derive
from ..settings import LoopSettings
from . import clocks
from .feed import TimedFeed
from .outputs import BadOutput, HarnessError, plain_outputs, poison
from .watch import native_threads


class _Floor(torch.nn.Module):
    """A floor's stand-in, called as a candidate's module is. launch: the thinnest candidate, one one-element
    kernel; launch_read: an output shape that depends on device data, one value read to the host, one launch;
    copy: `nbytes` (half read, half written) copied into a fresh output, as a candidate allocates its own."""

    def __init__(self, kind: str, nbytes: int, device: str):
        super().__init__()
        self.one = torch.zeros(1, device=device)
        if kind == "copy":
            self.src = torch.empty(max(nbytes // 2, 1), dtype=torch.uint8, device=device).random_()
        self.forward = {"launch": self.launch, "launch_read": self.launch_read, "copy": self.copy}[kind]

    def launch(self) -> torch.Tensor:
        return self.one.add_(1)

    def launch_read(self) -> torch.Tensor:
        self.one.item()
        return self.one.add_(1)

    def copy(self) -> torch.Tensor:
        return torch.empty_like(self.src).copy_(self.src)


def _calls_json(calls: dict[int, Any]) -> dict[str, list | str]:
    return {str(i): c if c == OVERWRITTEN else [x.tolist() if isinstance(x, torch.Tensor) else x for x in c]
            for i, c in calls.items()}


class TimedCommands:
    def _fixed_buffers(self, base_seed: int) -> tuple[list, Any]:
        """Call 0's inputs as fixed buffers, and refill(i): copies call i's in, says whether it is sampled."""
        feed = TimedFeed(self, base_seed, None)
        bufs, _ = feed.take(0)
        tensor_idx = [j for j, x in enumerate(bufs) if isinstance(x, torch.Tensor)]

        def refill(i: int) -> bool:
            if i == 0:
                return True
            new, counted = feed.take(i)
            for j, x in enumerate(new):
                if j in tensor_idx:
                    if x.shape != bufs[j].shape or x.dtype != bufs[j].dtype:
                        raise HarnessError("get_inputs returned inputs of different shapes for different "
                                           "seeds; timing refills fixed buffers and needs fixed input shapes")
                    bufs[j].copy_(x)
                else:
                    bufs[j] = x
            return counted

        return bufs, refill

    def cmd_time(self, frames, base_seed: int, loop: dict, verify: bool, projection: bool = False,
                 compiled: bool = False, floor: str | None = None, floor_bytes: int = 0) -> dict:
        """A floor's stand-in ignores the inputs but runs the same loop, batches and verification, so the
        floor carries the same between-call costs."""
        model = self.compiled if compiled else self.model
        if floor is not None:
            stand_in = _Floor(floor, floor_bytes, self.device)
            model = lambda *_: stand_in()  # noqa: E731
        feed = TimedFeed(self, base_seed, projection if verify else None, draw=floor is None)
        current: list = []

        def step(i: int):
            args, counted = feed.take(i)
            current[:] = [args]
            return (lambda: model(*args)), counted

        threads_before = native_threads()
        with self.quiet():
            samples, unsampled = clocks.run_loop(self.clock, step, lambda _: None,
                                                 lambda i, out, _: feed.hold(i, current[0], out),
                                                 LoopSettings(**loop), self.guard)
            with self.guard():
                feed.settle()
        return {"device_us": [s.device_us for s in samples], "host_us": [s.host_us for s in samples],
                "span_us": [s.span_us for s in samples], "launch_us": [s.launch_us for s in samples],
                "sample_calls": [s.call for s in samples],
                "unsampled": unsampled, "calls": _calls_json(feed.calls),
                "threads": [threads_before, native_threads()], "extra_py_threads": self.extra_threads()}

    def cmd_warm(self, frames, base_seed: int, calls: int, compiled: bool = False) -> dict:
        """Untimed first calls (torch.compile compiles in the first)."""
        model = self.compiled if compiled else self.model
        for i in range(calls):
            model(*self.inputs(derive(base_seed, i)))
        self.sync()
        return {}

    def cmd_graph(self, frames, base_seed: int, loop: dict, projection: bool = False) -> dict:
        """Device time without launch gaps: replays of one captured call, each verified after its end."""
        if self.device != "cuda":
            return {"graph_ok": False, "message": "graphs need CUDA"}
        bufs, refill = self._fixed_buffers(base_seed)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                self.model(*bufs)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                static_out = self.model(*bufs)
            plain_outputs(static_out)
        except BadOutput:
            raise
        except Exception as e:
            torch.cuda.synchronize()
            return {"graph_ok": False, "message": f"capture failed: {type(e).__name__}: {str(e)[:300]}"}
        tensors = [x for x in bufs if isinstance(x, torch.Tensor)]
        calls: dict[int, tuple] = {}

        def after(_: Any):
            outs = plain_outputs(static_out)
            exact = self.fp.exact_many(outs + tensors)
            projs = torch.stack([self.fp.projection(o) for o in outs]) if projection else None
            return outs, exact[:len(outs)], projs, exact[len(outs):]

        def on_call(i: int, out: Any, extra: Any) -> None:
            outs, fps, projs, ins = extra
            calls[i] = (fps, projs, ins)
            poison(outs)

        samples, unsampled = clocks.run_loop(self.clock, lambda i: (graph.replay, refill(i)), after, on_call,
                                             LoopSettings(**loop), self.guard)
        return {"graph_ok": True, "device_us": [s.device_us for s in samples], "unsampled": unsampled,
                "calls": _calls_json(calls)}

    def cmd_judge_timed(self, frames, rounds: int, projection: bool = False) -> dict:
        """Calls the judge times with its own clock: ready -> go with a seed -> draw, call (or not), full sync,
        fingerprints -> done. The inputs exist only once the clock runs, and the fingerprints prove the answer
        was there when it stopped. A no-op draws and fingerprints an output of the same shape."""
        template: list[tuple] = []
        for k in range(rounds):
            self.clock.flush()
            self.sync()
            self.send({"ready": k})
            go = self.recv()
            with self.guard():
                args = self.inputs(int(go.get("seed", 0)))
            if go.get("go") == "call":
                out = self.model(*args)
                with self.guard():
                    outs = plain_outputs(out)
                    template = [(o.shape, o.dtype) for o in outs]
            else:
                outs = [torch.empty(shape, dtype=dtype, device=self.device) for shape, dtype in template]
            self.sync()
            with self.guard():
                ins = [x for x in args if isinstance(x, torch.Tensor)]
                exact = self.fp.exact_many(outs + ins).tolist()
                projs = torch.stack([self.fp.projection(o) for o in outs]).tolist() if projection and outs else None
                poison(outs + ins)
            self.send({"done": k, "fp": [exact[:len(outs)], projs, exact[len(outs):]]})
        return {}
