"""The OpenNMT-tf twin's two pieces of work (README.md here), without flags so tests import them:
the main job's training pairs as OpenNMT-tf reads them (``export``, run by ``export_data``) and the
training throughput either engine's log shows (``window``, run by ``throughput``)."""

import datetime
import os
import re

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
