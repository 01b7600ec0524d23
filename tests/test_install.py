"""`pip install .` gives `import harness` from any folder and a `kbharness` command equal to run_eval.py."""

import os
import shutil
import subprocess
import sys

import pytest

from conftest import REPO


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    pytest.importorskip("setuptools")
    src, target = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("site")
    for item in ("pyproject.toml", "README.md", "harness"):  # a copy: the build leaves nothing in the checkout
        (shutil.copytree if (REPO / item).is_dir() else shutil.copy)(REPO / item, src / item)
    p = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                        "--target", str(target), str(src)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return target


def run(installed, tmp_path, *argv):
    env = {**os.environ, "PYTHONPATH": str(installed)}
    return subprocess.run(list(argv), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def test_import_from_another_folder_finds_the_installed_package(installed, tmp_path):
    p = run(installed, tmp_path, sys.executable, "-c", "import harness; print(harness.__file__)")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().startswith(str(installed))


def test_the_console_command_is_run_eval(installed, tmp_path):
    cmd = str(installed / "bin" / "kbharness")
    helped = run(installed, tmp_path, sys.executable, cmd, "--help")
    assert helped.returncode == 0 and "--problems" in helped.stdout and "--solution" in helped.stdout
    bad = run(installed, tmp_path, sys.executable, cmd, "absent.yaml")
    assert bad.returncode == 2 and bad.stderr.strip() == "run_eval.py: error: absent.yaml: config file not found"
    assert not (installed / "results").exists()  # an installed harness writes beside the caller, not into site
