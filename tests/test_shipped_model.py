"""The model that comes with the project (saved_models/quickstart, trainers/shipped.py): small enough
to ship, translates right after setup with no training, scores what its README says on the corpus
the export records, and gives way to the user's own main-job run once there is one."""

import os
import re
import subprocess
import sys

import keras
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.tokenizer import SubwordTokenizer
from keras_transformer.training import Trainer, TrainingConfig
from trainers import shipped

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHIPPED = os.path.join(ROOT, "saved_models", shipped.SHIPPED_NAME)
README = os.path.join(ROOT, "saved_models", "README.md")
SENTENCE = "Opens the Customize dialog."
# mini at the main job's vocabulary in float32, its search graph and its vocabulary fit; the bound
# keeps a clone and the wheel from growing with every re-ship beyond that.
MAX_BYTES = 16 * 1024 * 1024


def run(module, *args, cwd):
    """A program as a user runs it from ``cwd``, the project importable but not the working
    directory (so no runs/ of the project's own is seen)."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2",
           "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, "-m", f"trainers.{module}", *args], cwd=cwd, env=env,
                            capture_output=True, timeout=600)
    return result.returncode, result.stdout.decode("utf-8"), result.stderr.decode("utf-8", "replace")


def version_folder():
    versions = [n for n in os.listdir(SHIPPED) if n.isdigit()]
    assert versions, f"{SHIPPED} has no version folder"
    return os.path.join(SHIPPED, max(versions, key=int))


def test_shipped_model_is_small_and_described():
    assert shipped.shipped_model_dir() == SHIPPED
    path = version_folder()
    size = sum(os.path.getsize(os.path.join(folder, name))
               for folder, _, names in os.walk(path) for name in names)
    assert size <= MAX_BYTES, f"{path}: {size / 2**20:.1f} MiB, more than the {MAX_BYTES / 2**20:.0f} MiB the project ships"
    text = open(README).read()
    # The README says how it was made and what it scores: the command that reproduces it, the
    # version folder, and the floors beside its score.
    assert "python -m trainers.quickstart" in text
    assert f"saved_models/{shipped.SHIPPED_NAME}/{os.path.basename(path)}" in text
    for floor in ("translation memory", "copy"):
        assert floor in text


def test_the_shipped_graph_transposes_no_int64():
    """Exported by today's tokenization (``tokenizer.dense_ids``): an export of older code holds
    int64 Transposes, for which oneDNN logs an error line as a user's first translation starts."""
    from tensorflow.core.protobuf import saved_model_pb2

    model = saved_model_pb2.SavedModel()
    with open(os.path.join(version_folder(), "saved_model.pb"), "rb") as f:
        model.ParseFromString(f.read())
    (graph,) = [meta.graph_def for meta in model.meta_graphs]
    nodes = [*graph.node, *(node for function in graph.library.function for node in function.node_def)]
    transposes = [node for node in nodes if node.op == "Transpose"]
    assert transposes, "no Transpose at all: this test no longer looks at the right graph"
    assert not [node.name for node in transposes if node.attr["T"].type == tf.int64.as_datatype_enum]


def test_the_shipped_model_serves_every_signature_an_export_has():
    """Re-exported when a signature is added (saved_models/README.md says how), so that a server
    of the shipped model answers every request docs/serving.md shows."""
    from tensorflow.core.protobuf import saved_model_pb2

    from keras_transformer.inference import (ALIGN_SIGNATURE, IDS_SIGNATURE, NBEST_SIGNATURE,
                                             SCORE_IDS_SIGNATURE, SCORE_SIGNATURE, TEXT_SIGNATURE)

    model = saved_model_pb2.SavedModel()
    with open(os.path.join(version_folder(), "saved_model.pb"), "rb") as f:
        model.ParseFromString(f.read())
    (meta,) = model.meta_graphs
    assert set(meta.signature_def) - {"__saved_model_init_op"} == {
        TEXT_SIGNATURE, IDS_SIGNATURE, NBEST_SIGNATURE, SCORE_SIGNATURE, SCORE_IDS_SIGNATURE,
        ALIGN_SIGNATURE}


