"""WMT 2014 English->German and English->French through tensorflow-datasets (section 5.1).

The paper trains on the WMT14 training data (4.5M pairs en-de, 36M en-fr), develops on
newstest2013 and reports newstest2014. In TFDS these are ``wmt14_translate/de-en`` (and
``fr-en``) splits ``train``, ``validation`` (newstest2013) and ``test`` (newstest2014); English
is always our source side.

TFDS downloads the data itself, which needs a network; this module never downloads
implicitly and, when the prepared data is missing, raises one :class:`DataNotFoundError`
explaining how to get it and pointing at the offline corpus.
"""

import shlex
from typing import Tuple

import tensorflow as tf

from keras_transformer.data.config import WMT14
from keras_transformer.data.offline_builder import no_stray_tfds_folder

# Our split names -> TFDS split names (newstest2013 is `validation`, newstest2014 `test`).
SPLITS = {"train": "train", "dev": "validation", "test": "test"}


class DataNotFoundError(ValueError):
    """The prepared dataset is not in ``data_dir`` (and we will not download it silently)."""


def not_found_message(dataset: str, data_dir: str) -> str:
    tfds_name, _ = WMT14[dataset]
    return (
        f"{dataset}: {tfds_name} is not prepared in data_dir={data_dir!r}. TFDS must download "
        "it (several GB) on a machine with network access: run\n"
        f"  python -m trainers.prepare_data --dataset={dataset} "
        f"--data_dir={shlex.quote(data_dir)} --download\n"
        f"(or tfds.builder({tfds_name!r}, data_dir=...).download_and_prepare()) and copy the "
        f"resulting {data_dir}/wmt14_translate directory here. Without network, train on the "
        "offline English-German corpus instead: --dataset=ding_de_en (Debian package "
        "trans-de-en)."
    )


def tfds_split(split: str) -> str:
    if split not in SPLITS:
        raise ValueError(f"split={split!r}: choose one of {', '.join(SPLITS)}")
    return SPLITS[split]


def load(dataset: str, split: str, data_dir: str) -> tf.data.Dataset:
    """(English, target) ``tf.string`` pairs of a WMT14 split, in file order (deterministic)."""
    import tensorflow_datasets as tfds

    tfds_name, target = WMT14[dataset]
    try:
        with no_stray_tfds_folder():
            examples = tfds.load(
                tfds_name, split=tfds_split(split), data_dir=data_dir, download=False,
                shuffle_files=False,
            )
    except AssertionError:  # TFDS's "could not find data in ..." when nothing is prepared
        raise DataNotFoundError(not_found_message(dataset, data_dir)) from None
    return examples.map(lambda ex: (ex["en"], ex[target]), num_parallel_calls=tf.data.AUTOTUNE)


def builder(dataset: str, data_dir: str):
    """The TFDS builder of a WMT14 pair in ``data_dir`` (prepared or not; nothing is downloaded)."""
    import tensorflow_datasets as tfds

    with no_stray_tfds_folder():
        return tfds.builder(WMT14[dataset][0], data_dir=data_dir)


def download_and_prepare(dataset: str, data_dir: str) -> Tuple[str, int]:
    """Downloads and prepares a WMT14 pair (needs a network); returns (TFDS name, train size)."""
    tfds_name, _ = WMT14[dataset]
    wmt_builder = builder(dataset, data_dir)
    try:
        wmt_builder.download_and_prepare()
    except Exception as e:  # network errors come in many types; one message for all
        raise DataNotFoundError(
            f"downloading {tfds_name} failed ({type(e).__name__}: {str(e)[:200]}).\n"
            + not_found_message(dataset, data_dir)
        ) from None
    return tfds_name, wmt_builder.info.splits["train"].num_examples
