"""Our CPU kernels (keras_transformer/layers/cpu_kernels.py) together in a model's training step,
at the vector widths this CPU does not pick, and as the other C++ compilers installed build them.

A build carries an AVX-512, an AVX2 and a baseline version of its loops and runs the one the CPU
allows, so the tests of tests/test_dropout.py, tests/test_loss.py and tests/test_layer_norm.py
check one version per machine. Here each other version is built alone (``-DKT_VERSIONS=0`` with its
``-march``, into a folder of its own) and those tests' kernel checks run against it in a process
of their own: dropout bit for bit against TensorFlow's ops, the loss's softmax and LayerNorm
against float64. (A float32 sum that was exact enough at AVX-512's width lost 1e-5 of the
softmax's normaliser at AVX2's.)
"""

import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.layers import cpu_kernels

# CPU flags each -march level needs, as /proc/cpuinfo names them.
LEVELS = {"x86-64-v3": {"avx2", "fma", "bmi2", "f16c", "movbe", "abm"}, "x86-64": set()}
CHECKS = ("((softmax_rows_against_float64 or layer_norm_against_float64) and cpu_kernel)"
          " or bit_for_bit")
KERNEL_OPS = {"KerasTransformerDropoutKeep", "KerasTransformerApplyKeep",
              "KerasTransformerSoftmaxRows", "KerasTransformerLayerNorm",
              "KerasTransformerLayerNormGrad"}


def test_a_model_trains_the_same_with_our_kernels_as_with_tensorflow_ops(monkeypatch,
                                                                         cpu_kernels_built):
    """One training step of a small model with every kernel of ours and with none: the same loss
    and the same new weights (up to the order in which a graph may sum the same numbers)."""
    from keras_transformer.config import TransformerConfig
    from keras_transformer.training.schedule import paper_optimizer
    from keras_transformer.training.step import TrainStep
    from keras_transformer.weights import build_model

    source = tf.constant(np.random.default_rng(2).integers(3, 64, size=(8, 12)), tf.int32)
    target = tf.constant(np.random.default_rng(3).integers(3, 64, size=(8, 13)), tf.int32)
    batch = ((source, target[:, :-1]), target[:, 1:])

    def one_step(precision):
        keras.utils.set_random_seed(0)
        config = TransformerConfig.from_preset("tiny", vocab_size=64, dropout_rate=0.3)
        model = build_model(config, precision)
        optimizer = paper_optimizer(config.d_model)
        optimizer.build(model.trainable_variables)
        step = TrainStep(model, optimizer, label_smoothing=0.1)
        loss = float(step.step_on_batches((batch,))["loss_sum"])
        return loss, [v.numpy() for v in model.trainable_variables], step

    for precision in ("float32", "bfloat16"):
        loss, weights, step = one_step(precision)
        ops = {op.type for f in step._forward_backward._list_all_concrete_functions()
               for op in f.graph.get_operations()}
        assert KERNEL_OPS <= ops, KERNEL_OPS - ops
        with monkeypatch.context() as patch:
            patch.setattr(cpu_kernels, "ops", lambda: None)
            reference_loss, reference, _ = one_step(precision)
        assert loss == pytest.approx(reference_loss, rel=1e-6)
        for ours, theirs in zip(weights, reference):
            np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


def test_a_label_outside_the_classes_is_an_error_not_a_read_outside_the_row(cpu_kernels_built):
    logits = tf.zeros([2, 5])
    for label in (5, -1):
        with pytest.raises(tf.errors.InvalidArgumentError, match=r"outside \[0, classes\)"):
            cpu_kernels_built.keras_transformer_softmax_rows(logits, tf.constant([0, label]),
                                                             at_label=1.0)


def test_a_new_build_removes_the_builds_no_process_loaded_for_a_month(tmp_path, monkeypatch):
    """The cache keeps one library per source, TensorFlow version and compiler; each load marks
    its build as used, and a new build removes the others unused for ``UNUSED_DAYS`` and what a
    killed build left a day ago or more, and nothing else."""
    day = 86400
    ages = {"cpu_kernels-unused.so": cpu_kernels.UNUSED_DAYS * day + 60,
            "cpu_kernels-used_last_week.so": 7 * day,
            "tmp_killed.so.partial": cpu_kernels.PARTIAL_DAYS * day + 60,
            "tmp_building_now.so.partial": 60,
            "notes.txt": 400 * day}
    for name, age in ages.items():
        (tmp_path / name).write_text(name)
        os.utime(tmp_path / name, (time.time() - age,) * 2)
    # The build itself (a "compiler" that writes its output) is not what this test is about.
    monkeypatch.setattr(cpu_kernels, "compile_command", lambda output: [
        sys.executable, "-c", "import sys; open(sys.argv[1], 'w').write('built')", output])
    cpu_kernels._build(str(tmp_path / "cpu_kernels-new.so"))
    assert sorted(os.listdir(tmp_path)) == sorted(
        ["cpu_kernels-new.so", "cpu_kernels-used_last_week.so", "tmp_building_now.so.partial",
         "notes.txt"])


def test_loading_a_build_marks_it_used(monkeypatch, cpu_kernels_built):
    path = cpu_kernels.library_path()
    month_ago = time.time() - 31 * 86400
    os.utime(path, (month_ago, month_ago))
    monkeypatch.setattr(cpu_kernels, "ops", cpu_kernels.ops.__wrapped__)  # not the cached module
    assert cpu_kernels.ops() is not None
    assert os.path.getmtime(path) > time.time() - 600


