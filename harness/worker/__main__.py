"""An evaluation worker: `python -m harness.worker FD` serves the judge on the connection FD, where the fork
server cannot fork one; it calls `main(fd)` in each child it forks."""

import importlib
import os
import sys
from multiprocessing.connection import Connection

from .commands import Worker


def main(fd: int) -> None:
    importlib.import_module("torch._dynamo")  # before the first command, as in a fork of the server
    Worker(Connection(fd)).serve()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main(int(sys.argv[1]))
