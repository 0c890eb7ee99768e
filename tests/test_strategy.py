"""keras_transformer.training.strategy: the training precision by name on either CPU kind, faked
(with or without bfloat16 matrix units, AVX512-BF16 or AMX; no GPU here), multi-device
iterators (their input pipeline and per-replica datasets) built without tf.data's autotune, and
the wait of a multi-worker job's workers for each other (threads here; tests/test_multi_worker.py
has the processes)."""

import socket
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import runs
from keras_transformer.training import strategy


@pytest.fixture(autouse=True)
def no_gpu():
    assert not tf.config.list_physical_devices("GPU"), "these tests fake a CPU-only machine"


@pytest.mark.parametrize("bf16_cpu", [True, False])
def test_auto_trains_in_bfloat16_only_on_a_cpu_with_bfloat16_units(monkeypatch, bf16_cpu):
    monkeypatch.setattr(strategy, "bfloat16_cpu", lambda: bf16_cpu)
    assert strategy.resolve_precision("auto") == ("bfloat16" if bf16_cpu else "float32")
    for name in ("float32", "bfloat16", "float16"):
        assert strategy.resolve_precision(name) == name  # a precision asked for is kept
    with pytest.raises(ValueError, match="float8"):
        strategy.resolve_precision("float8")


@pytest.mark.parametrize("bf16_cpu", [True, False])
def test_bfloat16_asked_for_without_bfloat16_units_is_said_to_gain_nothing(monkeypatch, bf16_cpu):
    """Such a CPU computes bfloat16 products without bfloat16 units (on AVX2 alone on TensorFlow's
    own kernels, slower than float32's: docs/performance.md, the AVX2 kind itself): the start line
    says so, and what auto picks."""
    monkeypatch.setattr(strategy, "bfloat16_cpu", lambda: bf16_cpu)
    note = strategy.precision_note("bfloat16")
    if bf16_cpu:
        assert note == ""
    else:
        assert "no AVX512-BF16 or AMX on this CPU" in note and "no faster than float32" in note
        assert "--mixed_precision=auto picks float32" in note
        assert strategy.resolve_precision("auto") == "float32"  # what the note promises
    for name in ("float32", "float16"):
        assert strategy.precision_note(name) == ""


def test_a_training_run_s_start_line_carries_the_note(monkeypatch, tmp_path):
    """The start line every training program prints (training.run.train_run), for one update of a
    tiny model in bfloat16 on a CPU faked without bfloat16 units."""
    from keras_transformer import data
    from keras_transformer.training import TrainingConfig
    from keras_transformer.training.run import train_run

    monkeypatch.setattr(strategy, "bfloat16_cpu", lambda: False)
    pairs = "".join(f"{e}\t{g}\n" for e, g in [("the house is small", "das Haus ist klein"),
                                               ("a red house", "ein rotes Haus")]) * 40
    (tmp_path / "train.tsv").write_text(pairs, encoding="utf-8")
    data_config = data.DataConfig(dataset="files", train_data=str(tmp_path / "train.tsv"),
                                  data_dir=str(tmp_path / "data"), vocab_size=296, max_length=16,
                                  token_budget=64)
    lines = []
    train_run(data_config, TrainingConfig(model_dir=str(tmp_path / "run"), train_steps=1,
                                          warmup_steps=1, mixed_precision="bfloat16",
                                          checkpoint_every_minutes=None),
              preset="tiny", dev_bleu_sentences=0, log=lines.append)
    start = next(line for line in lines if " preset=tiny " in line)  # after the data's lines
    assert f"precision=bfloat16{strategy.precision_note('bfloat16')}, " in start, start
    assert "no faster than float32" in start
    # without a max_length of its own, the model has the positions of the data's longest
    # examples (16 subwords and EOS, after BOS), not the preset's 64
    assert runs.read_config(str(tmp_path / "run"))["model"]["max_length"] == 17


def test_multi_device_input_runs_without_autotune_inside_the_context_only(monkeypatch):
    """A multi-device iterator built inside the context reads its input pipeline, and feeds each
    replica, with tf.data's autotune off, and yields what it yields without the context; one
    built after it has the defaults, and TensorFlow's functions are its own again."""
    from tensorflow.python.data.ops import multi_device_iterator_ops as ops

    mirrored = tf.distribute.MirroredStrategy(["/cpu:0"])

    def dataset_fn(context):
        return (tf.data.Dataset.range(40).map(lambda x: x * x, num_parallel_calls=tf.data.AUTOTUNE)
                .batch(4).prefetch(tf.data.AUTOTUNE))

    def autotune(iterator):
        multi_device = iterator._iterators[0]._iterator
        return [device._dataset.options().autotune.enabled
                for device in multi_device._device_iterators]

    construct, build_replica = ops.OwnedMultiDeviceIterator.__init__, ops._create_device_dataset
    host_autotune = []  # the options of the pipeline each multi-device iterator is given

    def spy(self, dataset=None, *args, **kwargs):
        host_autotune.append(dataset.options().autotune.enabled)
        construct(self, dataset, *args, **kwargs)

    monkeypatch.setattr(ops.OwnedMultiDeviceIterator, "__init__", spy)
    with strategy.multi_device_input_without_autotune():
        inside = iter(mirrored.distribute_datasets_from_function(dataset_fn))
    assert ops.OwnedMultiDeviceIterator.__init__ is spy
    assert ops._create_device_dataset is build_replica
    after = iter(mirrored.distribute_datasets_from_function(dataset_fn))
    assert host_autotune == [False, None]  # off inside, tf.data's default (on) after
    assert autotune(inside) == [False]
    assert autotune(after) == [None]  # tf.data's default: on
    for _ in range(10):
        np.testing.assert_array_equal(next(inside).numpy(), next(after).numpy())


