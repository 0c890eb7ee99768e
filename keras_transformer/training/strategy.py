"""Distribution strategies by name, and logical CPU devices to exercise them without GPUs.

The paper trained on one machine with 8 GPUs (section 5.2): ``mirrored``. ``multi_worker_mirrored``
reads the cluster from the ``TF_CONFIG`` environment variable (``tf_config`` writes one).
``one_device`` places everything on the first GPU (or the CPU), ``default`` is TensorFlow's no-op
strategy. ``auto``: ``mirrored`` when more than one GPU (or, with ``num_cpu_devices``, logical CPU
device) is visible, else ``default``.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import time
from typing import TYPE_CHECKING, Callable, Optional

from keras_transformer import signals

if TYPE_CHECKING:  # TensorFlow is imported where it is used: the lists below come without it
    import tensorflow as tf

# How often a worker waiting for the others tries their addresses, and says which are missing.
JOIN_POLL_SECONDS = 0.5
JOIN_REMINDER_SECONDS = 60
STRATEGIES = ("auto", "default", "one_device", "mirrored", "multi_worker_mirrored", "tpu")
# Training compute dtypes by name; "auto" is resolved by ``resolve_precision``.
PRECISIONS = ("auto", "float32", "bfloat16", "float16")


def configure_cpu_devices(count: int) -> None:
    """Split the physical CPU into ``count`` logical devices (``/cpu:0`` ... ``/cpu:{count-1}``).

    Must run before TensorFlow initialises its devices (before the first op or strategy), so
    that ``MirroredStrategy`` has several replicas on a machine without GPUs.
    """
    import tensorflow as tf

    count = int(count)
    if count < 1:
        raise ValueError(f"The number of logical CPU devices must be >= 1, got {count}.")
    cpus = tf.config.list_physical_devices("CPU")
    try:
        tf.config.set_logical_device_configuration(
            cpus[0], [tf.config.LogicalDeviceConfiguration() for _ in range(count)])
    except RuntimeError as error:
        existing = len(tf.config.list_logical_devices("CPU"))
        if existing != count:
            raise RuntimeError(
                f"Cannot create {count} logical CPU devices: TensorFlow is already initialised "
                f"with {existing}. Configure them before any other TensorFlow call.") from error


def make_strategy(name: str, num_cpu_devices: int = 0,
                  log: Optional[Callable[[str], None]] = None) -> tf.distribute.Strategy:
    """Returns the strategy called ``name`` (one of ``STRATEGIES``).

    ``num_cpu_devices > 0`` first creates that many logical CPU devices; ``mirrored`` then
    mirrors over them when the machine has no GPU. ``multi_worker_mirrored`` first waits for
    every worker of ``TF_CONFIG`` (``wait_for_workers``; ``log`` hears which are missing). See
    ``describe`` for what was chosen.
    """
    import tensorflow as tf

    if name not in STRATEGIES:
        raise ValueError(f"Unknown strategy {name!r}; choose one of {', '.join(STRATEGIES)}.")
    if num_cpu_devices:
        configure_cpu_devices(num_cpu_devices)
    if name == "auto":
        devices = (tf.config.list_logical_devices("GPU")
                   or (tf.config.list_logical_devices("CPU") if num_cpu_devices else []))
        name = "mirrored" if len(devices) > 1 else "default"
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "multi_worker_mirrored":
        # Before anything initialises TensorFlow's context (even listing logical devices):
        # collective ops can only be configured at start-up.
        config = os.environ.get("TF_CONFIG")
        if not config:
            raise ValueError("--strategy=multi_worker_mirrored needs the TF_CONFIG environment "
                             "variable (cluster worker addresses and this task's index).")
        try:
            config = json.loads(config)
        except json.JSONDecodeError as error:
            raise ValueError(f"TF_CONFIG is not valid JSON: {error}") from error
        wait_for_workers(config, log)
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        signals.reclaim()  # its coordination service has just taken SIGTERM over
        return strategy
    if name in ("one_device", "mirrored"):
        gpus = [d.name for d in tf.config.list_logical_devices("GPU")]
        if name == "one_device":
            return tf.distribute.OneDeviceStrategy(gpus[0] if gpus else "/cpu:0")
        devices = gpus or [d.name for d in tf.config.list_logical_devices("CPU")]
        return tf.distribute.MirroredStrategy(devices=devices)
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver()
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)


def wait_for_workers(config: dict, log: Optional[Callable[[str], None]] = None) -> None:
    """Returns when every other task of ``config`` (a parsed ``TF_CONFIG``) accepts connections at
    its address, listening meanwhile at this task's own; ``log`` hears every
    ``JOIN_REMINDER_SECONDS`` which tasks are still missing.

    ``MultiWorkerMirroredStrategy()`` waits for the same inside TensorFlow, holding Python's
    interpreter lock, with its coordination service's handler in place of Python's for SIGTERM:
    while a worker is missing there (one that never started, a wrong address), no signal but
    SIGKILL ends the wait. Here it is Python's loop, which SIGTERM and Ctrl-C end at once; after
    it, TensorFlow's join finds every worker up. A host name not known yet (a cluster's DNS
    entry comes with its pod) is a worker not started yet. A port of this task's that another
    program holds is a ValueError naming it; a ``TF_CONFIG`` that is not a cluster is left to
    TensorFlow to name.
    """
    try:
        # An evaluator runs outside the collective: TensorFlow's join leaves it out too.
        tasks = {(kind, i): (address, *_host_port(address))
                 for kind, addresses in config["cluster"].items() if kind != "evaluator"
                 for i, address in enumerate(addresses)}
        own = (config["task"]["type"], int(config["task"]["index"]))
        address, _, port = tasks.pop(own)
    except (KeyError, TypeError, ValueError, AttributeError):
        return
    try:
        listener = _listener(port)
    except OSError:  # EADDRINUSE
        raise ValueError(f"TF_CONFIG: this worker's address {address} ({own[0]} {own[1]}): port "
                         f"{port} is in use by another program on this machine") from None
    reminder = time.monotonic() + JOIN_REMINDER_SECONDS
    with listener:
        while tasks:
            for task, (_, host, peer_port) in list(tasks.items()):
                try:
                    socket.create_connection((host, peer_port), timeout=1).close()
                except OSError:
                    continue
                del tasks[task]
            if tasks:
                if log is not None and time.monotonic() >= reminder:
                    log("still waiting for " + ", ".join(
                        f"{kind} {i} ({peer})" for (kind, i), (peer, *_) in sorted(tasks.items())))
                    reminder = time.monotonic() + JOIN_REMINDER_SECONDS
                time.sleep(JOIN_POLL_SECONDS)


def _listener(port: int):
    """A socket listening at ``port`` on every address of this machine (IPv6 and IPv4 where both
    exist); peers connect to it and are let go, and TensorFlow's server takes the port over after.
    Where this machine lets no socket listen there, for a reason other than another program's
    (EADDRINUSE: an OSError), nothing: the peers then wait for TensorFlow's server, which this
    worker's join starts once it has found them."""
    families = [(socket.AF_INET6, True)] if socket.has_dualstack_ipv6() else []
    for family, dual in families + [(socket.AF_INET, False)]:
        try:
            return socket.create_server(("", port), family=family, dualstack_ipv6=dual)
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                raise
    return contextlib.nullcontext()


