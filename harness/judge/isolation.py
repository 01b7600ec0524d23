"""Users of their own for the processes that run candidate code (`--isolate`). A candidate may write wherever
the worker that imports it may: without this, into the shared build cache too, where a library planted under
another candidate's extension key would be loaded when that one is evaluated. With it, each build or evaluation
worker runs as a fresh uid with no supplementary groups and a private home (cwd, temp folder, caches, the
staging folder its builds go to); the judge (root) copies what a build staged into the cache. The reference
worker runs no candidate code and stays the judge's user."""

import atexit
import contextlib
import itertools
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError
from .forkserver import jit_cache_env

UID_BASE = 1_600_000_000
_uids = itertools.count(UID_BASE + (os.getpid() % 2**16) * 2**12)
_homes: list[Path] = []


@dataclass(frozen=True)
class Identity:
    uid: int
    home: Path

    @property
    def staging(self) -> Path:
        return self.home / "ext"

    def env(self) -> dict[str, str]:
        """Everything a worker or its tools would otherwise write under the judge's home or a shared /tmp."""
        h, name = str(self.home), f"kbh{self.uid}"
        return {"HOME": h, "TMPDIR": h, "USER": name, "LOGNAME": name, "XDG_CACHE_HOME": f"{h}/.cache",
                **jit_cache_env(self.home), "KBH_STAGING": str(self.staging)}

    def popen(self) -> dict:
        return {"user": self.uid, "group": self.uid, "extra_groups": [], "umask": 0o077}

    def end(self) -> None:
        """Kill every process left under this uid, a daemon out of the worker's group too; remove its home."""
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run([sys.executable, "-S", "-c", "import os, signal; os.kill(-1, signal.SIGKILL)"],
                           user=self.uid, group=self.uid, extra_groups=[], stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30, cwd="/")
        shutil.rmtree(self.home, ignore_errors=True)


def open_regular(path: str | Path):
    """A regular file opened for reading without following a link, for files in a folder candidate code can
    write (an output slot, a staging folder): the judge never reads another file on a candidate's behalf."""
    f = os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW), "rb")
    if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
        f.close()
        raise ValueError(f"{path} is not a regular file")
    return f


def check_available(repo_root: Path, folders: dict[str, Path], device: str = "cpu") -> None:
    """Refuse --isolate, in one line, where it cannot work: the judge is not root, a folder the workers open
    (the build cache, the output folder) has a folder on its way others cannot cross (no o+x), a GPU device
    node is closed to others, or another user cannot start this Python with the harness and torch."""
    if os.geteuid() != 0:
        raise UsageError("--isolate: the judge must run as root to start workers as other users")
    for what, path in folders.items():
        for folder in [*reversed(Path(path).resolve().parents), Path(path).resolve()]:
            if folder.is_dir() and not folder.stat().st_mode & 0o001:
                raise UsageError(f"--isolate: {what} {path} is closed to the workers' users ({folder} has "
                                 f"mode {folder.stat().st_mode & 0o777:o}; they need o+x on the way)")
    for node in sorted(Path("/dev").glob("nvidia*")) if device == "cuda" else ():
        if node.is_char_device() and node.stat().st_mode & 0o006 != 0o006:
            raise UsageError(f"--isolate: {node} is closed to other users (mode {node.stat().st_mode & 0o777:o}), "
                             "so their workers could not use the GPU")
    uid = next(_uids)
    probe = ("import importlib.util, harness.judge.isolation; "
             "assert importlib.util.find_spec('torch'), 'torch not found'")
    try:
        r = subprocess.run([sys.executable, "-c", probe], user=uid, group=uid, extra_groups=[], cwd="/",
                           env=dict(os.environ, PYTHONPATH=str(repo_root), HOME="/"),
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
        problem = r.stderr.strip().splitlines()[-1] if r.returncode else ""
    except (OSError, subprocess.SubprocessError) as e:
        problem = f"{type(e).__name__}: {e}"
    if problem:
        raise UsageError(f"--isolate: a process under another user cannot start {sys.executable} with the "
                         f"harness and torch ({problem})")


def homes_root() -> Path:
    """The folder of the identities' homes, others may cross but not list; inside the write sandbox's allowlist
    (each home is its own user's, 0700)."""
    if not _homes:
        root = Path(tempfile.mkdtemp(prefix="kbh-homes-"))
        root.chmod(0o711)
        _homes.append(root)
        atexit.register(shutil.rmtree, root, True)
    return _homes[0]


def new_identity() -> Identity:
    """A fresh uid and a home of its own (0700)."""
    uid = next(_uids)
    home = homes_root() / f"u{uid}"
    home.mkdir(mode=0o700)
    os.chown(home, uid, uid)
    return Identity(uid, home)


def open_to_workers(scratch: Path, copies: list[Path]) -> None:
    """Workers under other users reach the run's scratch folder and the candidates' private copies in it:
    the folders crossable but not listable, the copies readable; everything else there stays the judge's."""
    for folder in {scratch, *(c.parent for c in copies), *(c.parent.parent for c in copies)}:
        folder.chmod(0o711)
    for c in copies:
        c.chmod(0o644)