@pytest.mark.slow
def test_the_avx2_version_vectorizes_every_loop_the_avx512_version_does(tmp_path, monkeypatch,
                                                                        cpu_kernels_built):
    """GCC's report of the loops it vectorized, built at x86-64-v4 (AVX-512) and at x86-64-v3
    (AVX2): the same lines of the source. A loop left scalar at one width is that CPU kind's
    kernel running several times slower, which no test of numbers sees (so it was with the
    softmax's exponentials at AVX2's width before -fno-trapping-math). The baseline version is
    not held to it: at SSE2's width GCC's cost model leaves some reductions scalar."""
    compiler = compiler_command()

    def ask(option):
        return subprocess.run([*shlex.split(compiler), option], capture_output=True,
                              text=True).stdout
    if platform.machine() != "x86_64" or "Free Software Foundation" not in ask("--version"):
        pytest.skip("the vectorization report is GCC's, the versions x86-64's")
    if int(ask("-dumpversion").split(".")[0]) < 11:
        pytest.skip("GCC before 11 knows no -march=x86-64-v4")
    # Each version's command from the CXX the test started with, before the loop changes it.
    versions = {level: one_version(level) for level in ("x86-64-v4", "x86-64-v3")}
    builds = {}
    for level, command in versions.items():
        report = tmp_path / f"{level}.txt"
        monkeypatch.setenv("CXX", f"{command} -fopt-info-vec-optimized={report}")
        builds[level] = (report, subprocess.Popen(
            cpu_kernels.compile_command(str(tmp_path / f"{level}.so")),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    lines = {}
    for level, (report, build) in builds.items():
        _, errors = build.communicate(timeout=600)
        assert build.returncode == 0, errors[-2000:]
        lines[level] = set(re.findall(r"cpu_kernels\.cc:(\d+):\d+: optimized: loop vectorized",
                                      report.read_text()))
    assert lines["x86-64-v4"], "GCC reported no vectorized loop at all"
    assert lines["x86-64-v3"] == lines["x86-64-v4"], (
        "vectorized at AVX-512's width only: cpu_kernels.cc lines "
        f"{sorted(lines['x86-64-v4'] - lines['x86-64-v3'], key=int)}; at AVX2's only: "
        f"{sorted(lines['x86-64-v3'] - lines['x86-64-v4'], key=int)}")


def compiler_command():
    return os.environ.get("CXX") or "c++"


def one_version(level):
    """The compiler command (``CXX``) that builds the loops for one -march level alone."""
    return f"{compiler_command()} -DKT_VERSIONS=0 -march={level}"


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
    run_the_kernel_checks(one_version(level), tmp_path)


def other_compilers():
    """C++ compilers besides the default one: ``KERAS_TRANSFORMER_TEST_CXX`` (commands separated
    by ``;``) and the versioned GCC and clang drivers on PATH (``g++-11``, ``clang++-14``...) that
    are not the default ``c++`` under another name."""
    named = [c.strip() for c in os.environ.get("KERAS_TRANSFORMER_TEST_CXX", "").split(";")]
    found = set()
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        try:
            found.update(name for name in os.listdir(folder)
                         if re.fullmatch(r"(g|clang)\+\+-\d+", name))
        except OSError:
            continue
    default = os.path.realpath(shutil.which(shlex.split(compiler_command())[0]) or "")
    found = [name for name in sorted(found)
             if shutil.which(name) and os.path.realpath(shutil.which(name)) != default]
    return [c for c in named if c] + found


@pytest.mark.slow
@pytest.mark.parametrize("compiler", other_compilers() or ["none"])
def test_other_compilers_build_kernels_that_give_the_same_numbers(compiler, tmp_path,
                                                                  cpu_kernels_built):
    """The library as a user's compiler builds it, every version and the choice among them:
    GCC before 12 had no dispatcher for the x86-64 levels' clones and clang clones no templates,
    so such a build failed and training fell back to TensorFlow's ops (Ubuntu 22.04's GCC 11,
    Colab's). Skipped where no other compiler is installed."""
    if compiler == "none":
        pytest.skip("no other C++ compiler here (KERAS_TRANSFORMER_TEST_CXX, g++-N, clang++-N)")
    run_the_kernel_checks(compiler, tmp_path, also="trains_the_same")


def run_the_kernel_checks(compiler, tmp_path, also=None):
    """The kernel checks of tests/test_loss.py, tests/test_dropout.py and tests/test_layer_norm.py
    (``also``: and these tests of this file) in a process whose kernels ``compiler`` builds into
    a cache folder of its own."""
    env = {**os.environ, "CXX": compiler, "KERAS_TRANSFORMER_CACHE": str(tmp_path / "cache")}
    env.pop(cpu_kernels.SWITCH, None)
    tests = os.path.dirname(os.path.abspath(__file__))
    files = ["test_loss.py", "test_dropout.py", "test_layer_norm.py"] + (
        [os.path.basename(__file__)] if also else [])
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
         *(os.path.join(tests, name) for name in files),
         "-k", CHECKS + (f" or {also}" if also else "")], env=env, capture_output=True,
        text=True, timeout=900)
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else result.stderr
    assert result.returncode == 0, result.stdout[-4000:]
    assert " passed" in summary and "skipped" not in summary, summary
    # The build is the one asked for: one library, in this test's folder.
    assert [name for name in os.listdir(tmp_path / "cache") if name.endswith(".so")], summary
