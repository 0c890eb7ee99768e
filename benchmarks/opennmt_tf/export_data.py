"""The main job's training pairs as SentencePiece pieces, and its vocabulary as OpenNMT-tf's, for
the OpenNMT-tf twin (README.md here): the same pairs, pieces and 2,000 ids as our trainer's.

    python -m benchmarks.opennmt_tf.export_data                 # -> runs/opennmt_tf/data

The data flags are the trainer's (their defaults here: the main job's corpus and vocabulary).
"""

import os

from absl import flags

from benchmarks import common
from trainers import console, data_flags

flags.DEFINE_string("output_dir", os.path.join("runs", "opennmt_tf", "data"),
                    "Where train.en, train.de and vocab.txt go.")
for _name in ("dataset", "vocab_size", "token_budget", "max_length"):
    console.set_program_default(_name, common.MAIN_JOB[_name])
FLAGS = flags.FLAGS
# OpenNMT-tf numbers its vocabulary <blank>, <s>, </s>, the file's tokens, <unk>; ours pad, unk,
# start, end, pieces: the pieces keep their order, and byte fallback leaves no <unk> in the data.
OPENNMT_SPECIALS = ["<blank>", "<s>", "</s>"]


def export(config, output_dir):
    """Writes the pairs our trainer keeps (``batching.example_length``, each side with its EOS,
    within max_length) as pieces; returns (kept, dropped)."""
    import sentencepiece
    import tensorflow as tf

    from keras_transformer import data, writing
    from keras_transformer.data import batching
    from keras_transformer.tokenizer import END_ID

    tokenizer, _ = data.load_or_learn_tokenizer(config)
    pieces = sentencepiece.SentencePieceProcessor(model_proto=tokenizer.model_proto)
    examples = batching.encode_pairs(data.load_text_pairs(config, "train"), tokenizer).map(
        lambda inputs, target: (inputs[0], target, batching.example_length(inputs, target)))
    lines = {"en": [], "de": []}
    dropped = 0
    for source, target, length in examples.as_numpy_iterator():
        if length > config.max_length:  # the trainer's rule (batching.bucket_batch)
            dropped += 1
            continue
        for language, side in zip(lines, (source, target)):  # each without its EOS
            lines[language].append(" ".join(pieces.id_to_piece(int(i)) for i in side[:-1]))
    vocabulary = OPENNMT_SPECIALS + [pieces.id_to_piece(i) for i in range(END_ID + 1,
                                                                          tokenizer.vocab_size)]
    tf.io.gfile.makedirs(output_dir)
    for name, text in (("train.en", lines["en"]), ("train.de", lines["de"]),
                       ("vocab.txt", vocabulary)):
        writing.write_file(os.path.join(output_dir, name), "\n".join(text) + "\n")
    return len(lines["en"]), dropped


def main(argv):
    kept, dropped = export(data_flags.data_config(), FLAGS.output_dir)
    print(f"export_data: {kept:,} training pairs ({dropped:,} longer than --max_length dropped, as "
          f"the trainer does) and vocab.txt in {common.shown_path(FLAGS.output_dir)}")


if __name__ == "__main__":
    console.run(main)
