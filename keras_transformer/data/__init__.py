"""Input data (section 5.1): WMT14 through TFDS, the offline corpora (LibreOffice help, Ding), your own files,
token-budget length buckets. See pipeline.py for the entry points."""

import importlib

# Imported on first use (PEP 562): see keras_transformer/__init__.py.
_EXPORTS = {
    "BatchStats": "keras_transformer.data.batching",
    "BucketSpec": "keras_transformer.data.batching",
    "LengthStats": "keras_transformer.data.batching",
    "batch_statistics": "keras_transformer.data.batching",
    "bucket_batch": "keras_transformer.data.batching",
    "bucket_boundaries": "keras_transformer.data.batching",
    "distributed_dataset_fn": "keras_transformer.data.batching",
    "encode_pairs": "keras_transformer.data.batching",
    "length_statistics": "keras_transformer.data.batching",
    "make_batches": "keras_transformer.data.batching",
    "DATASETS": "keras_transformer.data.config",
    "DING_DATASET": "keras_transformer.data.config",
    "LIBREOFFICE_DATASET": "keras_transformer.data.config",
    "DataConfig": "keras_transformer.data.config",
    "SPLITS": "keras_transformer.data.pipeline",
    "bucket_spec": "keras_transformer.data.pipeline",
    "check_not_empty": "keras_transformer.data.pipeline",
    "decoded_pairs": "keras_transformer.data.pipeline",
    "fetch_offline": "keras_transformer.data.pipeline",
    "splits_note": "keras_transformer.data.pipeline",
    "held_out_splits": "keras_transformer.data.pipeline",
    "hold_out_pairs": "keras_transformer.data.pipeline",
    "sized_as": "keras_transformer.data.pipeline",
    "load_or_learn_tokenizer": "keras_transformer.data.pipeline",
    "load_text_pairs": "keras_transformer.data.pipeline",
    "make_dataset": "keras_transformer.data.pipeline",
    "make_distributed_dataset_fn": "keras_transformer.data.pipeline",
    "offline_corpus_to_fetch": "keras_transformer.data.pipeline",
    "prepare_offline": "keras_transformer.data.pipeline",
    "read_pairs": "keras_transformer.data.pipeline",
    "training_texts": "keras_transformer.data.pipeline",
    "training_tokenizer": "keras_transformer.data.pipeline",
    "DataNotFoundError": "keras_transformer.data.wmt",
}

__all__ = [
    "BatchStats", "BucketSpec", "DATASETS", "DING_DATASET", "DataConfig", "LIBREOFFICE_DATASET", "DataNotFoundError", "LengthStats",
    "SPLITS", "batch_statistics", "bucket_batch", "bucket_boundaries", "bucket_spec",
    "check_not_empty", "decoded_pairs", "fetch_offline", "splits_note",
    "held_out_splits", "hold_out_pairs", "sized_as",
    "distributed_dataset_fn", "encode_pairs", "length_statistics", "load_or_learn_tokenizer",
    "load_text_pairs", "make_batches", "make_dataset", "make_distributed_dataset_fn",
    "offline_corpus_to_fetch",
    "prepare_offline", "read_pairs", "training_texts", "training_tokenizer",
]


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'keras_transformer.data' has no attribute {name!r}")
