"""The write sandbox of processes that run candidate code (harness.sandbox), applied in a child process."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness import sandbox
from harness.judge.guard import write_sandbox

pytestmark = pytest.mark.skipif(sandbox.abi_version() < 1, reason="Landlock is not available on this kernel")


def in_child(work) -> dict:
    """work() in a forked child (where the sandbox it enters stays); what it returned."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.write(w, json.dumps(work()).encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        data = f.read()
    os.waitpid(pid, 0)
    return json.loads(data)


def _writes(paths: list) -> dict:
    res = {}
    for p in paths:
        try:
            with open(p, "a") as f:
                f.write("forged\n")
            res[str(p)] = "written"
        except OSError as e:
            res[str(p)] = e.strerror
    return res


def attempt(tmp_path, protect, allow, paths) -> dict:
    """In a forked child: enter the sandbox, then try each write; what happened to each."""
    def work():
        res = {"applied": sandbox.restrict([str(p) for p in protect], [str(a) for a in allow]), **_writes(paths)}
        sh = subprocess.run(["sh", "-c", f"echo forged >> {paths[0]}"], capture_output=True)
        res["child_process"] = sh.returncode
        try:
            os.kill(os.getppid(), 0)
            res["signal_parent"] = "sent"
        except OSError as e:
            res["signal_parent"] = e.strerror
        return res
    return in_child(work)


@pytest.fixture
def tree(tmp_path):
    repo = tmp_path / "repo"
    (repo / "harness").mkdir(parents=True)
    (repo / "harness" / "mod.py").write_text("X = 1\n")
    (repo / "results" / "run").mkdir(parents=True)
    (repo / "results" / "run" / "results.jsonl").write_text("{}\n")
    (repo / ".cache").mkdir()
    (tmp_path / "elsewhere").mkdir()
    return repo


def test_protected_files_refuse_writes_by_every_route(tree, tmp_path):
    results = tree / "results" / "run" / "results.jsonl"
    paths = [tree / "harness" / "mod.py", results, tree / "harness" / "new.py", tree / "new.txt",
             f"/proc/1/root{results}", f"/proc/{os.getpid()}/root{results}"]
    res = attempt(tmp_path, [tree], [], paths)
    assert res["applied"].startswith("landlock")
    for p in paths:
        assert res[str(p)] == "Permission denied", (p, res)
    assert res["child_process"] != 0
    assert (tree / "harness" / "mod.py").read_text() == "X = 1\n"
    assert results.read_text() == "{}\n"
    assert not (tree / "harness" / "new.py").exists() and not (tree / "new.txt").exists()


def test_writes_elsewhere_and_in_allowed_folders_still_work(tree, tmp_path):
    ok = [tree / ".cache" / "ext.so", tmp_path / "elsewhere" / "f.txt", "/dev/null"]
    res = attempt(tmp_path, [tree], [tree / ".cache"], ok)
    for p in ok:
        assert res[str(p)] == "written", (p, res)
    assert (tree / ".cache" / "ext.so").read_text().startswith("forged\n")


@pytest.mark.skipif(sandbox.abi_version() < 6, reason="signal scoping needs Landlock ABI 6")
def test_a_sandboxed_process_cannot_signal_the_judge(tree, tmp_path):
    res = attempt(tmp_path, [tree], [], [tree / "harness" / "mod.py"])
    assert res["signal_parent"] == "Operation not permitted"
    unsandboxed = subprocess.run([sys.executable, "-c", f"import os; os.kill({os.getpid()}, 0)"])
    assert unsandboxed.returncode == 0


def reads(spec: dict, paths: list, before: Path | None = None) -> dict:
    """In a forked child: open `before` (a log the judge hands it), enter the sandbox, then try to read each
    path, the open descriptor again through /proc/self/fd, and list the folder of the first path."""
    def work():
        held = os.open(before, os.O_WRONLY | os.O_APPEND) if before else None
        res = {"applied": sandbox.restrict(**spec)}
        for p in paths + ([f"/proc/self/fd/{held}"] if held is not None else []):
            try:
                with open(p, "rb") as f:
                    f.read()
                res[str(p)] = "read"
            except OSError as e:
                res[str(p)] = e.strerror
        res["listed"] = sorted(os.listdir(os.path.dirname(paths[0])))
        return res
    return in_child(work)


def test_hidden_files_refuse_reads_by_every_route_but_its_own_folder_and_the_rest_stay_readable(tree, tmp_path):
    run, scratch = tree / "results" / "run", tmp_path / "scratch"
    for name in ("mine", "other"):
        (scratch / "own" / name).mkdir(parents=True)
        (scratch / "own" / name / "out.bin").write_bytes(b"answer")
    (scratch / "src").mkdir()
    (scratch / "src" / "cand.py").write_text("X = 2\n")
    log = run / "cand.log"
    log.write_text("")
    spec = sandbox.with_own({"protect": [str(tree)], "allow": [str(scratch)], "hide": [str(run), str(scratch / "own")]},
                            scratch / "own" / "mine")
    hidden = [run / "results.jsonl", f"/proc/self/root{run}/results.jsonl", scratch / "own" / "other" / "out.bin"]
    readable = [scratch / "own" / "mine" / "out.bin", scratch / "src" / "cand.py", tree / "harness" / "mod.py"]
    res = reads(spec, hidden + readable, before=log)
    assert res["applied"].startswith("landlock")
    for p in hidden:
        assert res[str(p)] == "Permission denied", (p, res)
    assert [v for k, v in res.items() if k.startswith("/proc/self/fd/")] == ["Permission denied"]
    for p in readable:
        assert res[str(p)] == "read", (p, res)
    assert res["listed"] == ["cand.log", "results.jsonl"]


def test_a_pattern_hides_other_runs_scratch_but_never_the_process_own(tree, tmp_path):
    ours, theirs = tmp_path / "kbh-scratch-ours", tmp_path / "kbh-scratch-theirs"
    for folder in (ours, theirs):
        folder.mkdir()
        (folder / "slot.bin").write_bytes(b"x")
    spec = {"protect": [str(tree)], "allow": [str(ours)], "hide": [str(tmp_path / "kbh-scratch-*")]}
    res = reads(spec, [theirs / "slot.bin", ours / "slot.bin"])
    assert res[str(theirs / "slot.bin")] == "Permission denied" and res[str(ours / "slot.bin")] == "read", res


@pytest.mark.parametrize("strict", [False, True])
def test_the_runs_sandbox_lets_each_process_write_where_its_files_go(tree, tmp_path, strict):
    """Without `strict`, workers and builds share the scratch folder and make their files in it; with it, each
    writes in its own folder and never in another's."""
    scratch = tmp_path / "kbh-scratch-x"
    (scratch / sandbox.OWN).mkdir(parents=True)
    mine, other = sandbox.own_folder(scratch), sandbox.own_folder(scratch)
    spec, _ = write_sandbox(tree, tree / "results" / "run", tree / ".cache" / "kbh", scratch, strict=strict)
    spec = sandbox.with_own(spec, mine if strict else scratch)
    res = in_child(lambda: {"applied": sandbox.restrict(**spec), **_writes(
        [scratch / "out-1.0.bin", Path(mine) / "out-1.0.bin", Path(other) / "out-1.0.bin"])})
    assert res["applied"].startswith("landlock")
    assert res[str(Path(mine) / "out-1.0.bin")] == "written"
    assert res[str(scratch / "out-1.0.bin")] == ("Permission denied" if strict else "written")
    assert res[str(Path(other) / "out-1.0.bin")] == ("Permission denied" if strict else "written")
