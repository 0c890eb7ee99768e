"""Runs a command with one of its stages replaced by a stand-in that half-writes, sends this process
a signal and then stalls, as a long stage would: tests/test_reliability.py measures how fast and
how cleanly the command stops.

    python tests/interrupting.py STAGE SIGNAL MODULE [FLAGS...]

STAGE: vocabulary (learning the subword vocabulary, before training), dev_bleu (the dev-set
translations) or export (the SavedModel writer). The time the signal was sent goes to the file
named by $SIGNAL_SENT_AT.
"""

import os
import runpy
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def stall(signum, half_write=None):
    def stand_in(*args, **kwargs):
        if half_write:
            half_write(*args)
        with open(os.environ["SIGNAL_SENT_AT"], "w") as stream:
            stream.write(repr(time.time()))
        os.kill(os.getpid(), signum)
        time.sleep(60)  # a long stage: the signal must end it, not wait for it
        raise AssertionError("the signal did not stop the stage")

    return stand_in


def half_write_export(root, output, **kwargs):
    os.makedirs(os.path.join(output, "variables"))
    with open(os.path.join(output, "saved_model.pb"), "wb") as stream:
        stream.write(b"half")


if __name__ == "__main__":
    stage, signal_name, module = sys.argv[1:4]
    signum = getattr(signal, signal_name)
    if stage == "dev_bleu":
        from keras_transformer.training import dev_bleu

        dev_bleu.translate_in_batches = stall(signum)
    elif stage == "export":
        import tensorflow as tf

        tf.saved_model.save = stall(signum, half_write_export)  # what the export writes with
    elif stage == "vocabulary":  # the real learning, stalled while it reads the training text
        from keras_transformer.data import pipeline

        texts_of = pipeline.training_texts

        def training_texts(config):
            for count, text in enumerate(texts_of(config)):
                if count == 10:
                    stall(signum)()
                yield text

        pipeline.training_texts = training_texts
    else:
        raise SystemExit(f"unknown stage {stage!r}")
    sys.argv = [module] + sys.argv[4:]
    runpy.run_module(f"trainers.{module}", run_name="__main__", alter_sys=True)
