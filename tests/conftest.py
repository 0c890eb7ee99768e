"""Shared test set-up. Keep it small: per-module fixtures live in their test files."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def pytest_collection_modifyitems(items):
    """The files holding a test marked ``slow`` first, each file's tests in their own order.
    pytest-xdist hands whole files to its workers in this order (setup.cfg), so the long files
    start at once and the short ones, last, even out where the two workers end."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)  # stable: the order is kept within
