"""Training throughput from a training log, ours (``trainers.wmt``) or OpenNMT-tf's, over the same
window of updates:

    python -m benchmarks.opennmt_tf.throughput --log=runs/opennmt_tf/onmt-1.log --last=1000

Both log the rates of the interval since their previous progress line: ours every 50 updates
("step N/T | ... | S s/step | K tgt tok/s"), OpenNMT-tf every 10 ("Step = N ; steps/s = R, ...
(.. source, K target)" with millisecond timestamps, which time its intervals). Updates before
--first (tracing, the first batches) are left out.
"""

from absl import flags

from benchmarks.opennmt_tf import twin
from trainers import console

flags.DEFINE_string("log", None, "A training log of ours or of OpenNMT-tf.", required=True)
flags.DEFINE_integer("first", 50, "The window starts at this update's progress line.")
flags.DEFINE_integer("last", None, "The window ends at the last progress line at or before this "
                     "update (default: the log's last).")
FLAGS = flags.FLAGS


def main(argv):
    with open(FLAGS.log, encoding="utf-8", errors="replace") as stream:
        try:
            engine, updates, seconds, tokens = twin.window(stream.read(), FLAGS.first, FLAGS.last)
        except ValueError as error:
            raise ValueError(f"{FLAGS.log}: {error}") from None
    print(f"{engine}: {updates / seconds:.3f} updates/s, {tokens / seconds:,.0f} target tokens/s, "
          f"{seconds / updates:.4f} s/update (updates {FLAGS.first}..{FLAGS.first + updates})")


if __name__ == "__main__":
    console.run(main)
