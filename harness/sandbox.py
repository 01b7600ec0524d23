"""Sandbox of a process that runs candidate code (an evaluation worker, a build), applied before the candidate
is imported: Linux Landlock denies it any write beneath the protected paths (the harness's tree, the run's
results), and any file read beneath the hidden ones (the run's folder, other runs', other workers' folders), by
any route (`/proc/<pid>/root`, `/proc/<pid>/fd`, renames), for it and every process it starts, and it cannot be
lifted from inside. Landlock only grants, so the process is granted writes beneath everything else: every
sibling of each protected path and of its ancestors, and the allowed paths; or, as an allowlist, only beneath
the allowed paths (its scratch, TMPDIR and caches, less what is protected inside them) and to device nodes.
Reads are granted the same way around the hidden paths, and beneath the paths it may see (its own folder).
Folder listings stay open: names are no secret, file contents are.
Landlock also keeps it from tracing, or reading the memory of, processes outside the sandbox, and (ABI 6)
from signalling them: the judge, the fork server, the reference worker."""

import ctypes
import glob
import os
import platform
import tempfile

SYS_CREATE, SYS_ADD_RULE, SYS_RESTRICT = {"x86_64": (444, 445, 446), "aarch64": (444, 445, 446)}.get(
    platform.machine(), (None, None, None))
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH = 1
PR_SET_NO_NEW_PRIVS = 38
SCOPE_SIGNAL = 1 << 1
WRITE_FILE, READ_FILE, TRUNCATE = 1 << 1, 1 << 2, 1 << 14
FILE_RIGHTS = WRITE_FILE  # rights a rule on a file (not a folder) may hold, TRUNCATE from ABI 3
DIR_RIGHTS = WRITE_FILE | sum(1 << b for b in range(4, 13))  # remove dir/file, make char/dir/reg/sock/fifo/block/sym
REFER = 1 << 13


class RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


_libc = ctypes.CDLL(None, use_errno=True)


def abi_version() -> int:
    """Landlock's ABI version on this kernel; 0 where it is missing or disabled."""
    if SYS_CREATE is None:
        return 0
    v = _libc.syscall(SYS_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(CREATE_RULESET_VERSION))
    return max(v, 0)


def _ancestors(path: str) -> list[str]:
    out = []
    while True:
        parent = os.path.dirname(path)
        if parent == path:
            return out
        out.append(parent)
        path = parent