def test_translate_without_a_model_flag_uses_the_shipped_model(tmp_path):
    import tensorflow_text  # noqa: F401  (the export's tokenizer ops)

    code, out, err = run("translate", f"--text={SENTENCE}", cwd=str(tmp_path))
    assert code == 0, err
    assert f"saved_models/{shipped.SHIPPED_NAME}" in err  # stderr names the model it used
    # The same translation as TensorFlow's own loader gives through the default signature.
    signature = tf.saved_model.load(version_folder()).signatures["serving_default"]
    expected = signature(inputs=tf.constant([SENTENCE]))["translations"][0].numpy().decode()
    assert out == expected + "\n"
    assert expected and expected != SENTENCE
    assert not os.listdir(tmp_path), "translate wrote into the working directory"


@pytest.mark.slow
def test_evaluate_the_shipped_model_reproduces_its_readme(tmp_path):
    """No data flag: the export's recorded corpus is scored, and the sacreBLEU equals the one
    saved_models/README.md states for the test split."""
    stated = re.search(r"test sacreBLEU\D*?(\d+\.\d\d)", open(README).read())
    assert stated, "saved_models/README.md states no test sacreBLEU"
    code, out, err = run("evaluate", f"--saved_model={SHIPPED}", cwd=ROOT)
    if code != 0 and "corpus" in err.lower() and "--download" in err:
        pytest.skip(f"the LibreOffice help corpus is not installed: {err.strip()[-200:]}")
    assert code == 0, err
    assert "libreoffice_help_en_de" in out + err
    found = re.search(r"sacreBLEU\s*=?\s*(\d+\.\d\d)", out)
    assert found, out
    assert found.group(1) == stated.group(1)


def test_the_users_own_main_job_run_comes_first(tmp_path):
    """Once ``python -m trainers.quickstart`` has trained runs/quickstart in the working
    directory, translate and evaluate use it instead of the shipped model."""
    keras.utils.set_random_seed(1)
    text = [f"The dialog number {i} opens, and the window {i * 7} closes." for i in range(200)]
    tokenizer = SubwordTokenizer.learn(text, vocab_size=296,
                                       out_path=str(tmp_path / "vocab" / "tiny.model"))
    config = kt.TransformerConfig.from_preset("tiny", vocab_size=tokenizer.vocab_size, max_length=16)
    model_dir = tmp_path / shipped.MAIN_JOB_RUN
    trainer = Trainer(config, TrainingConfig(model_dir=str(model_dir), train_steps=1),
                      run_info={"vocab_path": tokenizer.path})
    trainer._write_run_config()
    trainer.checkpointer.save(1)

    code, out, err = run("translate", f"--text={SENTENCE}", cwd=str(tmp_path))
    assert code == 0, err
    assert shipped.MAIN_JOB_RUN in err and "saved_models" not in err
    # The run's own translation, as its in-memory Translator gives it.
    from keras_transformer import runs

    translator = runs.load_translator(str(model_dir))
    expected = translator.translate_text(tf.constant([SENTENCE]))["translations"][0].numpy()
    assert out == expected.decode() + "\n"
    # evaluate chooses as translate does (trainers/run_flags.py), here on a file of two pairs.
    (tmp_path / "test.tsv").write_text(f"{SENTENCE}\tDer Dialog.\nThe window.\tDas Fenster.\n")
    code, out, err = run("evaluate", "--dataset=files", "--test_data=test.tsv", cwd=str(tmp_path))
    assert code == 0, err
    assert re.search(rf"^evaluate: {re.escape(os.path.join(shipped.MAIN_JOB_RUN, 'ckpt-1'))} "
                     r"\(latest; .* on files test \(2 sentences\)$", out, re.M), out
