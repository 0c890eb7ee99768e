"""Shared test set-up. Keep it small: per-module fixtures live in their test files."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