def _beneath(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def complement(excluded: list[str], root: str = "/") -> list[str]:
    """The paths beneath root that together cover everything there but the excluded paths: the siblings of
    each excluded path and of its ancestors up to root (none on the way to an excluded path); [root] where none
    is beneath it."""
    root = os.path.realpath(root)
    excluded = [p for p in map(os.path.realpath, excluded) if _beneath(p, root)]
    if not excluded:
        return [root]
    on_way = {a for p in excluded for a in _ancestors(p) if _beneath(a, root)}
    found = set()
    for folder in sorted(on_way):
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        found.update(e.path for e in entries if e.path not in on_way and not e.is_symlink())
    return sorted(p for p in found if not any(_beneath(p, q) for q in excluded))


def _allowed(allow: list[str], protect: list[str]) -> set[str]:
    """The allowed paths, less the protected paths inside them (an allowed path inside a protected one stays)."""
    return {p for a in allow if os.path.exists(a) for p in complement(list(protect), a)}


def grants(protect: list[str], allow: list[str]) -> list[str]:
    """Every path to grant writes beneath: everything but the protected paths, and the allowed paths."""
    return sorted(set(complement(protect)) | _allowed(allow, protect))


def allowed_only(allow: list[str], protect: list[str] = ()) -> list[str]:
    """An allowlist: writes only beneath the allowed paths (less what is protected inside them) and to the
    device nodes a process opens for writing (/dev/null, a GPU's), never in /dev itself nor /dev/shm, where
    other programs keep their files."""
    try:
        dev = [e.path for e in os.scandir("/dev") if e.name not in ("shm", "mqueue") and not e.is_symlink()]
    except OSError:
        dev = []
    return sorted(_allowed(allow, protect) | set(dev))


def rules(protect: list[str], allow: list[str], allowlist: bool, hide: list[str], see: list[str],
          write_dir: int, write_file: int) -> dict[str, int]:
    """Each path to add a rule for, with the rights it grants: writes (by `grants` or `allowed_only`), and
    with `hide`, file reads everywhere but beneath the hidden paths, and beneath the seen ones. A hidden
    pattern (other runs' scratch folders) is matched now, when the process enters the sandbox, less the
    allowed paths it matches (this run's)."""
    out: dict[str, int] = {}
    for path in allowed_only(allow, protect) if allowlist else grants(protect, allow):
        out[path] = write_dir if os.path.isdir(path) else write_file
    mine = {os.path.realpath(a) for a in allow}
    hide = [h for h in hide if not glob.has_magic(h)] + [
        p for h in hide if glob.has_magic(h) for p in glob.glob(h) if os.path.realpath(p) not in mine]
    if hide:
        for path in set(complement(hide)) | _allowed(see, []):
            out[path] = out.get(path, 0) | READ_FILE
    return out


OWN = "own"
"""The folder, beneath each scratch folder of a run, of the folders of its own each process that runs candidate
code gets (own_folder): protected and hidden from the others (harness.judge.guard.write_sandbox)."""


def own_folder(scratch: str | os.PathLike) -> str:
    """A new folder for one process that runs candidate code: its cwd, TMPDIR and output slots."""
    return tempfile.mkdtemp(dir=os.path.join(scratch, OWN))


def with_own(spec: dict | None, folder: str | os.PathLike) -> dict | None:
    """A run's sandbox for one process: its own folder to write and to read as well."""
    if spec is None:
        return None
    return dict(spec, allow=[*spec["allow"], str(folder)], see=[*spec.get("see", ()), str(folder)])


def _err(what: str) -> OSError:
    n = ctypes.get_errno()
    return OSError(n, f"landlock {what}: {os.strerror(n)}")


def restrict(protect: list[str], allow: list[str], allowlist: bool = False, hide: list[str] = (),
             see: list[str] = ()) -> str:
    """Apply the sandbox to this process: writes everywhere but beneath `protect`, or with `allowlist` only
    beneath `allow` (allowed_only); with `hide`, no file read beneath the hidden paths but beneath `see`; what
    was applied, or raise OSError."""
    abi = abi_version()
    if abi < 1:
        raise OSError(38, "landlock is not available on this kernel")
    dir_rights = DIR_RIGHTS | (REFER if abi >= 2 else 0) | (TRUNCATE if abi >= 3 else 0)
    file_rights = FILE_RIGHTS | (TRUNCATE if abi >= 3 else 0)
    attr = RulesetAttr(dir_rights | (READ_FILE if hide else 0), 0, SCOPE_SIGNAL if abi >= 6 else 0)
    size = ctypes.sizeof(RulesetAttr) if abi >= 6 else 8
    ruleset = _libc.syscall(SYS_CREATE, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        raise _err("create_ruleset")
    try:
        for path, rights in rules(protect, allow, allowlist, list(hide), list(see), dir_rights, file_rights).items():
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                rule = PathBeneathAttr(rights, fd)
                if _libc.syscall(SYS_ADD_RULE, ruleset, RULE_PATH_BENEATH, ctypes.byref(rule), ctypes.c_uint32(0)):
                    raise _err(f"add_rule {path}")
            finally:
                os.close(fd)
        if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0):
            raise _err("no_new_privs")
        if _libc.syscall(SYS_RESTRICT, ruleset, ctypes.c_uint32(0)):
            raise _err("restrict_self")
    finally:
        os.close(ruleset)
    return f"landlock ABI {abi}"
