"""Bad input to every command, as a hostile user would give it: each case ends with a non-zero
status, one line on stderr naming the flag (or file:line), no traceback, and nothing left behind
in the folders the command writes to. Good files with CRLF line ends or a byte order mark train.

Each case runs the real command in a fresh folder (its default outputs go there) on a small run
folder and export made once for the module. All but the few in AFTER_TENSORFLOW (which says why)
are answered before TensorFlow is imported: a typo costs no start-up.
"""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOOD_LINES = [f"sentence number {i} is here\tSatz Nummer {i} ist hier" for i in range(60)]


# ``python -m trainers.NAME ARGS`` as Python runs it (``sys.argv[0]`` is "-m" while the package
# is imported), writing to the file $IMPORTED_TENSORFLOW at exit whether TensorFlow was imported.
RUN_AND_RECORD = """
import atexit, os, runpy, sys
record = os.environ["IMPORTED_TENSORFLOW"]
atexit.register(lambda: open(record, "w").write(str("tensorflow" in sys.modules)))
module, sys.argv = sys.argv[1], ["-m", *sys.argv[2:]]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


def run(module, args, cwd, record, timeout=300):
    """``(status, stderr, whether TensorFlow was imported)`` of the command; ``record``: a file
    for the last, outside ``cwd``."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": ROOT,
           "IMPORTED_TENSORFLOW": str(record)}
    result = subprocess.run([sys.executable, "-c", RUN_AND_RECORD, f"trainers.{module}", *args],
                            cwd=cwd, env=env, capture_output=True, timeout=timeout,
                            stdin=subprocess.DEVNULL)
    stderr = result.stderr.decode("utf-8", "replace")
    assert record.exists(), "the command ended without Python's exit handlers:\n" + stderr[-2000:]
    return result.returncode, stderr, {"True": True, "False": False}[record.read_text()]


