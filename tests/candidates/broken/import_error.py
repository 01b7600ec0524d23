"""Broken: fails at import, before defining anything."""

import torch

raise RuntimeError("missing configuration for " + torch.__version__)