def _host_port(address: str):
    """``("node1", 2222)`` of ``"node1:2222"`` (``"[::1]:2222"``: ``("::1", 2222)``); a
    ValueError naming an address that is not ``host:port`` or a port outside 1 to 65535."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"worker address {address!r} is not host:port (e.g. node1:2222)")
    if not 0 < int(port) < 65536:
        raise ValueError(f"worker address {address!r}: port {port} is not 1 to 65535")
    return host.strip("[]"), int(port)


@contextlib.contextmanager
def multi_device_input_without_autotune():
    """While in effect, the multi-device iterators that distributed datasets build (under
    ``mirrored`` and ``multi_worker_mirrored``) run without tf.data's autotuning: the input
    pipeline they read on the host, and the one-element prefetch TensorFlow adds per replica.

    Every pipeline with autotune on starts a thread that sleeps between tunings, longer each time
    up to a minute, and TensorFlow 2.21 deletes a multi-device iterator that is not exhausted
    (the training iterator at the end of a run, a dev pass that a signal cut short, or an
    iterator the garbage collector finds later) by waiting out that sleep instead of waking the
    thread. A mirrored run then finished, or exited after its SIGTERM checkpoint, up to a minute
    late. Without autotune, ``AUTOTUNE`` parallelism is fixed at the CPU count (at most 16) and
    an ``AUTOTUNE`` prefetch sizes its buffer as it runs: ``benchmarks.input_pipeline`` times the
    training pipeline both ways. TensorFlow has no option for the replica datasets, so the private
    functions that build both are wrapped for the duration and restored after; where they do not
    exist (another TensorFlow), nothing is changed.
    """
    import tensorflow as tf
    from tensorflow.python.data.ops import multi_device_iterator_ops as ops

    iterator_class = getattr(ops, "OwnedMultiDeviceIterator", None)
    build_replica = getattr(ops, "_create_device_dataset", None)
    if iterator_class is None or build_replica is None:
        yield
        return
    construct = iterator_class.__init__
    options = tf.data.Options()
    options.autotune.enabled = False

    def construct_without_autotune(self, dataset=None, *args, **kwargs):
        if dataset is not None:  # None: rebuilt from its parts, which are built already
            dataset = dataset.with_options(options)
        construct(self, dataset, *args, **kwargs)

    def build_replica_without_autotune(*args, **kwargs):
        return build_replica(*args, **kwargs).with_options(options)

    iterator_class.__init__ = construct_without_autotune
    ops._create_device_dataset = build_replica_without_autotune
    try:
        yield
    finally:
        iterator_class.__init__ = construct
        ops._create_device_dataset = build_replica


def describe(strategy: tf.distribute.Strategy) -> str:
    """E.g. ``mirrored over 8 devices (/gpu:0, ...)`` or ``default (one device, /cpu:0)``."""
    import tensorflow as tf

    names = {tf.distribute.MirroredStrategy: "mirrored",
             tf.distribute.MultiWorkerMirroredStrategy: "multi_worker_mirrored",
             tf.distribute.OneDeviceStrategy: "one_device"}
    name = next((n for kind, n in names.items() if isinstance(strategy, kind)), None)
    if name is None:
        name = "tpu" if "TPU" in type(strategy).__name__ else "default"
    if name == "default":
        gpus = tf.config.list_logical_devices("GPU")
        return f"default (one device, {gpus[0].name if gpus else '/cpu:0'})"
    try:
        devices = list(strategy.extended.worker_devices)
    except (AttributeError, RuntimeError):
        devices = []
    shown = ", ".join(d.rsplit("/", 1)[-1].lower().replace("device:", "") for d in devices[:4])
    more = ", ..." if len(devices) > 4 else ""
    return (f"{name} over {strategy.num_replicas_in_sync} replica(s)"
            + (f" ({shown}{more})" if devices else ""))


def bfloat16_cpu() -> bool:
    """True on a CPU with bfloat16 matrix instructions (AVX512-BF16 or AMX; Linux /proc/cpuinfo)."""
    try:
        with open("/proc/cpuinfo") as stream:
            words = set(stream.read().split())
    except OSError:
        return False
    return bool(words & {"avx512_bf16", "amx_bf16"})


def resolve_precision(name: str) -> str:
    """``name``, or for "auto": bfloat16 on a machine without GPUs whose CPU has bfloat16 matrix
    units (there it trains about twice as fast as float32), else float32."""
    import tensorflow as tf

    if name not in PRECISIONS:
        raise ValueError(f"Unknown precision {name!r}; choose one of {', '.join(PRECISIONS)}.")
    if name != "auto":
        return name
    if tf.config.list_physical_devices("GPU"):
        return "float32"
    return "bfloat16" if bfloat16_cpu() else "float32"


def precision_note(precision: str) -> str:
    """What a start line says after ``precision`` on this machine: for bfloat16 on a CPU without
    bfloat16 matrix units and no GPU, that it gains nothing there (TensorFlow computes its
    bfloat16 products without such units; on AVX2 alone, on kernels slower than float32's);
    else ""."""
    import tensorflow as tf

    if precision != "bfloat16" or bfloat16_cpu() or tf.config.list_physical_devices("GPU"):
        return ""
    return (" (no AVX512-BF16 or AMX on this CPU: bfloat16 trains no faster than float32 here, "
            "slower on AVX2 alone; --mixed_precision=auto picks float32)")


_LOOPBACK = ("localhost", "127.0.0.1", "::1", "[::1]")


def tf_config(workers, index: int) -> dict:
    """The ``TF_CONFIG`` of worker ``index`` of a job whose workers are ``workers`` (``host:port``
    each, the same list in the same order on every worker; worker 0 is the chief). Raises
    ValueError naming a malformed or repeated address or an index outside the list."""
    workers = [w.strip() for w in workers]
    places = {}
    for address in workers:
        host, port = _host_port(address)
        # Host names are case-insensitive, and the loopback's names are one host.
        place = ("localhost" if host.lower() in _LOOPBACK else host.lower(), port)
        if place in places:
            same = ("is listed twice" if places[place] == address
                    else f"and {places[place]} are one address")
            raise ValueError(f"worker address {address} {same}: each worker needs an address of "
                             "its own (another port on the same host)")
        places[place] = address
    if not workers:
        raise ValueError("no worker addresses: list them as host:port,host:port")
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(workers):
        raise ValueError(f"index {index!r} is not a worker of {len(workers)} (0 to "
                         f"{len(workers) - 1})")
    return {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}


def _task_resolver(strategy: tf.distribute.Strategy):
    """The cluster resolver of a multi-worker strategy that names this process's task, else None
    (one process: it is the whole job)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    return resolver if resolver is not None and getattr(resolver, "task_type", None) else None


def worker_count(strategy: tf.distribute.Strategy) -> int:
    """How many processes (workers and chief) take part in ``strategy``'s steps: 1 unless it is a
    multi-worker strategy with a cluster."""
    resolver = _task_resolver(strategy)
    if resolver is None:
        return 1
    spec = resolver.cluster_spec().as_dict()
    return sum(len(spec.get(job, ())) for job in ("chief", "worker")) or 1


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """True on the worker that writes checkpoints, summaries and the JSON report."""
    resolver = _task_resolver(strategy)
    if resolver is None:
        return True
    task_type, task_id = resolver.task_type, resolver.task_id
    if task_type == "chief":
        return True
    # Without an explicit chief, worker 0 is the chief.
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    return task_type == "worker" and task_id == 0 and not has_chief
