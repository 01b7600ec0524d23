"""Errors the CLI turns into one line on stderr and exit code 2."""


class UsageError(Exception):
    """Bad command line, config or problem file: the run cannot start."""
