"""WMT14 through tensorflow-datasets, offline under tfds.testing.mock_data (data/wmt.py)."""

import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from keras_transformer import data
from keras_transformer.data import batching, pipeline

from test_batching import NumberTokenizer


def fake_wmt(requested):
    """An as_dataset replacement that records the TFDS split and names each language."""

    def as_dataset(self, split, **kwargs):
        requested.append((self.name, self.builder_config.name, str(split)))
        target = self.builder_config.name.split("-")[0]
        n = 5
        return tf.data.Dataset.from_tensor_slices({
            "en": [f"{i} 0 0" for i in range(n)],
            target: [f"{i} 1" for i in range(n)],
        })

    return as_dataset


@pytest.mark.parametrize("dataset, config_name", [("wmt14_en_de", "de-en"),
                                                  ("wmt14_en_fr", "fr-en")])
def test_english_is_the_source_and_splits_map_to_newstest(tmp_path, dataset, config_name):
    requested = []
    config = data.DataConfig(dataset=dataset, data_dir=str(tmp_path))
    with tfds.testing.mock_data(as_dataset_fn=fake_wmt(requested)):
        for split in data.SPLITS:
            pairs = [(a.decode(), b.decode())
                     for a, b in data.load_text_pairs(config, split).as_numpy_iterator()]
            assert pairs == [(f"{i} 0 0", f"{i} 1") for i in range(5)]
    # newstest2013 is TFDS "validation" (our dev), newstest2014 is "test".
    assert requested == [("wmt14_translate", config_name, s)
                         for s in ("train", "validation", "test")]
    # sacreBLEU's tokenizer and the compound splitting take the language read as the target.
    assert config.target_language == config_name.split("-")[0]


def test_mocked_wmt_feeds_token_budget_batches(tmp_path):
    config = data.DataConfig(dataset="wmt14_en_de", data_dir=str(tmp_path), max_length=16,
                             token_budget=64)
    with tfds.testing.mock_data(as_dataset_fn=fake_wmt([])):
        stats = batching.batch_statistics(
            data.make_dataset(config, NumberTokenizer(), "train", training=True))
    assert stats.examples == 5 and stats.max_batch_tokens <= 64


def test_default_random_mock_data_loads(tmp_path):
    config = data.DataConfig(dataset="wmt14_en_de", data_dir=str(tmp_path))
    with tfds.testing.mock_data(num_examples=7):
        pairs = list(data.load_text_pairs(config, "test").as_numpy_iterator())
    assert len(pairs) == 7 and all(isinstance(s, bytes) and isinstance(t, bytes) for s, t in pairs)


def test_the_training_data_is_named_by_its_tfds_builder_without_a_stray_folder(tmp_path,
                                                                              system_temporary):
    # TFDS leaves an empty folder in the system's temporary folder for each builder it makes of
    # a dataset not prepared (as mocked data is); ours must leave none.
    config = data.DataConfig(dataset="wmt14_en_de", data_dir=str(tmp_path / "data"))
    with tfds.testing.mock_data(num_examples=7):
        fingerprint = pipeline.data_fingerprint(config)
    assert fingerprint.startswith("tfds:wmt14_translate/de-en/")
    assert [p.name for p in system_temporary.iterdir() if p.is_dir()] == []


def test_missing_wmt_data_gives_one_clear_message(tmp_path):
    config = data.DataConfig(dataset="wmt14_en_de", data_dir=str(tmp_path))
    with pytest.raises(data.DataNotFoundError) as error:
        data.load_text_pairs(config, "train")
    message = str(error.value)
    assert "wmt14_translate/de-en is not prepared" in message and str(tmp_path) in message
    assert "--download" in message and "--dataset=ding_de_en" in message
