#!/usr/bin/env python3
"""Evaluate kernel candidates against a reference: python run_eval.py CONFIG [--solution FILE ...]."""

import sys

from harness.judge.cli import main

if __name__ == "__main__":
    sys.exit(main())
