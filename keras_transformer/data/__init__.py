"""Input data (section 5.1): WMT14 through TFDS, the offline corpora (LibreOffice help, Ding), your own files,
token-budget length buckets. See pipeline.py for the entry points."""

from keras_transformer.data.batching import (
    BatchStats,
    BucketSpec,
    LengthStats,
    batch_statistics,
    bucket_batch,
    bucket_boundaries,
    distributed_dataset_fn,
    encode_pairs,
    length_statistics,
    make_batches,
)
from keras_transformer.data.config import (DATASETS, DING_DATASET, LIBREOFFICE_DATASET,
                                           DataConfig)
from keras_transformer.data.pipeline import (
    SPLITS,
    bucket_spec,
    check_not_empty,
    load_or_learn_tokenizer,
    load_text_pairs,
    make_dataset,
    make_distributed_dataset_fn,
    prepare_offline,
    read_pairs,
    training_texts,
    training_tokenizer,
)
from keras_transformer.data.wmt import DataNotFoundError

__all__ = [
    "BatchStats", "BucketSpec", "DATASETS", "DING_DATASET", "DataConfig", "LIBREOFFICE_DATASET", "DataNotFoundError", "LengthStats",
    "SPLITS", "batch_statistics", "bucket_batch", "bucket_boundaries", "bucket_spec",
    "check_not_empty",
    "distributed_dataset_fn", "encode_pairs", "length_statistics", "load_or_learn_tokenizer",
    "load_text_pairs", "make_batches", "make_dataset", "make_distributed_dataset_fn",
    "prepare_offline", "read_pairs", "training_texts", "training_tokenizer",
]
