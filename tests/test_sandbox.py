"""The write sandbox of processes that run candidate code (harness.sandbox), applied in a child process."""

import json
import os
import subprocess
import sys

import pytest

from harness import sandbox

pytestmark = pytest.mark.skipif(sandbox.abi_version() < 1, reason="Landlock is not available on this kernel")


def attempt(tmp_path, protect, allow, paths) -> dict:
    """In a forked child: enter the sandbox, then try each write; what happened to each."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        res = {"applied": sandbox.restrict([str(p) for p in protect], [str(a) for a in allow])}
        for p in paths:
            try:
                with open(p, "a") as f:
                    f.write("forged\n")
                res[str(p)] = "written"
            except OSError as e:
                res[str(p)] = e.strerror
        sh = subprocess.run(["sh", "-c", f"echo forged >> {paths[0]}"], capture_output=True)
        res["child_process"] = sh.returncode
        try:
            os.kill(os.getppid(), 0)
            res["signal_parent"] = "sent"
        except OSError as e:
            res["signal_parent"] = e.strerror
        os.write(w, json.dumps(res).encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        data = f.read()
    os.waitpid(pid, 0)
    return json.loads(data)


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
