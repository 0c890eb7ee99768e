"""Prepares a corpus and its shared subword vocabulary, then reports what training will see.

    python -m trainers.prepare_data                          # offline Ding corpus (default)
    python -m trainers.prepare_data --dataset=libreoffice_help_en_de   # the main job's corpus
    python -m trainers.prepare_data --dataset=files --train_data=train.tsv --dev_data=dev.tsv
    python -m trainers.prepare_data --dataset=wmt14_en_de --download   # needs a network
    python -m trainers.prepare_data --dataset=libreoffice_help_en_de --download   # its Debian packages

Prints pairs per split, the vocabulary size, tokens per sentence (mean, 95th percentile), the
number of token-budget batches, their padding fraction and how many examples are longer
than --max_length (dropped). Running it again reuses the prepared data and the vocabulary
(unless --overwrite_vocab).
"""

from absl import app, flags

from . import console, data_flags

# --help lists the data flags (they are what it is about), but not BPE-dropout: it changes only
# training batches, which this program does not make.
for _flag in flags.FLAGS.get_key_flags_for_module(data_flags):
    if _flag.name != "subword_sampling":
        flags.declare_key_flag(_flag.name)
flags.DEFINE_bool("overwrite_vocab", False, "Learn the vocabulary again even if the file exists.")
flags.DEFINE_bool(
    "download", False, "WMT14: download and prepare it through TFDS (needs a network). The "
    "offline corpora: where neither `apt-get install` nor an earlier download has put them, fetch "
    "their Debian packages with `apt-get download` (no root needed) and unpack them under data/, "
    "where their flags' defaults find them."
)

FLAGS = flags.FLAGS


def main(argv):
    from keras_transformer.data.config import FILES_DATASET

    if FLAGS.download and FLAGS.dataset == FILES_DATASET:
        raise app.UsageError("--download: --dataset=files reads your own files; it fetches WMT14 "
                             "and the offline corpora.")
    config = data_flags.data_config()
    prepare(config)  # bad input: console.run prints the message (file:line or flag), no trace


def prepare(config):
    from keras_transformer import data
    from keras_transformer.data import batching, wmt

    if FLAGS.download and config.dataset in wmt.WMT14:
        wmt.download_and_prepare(config.dataset, config.data_dir)
    elif FLAGS.download:
        data_flags.fetch_corpus(config)

    tokenizer, learned = data.load_or_learn_tokenizer(config, overwrite=FLAGS.overwrite_vocab)
    print(f"dataset: {config.dataset}   data_dir: {config.data_dir}")
    if config.dataset == data.LIBREOFFICE_DATASET:
        from keras_transformer.data import libreoffice_help

        print(libreoffice_help.alignment_summary(config.libreoffice_help_dir))
    print(
        f"vocabulary: {tokenizer.vocab_size} subwords ({'learned now' if learned else 'reused'}) "
        f"at {tokenizer.path}"
    )
    spec = data.bucket_spec(config)
    print(
        f"buckets: {len(spec.boundaries)} lengths {spec.boundaries[0]}..{spec.max_length}, "
        f"token budget {config.token_budget} per side"
    )
    header = (
        f"{'split':<6} {'pairs':>9} {'src tok/sent':>13} {'p95':>5} {'tgt tok/sent':>13} "
        f"{'p95':>5} {'batches':>8} {'padding':>8} {'too long':>9}"
    )
    print(header)
    print("-" * len(header))
    for split in data.SPLITS:
        try:
            pairs = data.load_text_pairs(config, split)
        except ValueError as e:
            if config.dataset == "files" and split != "train" and "is not set" in str(e):
                print(f"{split:<6} (not given)")
                continue
            raise
        lengths = batching.length_statistics(
            batching.encode_pairs(pairs, tokenizer), config.max_length
        )
        stats = batching.batch_statistics(batching.make_batches(pairs, tokenizer, spec))
        print(
            f"{split:<6} {lengths.examples:>9,} {lengths.source_mean:>13.1f} "
            f"{lengths.source_p95:>5.0f} {lengths.target_mean:>13.1f} {lengths.target_p95:>5.0f} "
            f"{stats.batches:>8,} {stats.padding_fraction:>8.1%} {lengths.too_long:>9,}"
        )
        if split == "train":
            data.check_not_empty(config, tokenizer, "train")
    print("(tokens per sentence include the end token; padding counts both sides)")
    note = data.splits_note(config)
    if note:
        print(f"({note})")


if __name__ == "__main__":
    console.run(main)
