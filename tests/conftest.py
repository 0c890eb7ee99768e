"""Shared test set-up. Keep it small: per-module fixtures live in their test files."""

import os
import shutil
import tempfile

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


@pytest.fixture
def system_temporary(tmp_path, monkeypatch):
    """An empty folder standing in for the system's temporary folder (``tempfile``'s) during the
    test: what the code leaves behind there shows in it."""
    folder = tmp_path / "system_temporary"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


@pytest.fixture
def autograph_conversions(monkeypatch):
    """The Python functions handed to autograph during the test, as ``module.qualified_name``:
    a ``tf.function`` traced with autograph on passes its function to ``converted_call``, and
    the converted code each function it calls."""
    from tensorflow.python.autograph.impl import api

    handed, convert = [], api.converted_call

    def recording(function, *args, **kwargs):
        target = getattr(function, "func", function)  # a functools.partial's function
        handed.append(f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', '?')}")
        return convert(function, *args, **kwargs)

    monkeypatch.setattr(api, "converted_call", recording)
    return handed


@pytest.fixture
def cpu_kernels_built():
    """Our CPU kernels' ops module (keras_transformer/layers/cpu_kernels.py), for tests that hold
    them against TensorFlow's ops. Skips only where they are switched off or there is no C++
    compiler (setup.sh installs one where it can): with one, kernels that do not build or load
    are a failure, not a skip."""
    from keras_transformer.layers import cpu_kernels

    if cpu_kernels.switched_off():
        pytest.skip(f"{cpu_kernels.SWITCH}=0 switches our CPU kernels off")
    compiler = cpu_kernels.compile_command(os.devnull)[0]
    if shutil.which(compiler) is None:
        pytest.skip(f"no C++ compiler ({compiler}) here to build our CPU kernels")
    kernels = cpu_kernels.ops()
    assert kernels is not None, \
        f"{compiler} did not build or load our CPU kernels (the warning above says why)"
    return kernels


def pytest_collection_modifyitems(items):
    """The files holding a test marked ``slow`` first, each file's tests in their own order.
    pytest-xdist hands whole files to its workers in this order (setup.cfg), so the long files
    start at once and the short ones, last, even out where the two workers end."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)  # stable: the order is kept within
