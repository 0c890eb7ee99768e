"""Our CPU kernels (keras_transformer/layers/cpu_kernels.py) at the vector widths this CPU does not pick.

A build carries an AVX-512, an AVX2 and a baseline version of its loops and runs the one the CPU
allows, so the tests of tests/test_dropout.py and tests/test_loss.py check one version per machine.
Here each other version is built alone (``-DKT_CLONES=`` with its ``-march``, into a folder of its
own) and those tests' kernel checks run against it in a process of their own: dropout bit for bit
against TensorFlow's ops, the loss's softmax against float64. (A float32 sum that was exact enough
at AVX-512's width lost 1e-5 of the softmax's normaliser at AVX2's.)
"""

import os
import platform
import subprocess
import sys

import pytest

# CPU flags each -march level needs, as /proc/cpuinfo names them.
LEVELS = {"x86-64-v3": {"avx2", "fma", "bmi2", "f16c", "movbe", "abm"}, "x86-64": set()}
CHECKS = "(softmax_rows_against_float64 and cpu_kernel) or bit_for_bit"


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as stream:
            line = next(line for line in stream if line.startswith("flags"))
    except (OSError, StopIteration):
        return None
    return set(line.split(":", 1)[1].split())


@pytest.mark.slow
@pytest.mark.parametrize("level", sorted(LEVELS))
def test_every_vector_width_gives_the_same_numbers(level, tmp_path, cpu_kernels_built):
    flags = cpu_flags()
    if platform.machine() != "x86_64" or flags is None:
        pytest.skip("the versions are x86-64's")
    if not LEVELS[level] <= flags:
        pytest.skip(f"this CPU cannot run {level} code")
    from keras_transformer.layers import cpu_kernels

    compiler = os.environ.get("CXX") or "c++"
    env = {**os.environ, "CXX": f"{compiler} -DKT_CLONES= -march={level}",
           "KERAS_TRANSFORMER_CACHE": str(tmp_path / "cache")}
    env.pop(cpu_kernels.SWITCH, None)
    tests = os.path.dirname(os.path.abspath(__file__))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
         os.path.join(tests, "test_loss.py"), os.path.join(tests, "test_dropout.py"),
         "-k", CHECKS], env=env, capture_output=True, text=True, timeout=900)
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else result.stderr
    assert result.returncode == 0, result.stdout[-4000:]
    assert " passed" in summary and "skipped" not in summary, summary
    # The build is the one asked for: one library, in this test's folder.
    assert [name for name in os.listdir(tmp_path / "cache") if name.endswith(".so")], summary
