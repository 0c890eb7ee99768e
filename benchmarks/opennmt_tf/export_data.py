"""The main job's training pairs as SentencePiece pieces, and its vocabulary as OpenNMT-tf's, for
the OpenNMT-tf twin (README.md here): the same pairs, pieces and 2,000 ids as our trainer's.

    python -m benchmarks.opennmt_tf.export_data                 # -> runs/opennmt_tf/data

The data flags are the trainer's (their defaults here: the main job's corpus and vocabulary).
"""

import os

from absl import flags

from benchmarks import common
from benchmarks.opennmt_tf import twin
from trainers import console, data_flags

flags.DEFINE_string("output_dir", os.path.join("runs", "opennmt_tf", "data"),
                    "Where train.en, train.de and vocab.txt go.")
for _name in ("dataset", "vocab_size", "token_budget", "max_length"):
    console.set_program_default(_name, common.MAIN_JOB[_name])
FLAGS = flags.FLAGS


def main(argv):
    kept, dropped = twin.export(data_flags.data_config(), FLAGS.output_dir)
    print(f"export_data: {kept:,} training pairs ({dropped:,} longer than --max_length dropped, as "
          f"the trainer does) and vocab.txt in {common.shown_path(FLAGS.output_dir)}")


if __name__ == "__main__":
    console.run(main)