def tree(path):
    """Every file and folder under ``path`` (relative), to see what a command left behind."""
    found = set()
    for folder, names, files in os.walk(path):
        for name in names + files:
            found.add(os.path.relpath(os.path.join(folder, name), path))
    return found


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Data files good and bad, a run folder (config.json, a checkpoint, its vocabulary), an export
    of it, and paths that cannot be written even by root."""
    import keras


    import keras_transformer as kt
    from keras_transformer import export
    from keras_transformer.inference import DecodingConfig, Translator
    from keras_transformer.tokenizer import SubwordTokenizer
    from keras_transformer.training import Trainer, TrainingConfig

    base = tmp_path_factory.mktemp("bad_inputs")
    files = base / "files"
    files.mkdir()
    write = {
        "good.tsv": "\n".join(GOOD_LINES) + "\n",
        "empty.tsv": "",
        "notab.tsv": "a sentence without a tab\nzwei\tzwei\n",
        "threecols.tsv": "one\teins\nzwei\tzwei\tdrei\n",
        "blank.tsv": "one\teins\n\ntwo\tzwei\n",
        "short.en": "one\ntwo\nthree\n",
        "short.de": "eins\nzwei\n",
    }
    for name, text in write.items():
        (files / name).write_text(text, encoding="utf-8")
    (files / "latin1.tsv").write_bytes("Grüße aus Köln\tgreetings\n".encode("latin-1"))
    (files / "binary.tsv").write_bytes(b"\x00asm\x01\x00\x00\x00" + bytes(range(256)) * 4)
    (files / "utf16.tsv").write_bytes("one\teins\n".encode("utf-16"))  # with its byte order mark
    (files / "zipped.tsv").write_bytes(b"PK\x03\x04\x14\x00\x00\x00" + bytes(range(256)))
    (files / "comma,v2.tsv").write_text("\n".join(GOOD_LINES) + "\n", encoding="utf-8")
    (files / "not_a_vocabulary.model").write_bytes(b"\x00\x01garbage")
    (files / "a_file").write_text("I am a file\n")

    keras.utils.set_random_seed(1)
    tokenizer = SubwordTokenizer.learn([line.replace("\t", " ") for line in GOOD_LINES] * 3,
                                       vocab_size=288, out_path=str(base / "vocab.model"))
    config = kt.TransformerConfig.from_preset("tiny", vocab_size=tokenizer.vocab_size,
                                              max_length=24)
    run_dir = base / "run"
    trainer = Trainer(config, TrainingConfig(model_dir=str(run_dir), train_steps=1),
                      run_info={"vocab_path": tokenizer.path,
                                "data": {"dataset": "files",
                                         "test_data": str(files / "good.tsv")}})
    trainer._write_run_config()
    trainer.checkpointer.save(1)
    translator = Translator(trainer.model, tokenizer, DecodingConfig(beam_size=1, extra_length=4))
    text_export, _ = export.export_for_serving(translator, str(base / "exports"), "tiny")
    (base / "empty_dir").mkdir()
    (base / "no_checkpoint").mkdir()
    (base / "no_checkpoint" / "config.json").write_text((run_dir / "config.json").read_text())
    (base / "bad_config").mkdir()
    (base / "bad_config" / "config.json").write_text("{not json")
    return dict(base=str(base), files=str(files), run=str(run_dir), export=text_export,
                file=str(files / "a_file"), empty_dir=str(base / "empty_dir"),
                no_checkpoint=str(base / "no_checkpoint"), bad_config=str(base / "bad_config"),
                # Not writable, not even by root: sysfs refuses new entries.
                read_only="/sys", below_read_only="/sys/keras-transformer-export")


F = "--dataset=files"
DATA_CASES = [  # (flags, what the error line must name)
    ([F, "--train_data={files}/missing.tsv"], "--train_data={files}/missing.tsv: no such file"),
    ([F, "--train_data={files}"], "--train_data={files}: is a folder"),
    ([F, "--train_data={files}/empty.tsv"], "{files}/empty.tsv: empty corpus"),
    ([F, "--train_data={files}/binary.tsv"], "{files}/binary.tsv:1: a NUL byte: this is a binary "
                                             "file, not text"),
    ([F, "--train_data={files}/latin1.tsv"], "{files}/latin1.tsv:1: invalid UTF-8"),
    ([F, "--train_data={files}/notab.tsv"], "{files}/notab.tsv:1: no tab"),
    ([F, "--train_data={files}/threecols.tsv"], "{files}/threecols.tsv:2: 2 tabs"),
    ([F, "--train_data={files}/blank.tsv"], "{files}/blank.tsv:2: empty line"),
    ([F, "--train_data={files}/short.en,{files}/short.de"], "{files}/short.de has 2 lines"),
    ([F, "--train_data={files}/good.tsv", "--dev_data={files}/notab.tsv"],
     "{files}/notab.tsv:1: no tab"),
    (["--dataset=ding_de_en", "--ding_file={files}/missing"], "--ding_file={files}/missing: no such"),
    (["--dataset=libreoffice_help_en_de", "--libreoffice_help_dir={file}"],
     "--libreoffice_help_dir={file}: is a file"),
    ([F, "--train_data={files}/good.tsv", "--data_dir={file}"], "--data_dir={file}: is a file"),
    ([F, "--train_data={files}/good.tsv", "--data_dir={read_only}"],
     "--data_dir={read_only}: cannot be written"),
    ([F, "--train_data={files}/good.tsv", "--vocab_path={files}"], "--vocab_path={files}: is a folder"),
    (["--dataset=wmt15"], "--dataset"),
    ([F], "train_data"),
    (["--train_data={files}/good.tsv"], "dataset='files'"),
    (["--vocab_size=100"], "--vocab_size=100"),
    (["--vocab_size=1001"], "--vocab_size=1001"),
    (["--max_length=4"], "--max_length=4"),
    (["--token_budget=0"], "--token_budget=0"),
    (["--bucket_multiple=0"], "--bucket_multiple=0"),
    (["--bucket_multiple=65"], "--bucket_multiple=65"),
    (["--subword_sampling=1.0"], "--subword_sampling=1.0"),
    (["--subword_sampling=nan"], "--subword_sampling=nan"),
    ([F, "--train_data={files}/utf16.tsv"], "{files}/utf16.tsv:1: a NUL byte: UTF-16 text"),
    ([F, "--train_data={files}/zipped.tsv"], "{files}/zipped.tsv:1: a NUL byte: a zip archive: "
                                             "unpack it"),
    ([F, "--train_data={files}/comma,v2.tsv"],
     "--train_data={files}/comma,v2.tsv: a comma separates a source file from a target file"),
]

TRAINING_CASES = [
    (["--model_dir={file}"], "--model_dir={file}: is a file"),
    (["--model_dir={file}/below"], "--model_dir={file}/below: lies below {file}"),
    (["--model_dir={below_read_only}"], "--model_dir={below_read_only}: cannot be written"),
    (["--export_dir={read_only}"], "--export_dir={read_only}: cannot be written"),
    (["--export_dir={file}"], "--export_dir={file}: is a file"),
    (["--preset=huge"], "--preset"),
    (["--strategy=parameter_server"], "--strategy"),
    (["--mixed_precision=fp8"], "--mixed_precision"),
    (["--resume_data=maybe"], "--resume_data"),
    (["--positional=rotary"], "--positional"),
    (["--train_steps=0"], "--train_steps=0 needs --train_minutes"),
    (["--train_steps=0", "--train_minutes=0"], "--train_steps=0 needs --train_minutes > 0"),
    (["--d_model=100", "--num_heads=8"], "--preset=base"),
    (["--learning_rate_scale=inf"], "--learning_rate_scale=inf"),
    (["--train_minutes=nan"], "--train_minutes=nan"),
    (["--seed=-1"], "--seed=-1"),
    (["unexpected"], "unexpected argument(s) 'unexpected'"),
] + [([f"--{name}={value}"], f"--{name}={value}") for name, value in [
    ("num_layers", 0), ("d_model", -8), ("d_ff", 0), ("num_heads", 0), ("d_k", 0), ("d_v", 0),
    ("dropout_rate", 1.0), ("attention_dropout", -0.1), ("relu_dropout", 1.5),
    ("label_smoothing", 1.0), ("source_word_dropout", 1.0), ("target_word_dropout", -1.0),
    ("decoder_layerdrop", 2.0), ("num_cpu_devices", -1), ("train_steps", -1),
    ("train_minutes", -1.0), ("warmup_steps", 0), ("learning_rate_scale", 0.0),
    ("accumulation_steps", 0), ("checkpoint_every_steps", -1), ("checkpoint_every_minutes", -0.5),
    ("keep_checkpoints", 0), ("average_last", -1), ("log_every_steps", 0),
    ("dev_every_steps", -1), ("dev_bleu_sentences", -1)]]

RUN_CASES = [  # for every command that reads a run folder
    (["--model_dir={base}/missing"], "--model_dir={base}/missing: no such folder"),
    (["--model_dir={file}"], "--model_dir={file}: is a file"),
    (["--model_dir={empty_dir}"], "--model_dir={empty_dir}: not the model_dir of a training run"),
    (["--model_dir={bad_config}"], "--model_dir={bad_config}: its config.json cannot be read"),
    (["--model_dir={no_checkpoint}"], "--model_dir: no checkpoint in {no_checkpoint}"),
    (["--model_dir={run}", "--checkpoint={run}/ckpt-7"],
     "--checkpoint: checkpoint '{run}/ckpt-7' not found"),
    (["--model_dir={run}", "--checkpoint=averaged"], "--checkpoint: no averaged checkpoint"),
    (["--model_dir={run}", "--vocab_path={files}/missing.model"],
     "--vocab_path={files}/missing.model: no such file"),
    (["--model_dir={run}", "stray"], "unexpected argument(s) 'stray'"),
]

DECODE_CASES = [  # evaluate and translate
    (["--saved_model={base}/missing"], "--saved_model={base}/missing: no such folder"),
    (["--saved_model={empty_dir}"], "--saved_model={empty_dir}: holds no saved_model.pb"),
    (["--saved_model={export}", "--model_dir={run}"], "model_dir, saved_model"),
    (["--saved_model={export}", "--checkpoint=averaged"], "--checkpoint: with --model_dir only"),
    (["--saved_model={export}", "--vocab_path={files}/a_file"], "--vocab_path: with --model_dir"),
    (["--model_dir={run}", "--beam_size=0"], "--beam_size=0"),
    (["--model_dir={run}", "--alpha=-0.5"], "--alpha=-0.5"),
    (["--model_dir={run}", "--alpha=nan"], "--alpha=nan"),
    (["--model_dir={run}", "--batch_size=0"], "--batch_size=0"),
    (["--model_dir={run}", "--intra_op_threads=-1"], "--intra_op_threads=-1"),
    (["--model_dir={run}", "--output={empty_dir}"], "--output={empty_dir}: is a folder"),
    (["--model_dir={run}", "--output={read_only}/out.txt"], "cannot be written"),
]

# The checks are shared (trainers/checks.py, trainers/data_flags.py): the whole table runs on one
# command of each kind, and a sample of it on the others, to show that each command calls them.
COMMAND_CASES = (
    # trainers.wmt has no default corpus and asks for one first: each case names one.
    [("wmt", args if any(a.startswith("--dataset=") for a in args)
      else ["--dataset=ding_de_en", *args], message)
     for args, message in DATA_CASES + TRAINING_CASES]
    + [("quickstart", args, message) for args, message in DATA_CASES[:3] + TRAINING_CASES[:5]]
    + [("quickstart", ["--beam_size=0"], "--beam_size=0"),
       ("quickstart", ["--samples=0"], "--samples=0"),
       ("quickstart", ["--eval_split=train"], "--eval_split"),
       ("quickstart", ["--eval_limit=0"], "--eval_limit=0"),
       ("quickstart", ["stray"], "unexpected argument(s) 'stray'")]
    + [("quickstart", args, message) for args, message in TRAINING_CASES[16::3]]
    # fine-tuning and early stopping (tests/test_init_from.py, tests/test_early_stopping.py)
    + [("wmt", ["--dataset=ding_de_en", "--init_from={base}/missing"],
        "--init_from={base}/missing: no such run folder, checkpoint or SavedModel"),
       ("wmt", ["--dataset=ding_de_en", "--init_from={run}", "--preset=tiny", "--d_model=64"],
        "--init_from={run}: its model ({run}/config.json) differs from this run's: d_model 32, "
        "this run 64"),
       ("wmt", ["--dataset=ding_de_en", "--early_stopping_patience=2",
                "--early_stopping_metric=bleu", "--dev_bleu_sentences=0"],
        "--early_stopping_metric=bleu needs dev BLEU"),
       ("quickstart", ["--init_from={no_checkpoint}"], "--init_from={no_checkpoint}: no checkpoint"),
       # a run resumes (or, finished, shows its report) on the data it trained on, not other data
       ("wmt", [F, "--train_data={files}/good.tsv", "--test_data={files}/good.tsv",
                "--model_dir={run}"],
        "--model_dir={run} holds a run trained on other data (--train_data=None, not "
        "'{files}/good.tsv'); resume it with the data it trained on, or train on this data in "
        "another model_dir (--init_from={run} starts from its weights)"),
       # fine-tuning keeps its source's vocabulary; a resumed run keeps the source it started from
       ("wmt", ["--dataset=ding_de_en", "--init_from={run}", "--preset=tiny", "--vocab_size=1000"],
        "--vocab_size=1000: a fine-tuned run keeps the vocabulary of the model it starts from (288 "
        "pieces, "),
       ("wmt", [F, "--test_data={files}/good.tsv", "--model_dir={run}", "--init_from={export}"],
        "--init_from={export}: the run in {run} started from scratch and resumes from its own "
        "checkpoints; a run from this model needs another --model_dir."),
       ("quickstart", ["--dataset=libreoffice_help_en_de", "--model_dir={run}"],
        "--model_dir={run} holds a run trained on other data (--dataset='files', not "
        "'libreoffice_help_en_de', --test_data='{files}/good.tsv', not None)")]
    + [("prepare_data", args, message) for args, message in DATA_CASES[:3] + DATA_CASES[12:]]
    + [("prepare_data", ["--download", "--dataset=files", "--train_data={file}"],
        "--download: --dataset=files reads your own files"),
       ("prepare_data", ["stray"], "unexpected argument(s) 'stray'")]
    + [("translate", args, message) for args, message in RUN_CASES + DECODE_CASES]
    # translate and evaluate with no model flag use the main job's model (test_shipped_model.py)
    + [("evaluate", args, message) for args, message in RUN_CASES[:2] + DECODE_CASES[:5]]
    + [("export", args, message) for args, message in RUN_CASES[:2] + RUN_CASES[6:8]]
    # a SavedModel where a run belongs: named as one, and the flag it goes to where there is one
    + [("translate", ["--model_dir={export}"], "--model_dir={export}: not the model_dir of a "
        "training run (no config.json in it); it is a SavedModel, an export: pass it as "
        "--saved_model"),
       ("export", ["--model_dir={base}/exports/tiny"], "--model_dir={base}/exports/tiny: not the "
        "model_dir of a training run (no config.json in it); it is a SavedModel, an export")]
    + [("evaluate", ["--model_dir={run}", "--split=validation"], "--split"),
       ("evaluate", ["--model_dir={run}", "--limit=0"], "--limit=0"),
       ("evaluate", ["--model_dir={run}", "--eval_limit=0"], "--limit=0"),  # the quickstart's name
       ("evaluate", ["--model_dir={run}", "--output={empty_dir}"], "--output={empty_dir}: is a folder"),
       ("evaluate", ["--model_dir={run}", F, "--test_data={files}/latin1.tsv"],
        "{files}/latin1.tsv:1: invalid UTF-8"),
       ("evaluate", ["--model_dir={run}", F, "--test_data={files}/missing.tsv"],
        "--test_data={files}/missing.tsv: no such file"),
       ("translate", ["--model_dir={run}", "--input={files}/missing.txt"],
        "--input={files}/missing.txt: no such file"),
       ("translate", ["--model_dir={run}", "--input={files}"], "--input={files}: is a folder"),
       ("translate", ["--model_dir={run}", "--input={files}/good.tsv", "--text=hi"],
        "input, text"),
       ("translate", ["--model_dir={run}", "--extra_length=0"], "--extra_length=0"),
       ("export", ["--model_dir={run}", "--export_dir={read_only}"],
        "--export_dir={read_only}: cannot be written"),
       ("export", ["--model_dir={run}", "--export_dir={below_read_only}"],
        "--export_dir={below_read_only}: cannot be written"),
       ("export", ["--model_dir={run}", "--export_dir={file}"], "--export_dir={file}: is a file"),
       ("export", ["--model_dir={run}", "--export_dir={file}/below"], "lies below {file}"),
       ("export", ["--model_dir={run}", "--format=onnx"], "--format"),
       ("export", ["--model_dir={run}", "--version=0"], "--version=0"),
       ("export", ["--model_dir={run}", "--beam_size=0"], "--beam_size=0"),
       ("export", ["--model_dir={run}", "--alpha=-1"], "--alpha=-1"),
       ("export", ["--model_dir={run}", "--extra_length=0"], "--extra_length=0"),
       ("export", ["--model_dir={run}", "--rest_api_port=70000"], "--rest_api_port=70000"),
       ("export", ["--model_dir={run}", "--name=../x"], "--name='../x'"),
       ("export", [], "name the model to export: --model_dir (a training run) or --saved_model"),
       ("export", ["--saved_model={empty_dir}"],
        "--saved_model={empty_dir}: holds no saved_model.pb"),
       ("export", ["--saved_model={export}", "--checkpoint=averaged"],
        "--checkpoint: with --model_dir only"),
       ("export", ["--saved_model={export},{export}"], "an ensemble cannot be exported"),
       ("wmt", [], "which data? --dataset="),
       ("average_checkpoints", [], "--model_dir"),
       ("average_checkpoints", ["--model_dir={run}", "--last=0"], "--last=0"),
       ("average_checkpoints", ["--model_dir={run}", "--last=3"], "--last=3 but"),
       ("average_checkpoints", ["--model_dir={run}", "--checkpoints={run}/ckpt-9"],
        "--checkpoints: {run}/ckpt-9 is not a checkpoint"),
       ("average_checkpoints", ["--model_dir={run}", "--output={file}/avg"], "lies below {file}"),
       ("average_checkpoints", ["--model_dir={empty_dir}"], "not the model_dir of a training run"),
       ("average_checkpoints", ["--model_dir={run}", "x"], "unexpected argument(s) 'x'")]
)


# The cases answered after TensorFlow's start-up, and why: a run's latest checkpoint (the run's of
# translate and average_checkpoints, --init_from's, and whether the new run resumes its own) is
# named by an index file only TensorFlow reads.
AFTER_TENSORFLOW = {
    "translate:--model_dir=no_checkpoint",
    "average_checkpoints:--model_dir=run --last=3",
    "wmt:--dataset=ding_de_en --init_from=base/missing",
    "wmt:--dataset=ding_de_en --init_from=run --preset=tiny --d_model=64",
    "quickstart:--init_from=no_checkpoint",
    "wmt:--dataset=files --train_data=files/good.tsv --test_data=files/good.tsv --model_dir=run",
    "quickstart:--dataset=libreoffice_help_en_de --model_dir=run",
    "wmt:--dataset=ding_de_en --init_from=run --preset=tiny --vocab_size=1000",
    "wmt:--dataset=files --test_data=files/good.tsv --model_dir=run --init_from=export",
}


def case_id(case):
    command, args, _ = case
    return f"{command}:{' '.join(args) or '(none)'}".replace("{", "").replace("}", "")


@pytest.mark.parametrize("case", COMMAND_CASES, ids=[case_id(c) for c in COMMAND_CASES])
@pytest.mark.slow
def test_bad_input_is_one_line_naming_the_flag_and_leaves_nothing(world, case, tmp_path,
                                                                  tmp_path_factory):
    command, args, message = case
    args = [arg.format(**world) for arg in args]
    before = {name: tree(world[name]) for name in ("base",)}
    record = tmp_path_factory.mktemp("record") / "imported_tensorflow"
    code, stderr, imported_tensorflow = run(command, args, tmp_path, record)
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert code != 0, stderr[-2000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    error_line = lines[-1]
    assert error_line.startswith(f"{command}: error: "), stderr[-2000:]
    if message is not None:
        assert message.format(**world) in error_line, error_line
    # Only TensorFlow's start-up chatter may precede the one line of the error.
    assert not [line for line in lines[:-1] if f"{command}:" in line], stderr[-2000:]
    assert tree(tmp_path) == set(), f"left behind in the working folder: {tree(tmp_path)}"
    assert {name: tree(world[name]) for name in before} == before, "the fixtures were changed"
    assert imported_tensorflow == (case_id(case) in AFTER_TENSORFLOW), (
        "TensorFlow was imported before the answer" if imported_tensorflow else
        "answered before TensorFlow starts: drop the case from AFTER_TENSORFLOW")
