"""Write sandbox of a process that runs candidate code (an evaluation worker, a build), applied before the
candidate is imported: Linux Landlock denies it any write beneath the protected paths (the harness's tree,
the run's results), by any route (`/proc/<pid>/root`, `/proc/<pid>/fd`, renames), for it and every process it
starts, and it cannot be lifted from inside. Landlock only grants, so the process is granted writes beneath
everything else: every sibling of each protected path and of its ancestors, and the allowed paths; or, as an
allowlist, only beneath the allowed paths (its scratch, TMPDIR and caches) and to device nodes.
Landlock also keeps it from tracing, or reading the memory of, processes outside the sandbox, and (ABI 6)
from signalling them: the judge, the fork server, the reference worker."""

import ctypes
import os
import platform

SYS_CREATE, SYS_ADD_RULE, SYS_RESTRICT = {"x86_64": (444, 445, 446), "aarch64": (444, 445, 446)}.get(
    platform.machine(), (None, None, None))
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH = 1
PR_SET_NO_NEW_PRIVS = 38
SCOPE_SIGNAL = 1 << 1
WRITE_FILE, TRUNCATE = 1 << 1, 1 << 14
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


def grants(protect: list[str], allow: list[str]) -> list[str]:
    """Every path to grant writes beneath: siblings of the protected paths and of their ancestors (none on the
    way to a protected path), and the allowed paths."""
    protect = [os.path.realpath(p) for p in protect]
    on_way = {a for p in protect for a in _ancestors(p)}
    found = set()
    for folder in sorted(on_way):
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        found.update(e.path for e in entries if e.path not in on_way and not e.is_symlink())
    found = {p for p in found if not any(p == q or p.startswith(q.rstrip("/") + "/") for q in protect)}
    return sorted(found | {os.path.realpath(a) for a in allow if os.path.exists(a)})


def allowed_only(allow: list[str]) -> list[str]:
    """An allowlist: writes only beneath the allowed paths and to the device nodes a process opens for writing
    (/dev/null, a GPU's), never in /dev itself nor /dev/shm, where other programs keep their files."""
    try:
        dev = [e.path for e in os.scandir("/dev") if e.name not in ("shm", "mqueue") and not e.is_symlink()]
    except OSError:
        dev = []
    return sorted({os.path.realpath(a) for a in allow if os.path.exists(a)} | set(dev))


def _err(what: str) -> OSError:
    n = ctypes.get_errno()
    return OSError(n, f"landlock {what}: {os.strerror(n)}")


def restrict(protect: list[str], allow: list[str], allowlist: bool = False) -> str:
    """Apply the sandbox to this process: writes everywhere but beneath `protect`, or with `allowlist` only
    beneath `allow` (allowed_only); what was applied, or raise OSError."""
    abi = abi_version()
    if abi < 1:
        raise OSError(38, "landlock is not available on this kernel")
    dir_rights = DIR_RIGHTS | (REFER if abi >= 2 else 0) | (TRUNCATE if abi >= 3 else 0)
    file_rights = FILE_RIGHTS | (TRUNCATE if abi >= 3 else 0)
    attr = RulesetAttr(dir_rights, 0, SCOPE_SIGNAL if abi >= 6 else 0)
    size = ctypes.sizeof(RulesetAttr) if abi >= 6 else 8
    ruleset = _libc.syscall(SYS_CREATE, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        raise _err("create_ruleset")
    try:
        for path in allowed_only(allow) if allowlist else grants(protect, allow):
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                rights = dir_rights if os.path.isdir(path) else file_rights
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
