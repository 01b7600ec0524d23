"""Errors the CLI turns into one line on stderr and exit code 2."""


from pathlib import Path


class UsageError(Exception):
    """Bad command line, config or problem file: the run cannot start."""


def read_text(path: Path, what: str) -> str:
    """A file's UTF-8 text; else UsageError, one line naming the file and why (`what` it should have been)."""
    try:
        return Path(path).read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise UsageError(f"{path}: not a {what} (byte {e.start} is not UTF-8)") from None
    except OSError as e:
        raise UsageError(f"{path}: cannot be read: {e.strerror or e}") from None