def free_ports(count):
    sockets = [socket.create_server(("127.0.0.1", 0)) for _ in range(count)]
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def test_workers_wait_until_every_other_one_listens_saying_which_are_missing(monkeypatch):
    monkeypatch.setattr(strategy, "JOIN_POLL_SECONDS", 0.05)
    monkeypatch.setattr(strategy, "JOIN_REMINDER_SECONDS", 0.3)
    ports = free_ports(3)
    workers = [f"127.0.0.1:{port}" for port in ports]
    heard, returned = {0: [], 1: []}, {}

    def worker(index):
        strategy.wait_for_workers(strategy.tf_config(workers, index), heard[index].append)
        returned[index] = time.monotonic()

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in (0, 1)]
    for thread in threads:
        thread.start()
    time.sleep(1.5)
    assert not returned  # worker 2 has not started
    for index in (0, 1):
        assert heard[index][-1] == f"still waiting for worker 2 (127.0.0.1:{ports[2]})"
    started = time.monotonic()
    # the other two listen: at once
    assert returns_at_once(strategy.wait_for_workers, strategy.tf_config(workers, 2))
    with socket.create_server(("", ports[2])):  # as worker 2's TensorFlow server then does
        for thread in threads:
            thread.join(timeout=10)
    assert sorted(returned) == [0, 1] and max(returned.values()) - started < 5
    for port in ports:  # each given back, for TensorFlow's server to take over
        socket.create_server(("", port)).close()


def test_a_port_of_this_worker_that_another_program_holds_is_named():
    with socket.create_server(("", 0)) as holder:
        port = holder.getsockname()[1]
        config = strategy.tf_config([f"127.0.0.1:{port}", "127.0.0.1:1"], 0)
        with pytest.raises(ValueError, match=rf"address 127\.0\.0\.1:{port} \(worker 0\): port "
                                             rf"{port} is in use by another program"):
            strategy.wait_for_workers(config)


def test_a_worker_that_may_not_listen_at_its_port_still_joins(monkeypatch):
    """Listening is for the peers' sake (TensorFlow's server answers them later): a machine that
    refuses the listener for a reason other than another program's socket does not stop the
    worker from waiting for the others."""
    import errno

    ports = free_ports(2)
    create_server = socket.create_server

    def refused_at_ours(address, **kwargs):
        if address[1] == ports[0]:
            raise OSError(errno.EACCES, "Permission denied")
        return create_server(address, **kwargs)

    monkeypatch.setattr(strategy.socket, "create_server", refused_at_ours)
    monkeypatch.setattr(strategy, "JOIN_POLL_SECONDS", 0.05)
    config = strategy.tf_config([f"127.0.0.1:{port}" for port in ports], 0)
    waiting = threading.Thread(target=strategy.wait_for_workers, args=(config,), daemon=True)
    waiting.start()
    time.sleep(0.3)
    assert waiting.is_alive()  # worker 1 is not there yet
    with create_server(("127.0.0.1", ports[1])):
        waiting.join(timeout=5)
        assert not waiting.is_alive()


@pytest.mark.parametrize("config", [{}, {"cluster": "node1:2222"}, {"cluster": {"worker": ["x"]},
                                    "task": {"type": "worker", "index": 0}},
                                    {"cluster": {"worker": ["a:1", "b:2"]},
                                     "task": {"type": "worker", "index": 2}},
                                    {"cluster": {"worker": ["a:1"], "evaluator": ["b:2"]},
                                     "task": {"type": "evaluator", "index": 0}}])
def test_a_tf_config_that_is_no_cluster_is_left_to_tensorflow_and_an_evaluator_waits_for_none(
        config):
    assert returns_at_once(strategy.wait_for_workers, config)


def test_no_worker_waits_for_an_evaluator():
    """It runs outside the collective (TensorFlow's join leaves it out): a worker alone with one
    that never listens goes on at once."""
    config = {"cluster": {"worker": [f"127.0.0.1:{free_ports(1)[0]}"], "evaluator": ["b:2"]},
              "task": {"type": "worker", "index": 0}}
    assert returns_at_once(strategy.wait_for_workers, config)


def returns_at_once(function, *args):
    """Whether ``function(*args)`` returned within a second (run in a thread: a wait that never
    ends fails the test instead of holding the suite)."""
    thread = threading.Thread(target=function, args=args, daemon=True)
    thread.start()
    thread.join(timeout=1)
    return not thread.is_alive()
