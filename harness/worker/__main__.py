"""Entry point of an evaluation worker: `python -m harness.worker FD` serves the judge on the connection FD.

The fork server calls `main(fd)` in each child it forks; a worker that cannot be forked starts this way."""

import importlib
import os
import sys
from multiprocessing.connection import Connection


def main(fd: int) -> None:
    from .commands import Worker

    importlib.import_module("torch._dynamo")  # before the first command, as in a fork of the server
    Worker(Connection(fd)).serve()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main(int(sys.argv[1]))
