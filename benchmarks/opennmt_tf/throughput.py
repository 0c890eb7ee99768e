"""Training throughput from a training log, ours (``trainers.wmt``) or OpenNMT-tf's, over the same
window of updates:

    python -m benchmarks.opennmt_tf.throughput --log=runs/opennmt_tf/onmt-1.log --last=1000

Both log the rates of the interval since their previous progress line: ours every 50 updates
("step N/T | ... | S s/step | K tgt tok/s"), OpenNMT-tf every 10 ("Step = N ; steps/s = R, ...
(.. source, K target)" with millisecond timestamps, which time its intervals). Updates before
--first (tracing, the first batches) are left out.
"""

import datetime
import re

from absl import flags

from trainers import console

flags.DEFINE_string("log", None, "A training log of ours or of OpenNMT-tf.", required=True)
flags.DEFINE_integer("first", 50, "The window starts at this update's progress line.")
flags.DEFINE_integer("last", None, "The window ends at the last progress line at or before this "
                     "update (default: the log's last).")
FLAGS = flags.FLAGS
OURS = re.compile(r"step (\d+)/\d+ \|.*?\| ([\d.]+) s/step \| ([\d,]+) tgt tok/s")
OPENNMT = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+).*?Step = (\d+) ; steps/s = [\d.]+, "
                     r"tokens/s = \d+ \(\d+ source, (\d+) target\)", re.M)


def intervals(text):
    """[(engine, last update of the interval, its seconds, its target tokens per second)]."""
    found = OURS.findall(text)
    if found:
        rows = [(int(step), float(seconds), float(tokens.replace(",", "")))
                for step, seconds, tokens in found]
        return [("ours", step, (step - before) * seconds, tokens)
                for (before, _, _), (step, seconds, tokens) in zip(rows, rows[1:])]
    rows = [(int(step), datetime.datetime.fromisoformat(time).timestamp(), float(tokens))
            for time, step, tokens in OPENNMT.findall(text)]
    return [("OpenNMT-tf", step, time - before, tokens)
            for (_, before, _), (step, time, tokens) in zip(rows, rows[1:])]


def window(text, first, last=None):
    """(engine, updates, seconds, target tokens) of the intervals after ``first`` up to ``last``."""
    rows = [row for row in intervals(text) if row[1] > first and (last is None or row[1] <= last)]
    if not rows:
        raise ValueError(f"no progress lines after update {first}"
                         + (f" up to {last}" if last else ""))
    seconds = sum(row[2] for row in rows)
    return (rows[0][0], rows[-1][1] - first, seconds, sum(row[2] * row[3] for row in rows))


def main(argv):
    with open(FLAGS.log, encoding="utf-8", errors="replace") as stream:
        try:
            engine, updates, seconds, tokens = window(stream.read(), FLAGS.first, FLAGS.last)
        except ValueError as error:
            raise ValueError(f"{FLAGS.log}: {error}") from None
    print(f"{engine}: {updates / seconds:.3f} updates/s, {tokens / seconds:,.0f} target tokens/s, "
          f"{seconds / updates:.4f} s/update (updates {FLAGS.first}..{FLAGS.first + updates})")


if __name__ == "__main__":
    console.run(main)
