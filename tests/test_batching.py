"""Token-budget length buckets, section 5.1 (keras_transformer/data/batching.py)."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.data import batching

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class NumberTokenizer:
    """Test double: "12 0 0" -> ids [16, 4, 4] (number + 4, clear of the reserved ids)."""

    def tokenize(self, texts):
        words = tf.strings.split(texts)
        return tf.strings.to_number(words, tf.int32) + 4


def make_pairs(n, max_words, seed=0):
    """Pair i: source starts with i (so every example is identifiable), random lengths."""
    rng = np.random.default_rng(seed)
    sources, targets = [], []
    for i in range(n):
        sources.append(" ".join([str(i)] + ["0"] * int(rng.integers(0, max_words))))
        targets.append(" ".join([str(i)] + ["1"] * int(rng.integers(0, max_words))))
    return sources, targets


def test_boundaries_grow_by_about_1_1_from_8_to_max_length():
    for max_length in (8, 64, 100, 256, 1024):
        b = batching.bucket_boundaries(max_length)
        assert b[0] == 8 and b[-1] == max_length
        assert all(x % 8 == 0 for x in b[:-1])
        for lo, hi in zip(b, b[1:-1]):
            # About x1.1 (no more shapes than needed), at most one multiple of 8 beyond it.
            assert int(1.1 * lo) <= hi < max(1.1 * lo, lo + 8) + 8
    # Without rounding: exactly tensor2tensor's _bucket_boundaries (reference loop).
    reference, x = [], 8
    while x < 256:
        reference.append(x)
        x = max(x + 1, int(x * 1.1))
    assert batching.bucket_boundaries(256, multiple=1) == tuple(reference) + (256,)


def test_batch_sizes_respect_the_budget_and_are_multiples_of_8():
    spec = batching.BucketSpec.make(256, 25000)
    for length, size in zip(spec.boundaries, spec.batch_sizes):
        assert size * length <= 25000
        assert size % 8 == 0 and (size + 8) * length > 25000  # the largest such multiple
    small = batching.BucketSpec.make(64, 100)  # fewer than 8 examples fit: no rounding
    assert small.batch_sizes[-1] == 100 // 64
    with pytest.raises(ValueError, match=r"token_budget=50 .* smaller than max_length=64"):
        batching.BucketSpec.make(64, 50)


@pytest.mark.parametrize("drop_remainder, multiple", [(False, 8), (True, 8), (False, 1)])
def test_every_batch_respects_budget_and_bucket_shapes(drop_remainder, multiple):
    max_length, budget = 48, 400
    sources, targets = make_pairs(600, 60)
    spec = batching.BucketSpec.make(max_length, budget, multiple)
    pairs = tf.data.Dataset.from_tensor_slices((sources, targets))
    batches = batching.make_batches(pairs, NumberTokenizer(), spec, shuffle_buffer=100, seed=1,
                                    drop_remainder=drop_remainder)
    seen, shapes = [], set()
    for (src, tgt_in), tgt_out in batches.as_numpy_iterator():
        assert src.dtype == tgt_in.dtype == tgt_out.dtype == np.int32
        assert src.shape == tgt_in.shape == tgt_out.shape
        size, length = src.shape
        k = spec.boundaries.index(length)  # padded exactly to a bucket boundary
        assert size <= spec.batch_sizes[k] and size * length <= budget
        if drop_remainder:
            assert size == spec.batch_sizes[k]
        shapes.add(src.shape)
        for s, ti, to in zip(src, tgt_in, tgt_out):
            n_src, n_tgt = np.count_nonzero(s), np.count_nonzero(to)
            lower = spec.boundaries[k - 1] if k else 0
            assert lower < max(n_src, n_tgt) <= length  # in the right bucket
            assert s[n_src - 1] == 3 and to[n_tgt - 1] == 3 and ti[0] == 2  # EOS / BOS
            np.testing.assert_array_equal(ti[1:n_tgt], to[:n_tgt - 1])  # shifted by one
            assert not s[n_src:].any() and not to[n_tgt:].any()
            seen.append(int(s[0]) - 4)
    # Reference: lengths straight from the strings (+1 for EOS).
    fits = {i for i, (s, t) in enumerate(zip(sources, targets))
            if max(len(s.split()), len(t.split())) + 1 <= max_length}
    assert len(seen) == len(set(seen))
    if drop_remainder:
        assert set(seen) <= fits and len(shapes) <= len(spec.boundaries)
    else:
        assert set(seen) == fits  # every short enough example exactly once, long ones dropped
        assert len(shapes) <= 2 * len(spec.boundaries)  # full + last partial batch per bucket
    examples = batching.encode_pairs(pairs, NumberTokenizer())
    assert batching.length_statistics(examples, max_length).too_long == 600 - len(fits)


class CountingTokenizer(NumberTokenizer):
    """NumberTokenizer that appends how many times it has run, so a pair tokenized again shows."""

    def __init__(self):
        self.calls = tf.Variable(0)

    def tokenize(self, texts):
        call = self.calls.assign_add(1)
        ids = super().tokenize(texts)
        return tf.concat([ids, tf.fill([ids.nrows(), 1], call + 1000)], axis=1)


def test_cached_tokens_give_the_same_batches_and_tokenize_each_pair_once():
    sources, targets = make_pairs(300, 20, seed=3)
    spec = batching.BucketSpec.make(32, 256)

    def passes(cache_tokens, tokenizer):
        pairs = tf.data.Dataset.from_tensor_slices((sources, targets))
        batches = batching.make_batches(pairs, tokenizer, spec, shuffle_buffer=100, seed=1,
                                        repeat=True, cache_tokens=cache_tokens)
        return [tf.nest.map_structure(lambda t: t.numpy(), batch) for batch in batches.take(120)]

    # 120 batches are several passes; a deterministic tokenizer gives the same batches.
    plain, cached = passes(False, NumberTokenizer()), passes(True, NumberTokenizer())
    assert len({int(s[0]) for (source, _), _ in plain for s in source}) == 300  # every pair seen
    for a, b in zip(plain, cached):
        tf.nest.map_structure(np.testing.assert_array_equal, a, b)
    # encode_pairs tokenizes up to 1,024 texts a call, a call per side: with the cache, one call
    # per side for the 300 pairs; without it, again on every pass.
    counted = {}
    for cache_tokens in (False, True):
        tokenizer = CountingTokenizer()
        passes(cache_tokens, tokenizer)
        counted[cache_tokens] = int(tokenizer.calls.numpy())
    assert counted[True] == 2 and counted[False] > 2


def test_batch_statistics_match_numpy():
    sources, targets = make_pairs(200, 30, seed=2)
    spec = batching.BucketSpec.make(32, 256)
    batches = batching.make_batches(
        tf.data.Dataset.from_tensor_slices((sources, targets)), NumberTokenizer(), spec)
    stats = batching.batch_statistics(batches)
    arrays = list(batches.as_numpy_iterator())
    real = sum(np.count_nonzero(s) + np.count_nonzero(t) for (s, _), t in arrays)
    padded = sum(s.size + t.size for (s, _), t in arrays)
    assert stats.batches == len(arrays)
    assert stats.examples == sum(s.shape[0] for (s, _), _ in arrays)
    assert stats.padding_fraction == pytest.approx(1 - real / padded)
    assert stats.max_batch_tokens <= 256
    lengths = batching.length_statistics(
        batching.encode_pairs(tf.data.Dataset.from_tensor_slices((sources, targets)),
                              NumberTokenizer()), 32)
    src_len = np.array([len(s.split()) + 1 for s in sources])
    assert lengths.source_mean == pytest.approx(src_len.mean())
    assert lengths.source_p95 == pytest.approx(np.percentile(src_len, 95))


DISTRIBUTED = textwrap.dedent("""
    import json, sys
    import numpy as np
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import importlib.util, os
    sys.path.insert(0, sys.argv[1])
    spec = importlib.util.spec_from_file_location(
        "helpers", os.path.join(sys.argv[1], "tests", "test_batching.py"))
    helpers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(helpers)
    NumberTokenizer, make_pairs = helpers.NumberTokenizer, helpers.make_pairs
    from keras_transformer.data import batching

    sources, targets = make_pairs(301, 40, seed=5)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    dataset_fn = batching.distributed_dataset_fn(
        lambda: tf.data.Dataset.from_tensor_slices((sources, targets)), NumberTokenizer(),
        max_length=32, global_token_budget=512, shuffle_buffer=50, seed=3)
    dist = strategy.distribute_datasets_from_function(dataset_fn)
    epochs = []
    for epoch in range(2):
        seen, sizes = [], []
        for (src, _), tgt in dist:
            for s, t in zip(strategy.experimental_local_results(src),
                            strategy.experimental_local_results(tgt)):
                sizes.append([int(d) for d in s.shape] + [int(d) for d in t.shape])
                if s.shape[0]:  # a replica gets an empty batch when the epoch ends unevenly
                    seen += [int(x) - 4 for x in s.numpy()[:, 0]]
        epochs.append({"seen": seen, "sizes": sizes})
    print(json.dumps({"replicas": strategy.num_replicas_in_sync, "epochs": epochs}))
""")


def test_sharding_under_mirrored_strategy_covers_every_example_once_per_epoch():
    # Two logical CPU devices must be configured before TF initialises: own process.
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    result = subprocess.run([sys.executable, "-c", DISTRIBUTED, ROOT], capture_output=True,
                            text=True, env=env, cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    import json

    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["replicas"] == 2
    sources, targets = make_pairs(301, 40, seed=5)
    fits = sorted(i for i, (s, t) in enumerate(zip(sources, targets))
                  if max(len(s.split()), len(t.split())) + 1 <= 32)
    for epoch in report["epochs"]:
        assert sorted(epoch["seen"]) == fits  # exactly once each, per epoch
        for batch, length, _, target_length in epoch["sizes"]:
            assert batch * length <= 512 // 2 and batch * target_length <= 512 // 2
