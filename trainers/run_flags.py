"""The flags naming a trained run and its checkpoint, for the commands that load one (evaluate,
translate, export): one definition, one default, and one line saying what was loaded.

    from trainers import run_flags           # defines --model_dir and --checkpoint on import
    flags.adopt_module_key_flags(run_flags)
    translator, loaded = run_flags.load_translator(decoding_config, vocab_path)
    translator, loaded = run_flags.load_exported_translator(saved_model)

--model_dir may name several runs: an ensemble (``run_flags.model_dirs``). Several models are
named the same way in every program that takes them (``ModelsFlag``, also score's and translate's
--saved_model): comma-separated, ``--model_dir=A,B``, or the flag repeated, ``--model_dir=A
--model_dir=B``, the same models in the order named.
"""

from absl import flags


class ModelsFlag(flags.Flag):
    """A string flag naming one model, or several (an ensemble, or score's columns) either
    comma-separated or by giving the flag again: ``--saved_model=A --saved_model=B`` is
    ``--saved_model=A,B`` (where absl's string flag keeps only its last value). The value stays
    the one comma-separated string every reader splits (``model_dirs``, ``saved_models``).

        flags.DEFINE_flag(run_flags.ModelsFlag("saved_model", "Exported SavedModel ..."))
    """

    def __init__(self, name, help_string, default=None):
        super().__init__(flags.ArgumentParser(), flags.ArgumentSerializer(), name, default,
                         help_string)

    def parse(self, argument):
        before = self.value if self.present else None
        super().parse(argument)
        if before:
            self.value = f"{before},{self.value}"


# The words the help of such a flag ends with.
SEVERAL = "several: comma-separated (A,B) or the flag repeated, in the order named"

flags.DEFINE_flag(ModelsFlag(
    "model_dir", "A training run's model_dir (config.json + checkpoints); translate and evaluate "
    f"also take {SEVERAL}: an ensemble, decoded together (their log-probabilities averaged at "
    "every step; the runs must share one vocabulary; memory and time grow linearly with the "
    "runs)."))
flags.DEFINE_string(
    "checkpoint", None,
    "With --model_dir: averaged (MODEL_DIR/averaged/ckpt), ema (MODEL_DIR/ema/ckpt, the moving "
    "average of the weights kept in training), best (MODEL_DIR/best/ckpt), latest, a checkpoint prefix (e.g. "
    "runs/small/ckpt-1000, or ckpt-1000 in the run's folder) or a folder (e.g. runs/small/best). "
    "Default: averaged, else ema, else best, else latest (an "
    "averaged or ema checkpoint older than the latest one is passed over). The program says which "
    "one it used. An ensemble's runs each take theirs.")

FLAGS = flags.FLAGS


def model_dirs():
    """The runs --model_dir names: one, or several (an ensemble)."""
    return FLAGS.model_dir.split(",")


def choose_default_model():
    """Neither --model_dir nor --saved_model (translate, evaluate): the main job's run when it has
    a checkpoint, else the model that comes with the project (``shipped``), set as the flag's
    value; a UsageError if there is neither."""
    from absl import app

    from keras_transformer import runs

    from . import console, shipped

    main_job = shipped.MAIN_JOB_RUN
    try:
        runs.resolve_checkpoint(main_job)
        FLAGS.model_dir = main_job
        return
    except (OSError, ValueError):
        pass
    FLAGS.saved_model = shipped.shipped_model_dir()
    if FLAGS.saved_model is None:
        raise app.UsageError("no --model_dir or --saved_model given, no trained main-job run in "
                             f"{main_job} and no shipped model in this copy of the project: "
                             f"name a model ({console.help_command()}).")


def check_runs():
    """Each run of --model_dir and its --checkpoint, before anything slow."""
    from . import checks

    for model_dir in model_dirs():
        checks.run_dir("model_dir", model_dir, FLAGS.checkpoint)


def load_translator(decoding_config, vocab_path=None):
    """``(translator, loaded)``: the run's ``Translator`` with the checkpoint of the flags (an
    ensemble's for several runs), and a line saying which checkpoint (and why that one) and which
    search settings, e.g. ``runs/x/averaged/ckpt (averaged; the default: averaged, else ema, else
    best, else latest), beam 4, alpha 0.6, extra length 50``."""
    from keras_transformer import runs

    from . import decoding_flags

    members = model_dirs()
    if len(members) == 1:
        translator, loaded = load_run_translator(members[0], decoding_config, vocab_path)
    else:
        chosen = [_chosen_checkpoint(model_dir) for model_dir in members]
        translator = runs.load_ensemble(members, [checkpoint for checkpoint, _ in chosen],
                                        decoding_config, vocab_path)
        loaded = f"an ensemble of {len(members)} runs: " + ", ".join(
            f"{path} ({why})" for path, (_, why) in zip(translator.checkpoint, chosen))
    return translator, f"{loaded}, {decoding_flags.describe(translator.decoding)}"


def describe_export(path):
    """A SavedModel version folder and, if it says, where its weights came from, e.g.
    ``saved_models/x/1 (SavedModel, from runs/x/averaged/ckpt)``."""
    from keras_transformer.export.common import recorded_weights

    weights = recorded_weights(path)
    return f"{path} (SavedModel{f', {weights}' if weights else ''})"


def saved_models(value):
    """The SavedModels a --saved_model value names: one, or several (an ensemble)."""
    return value.split(",")


def rebuilds_saved_model(*other_reasons):
    """Whether --saved_model is rebuilt in the program (``load_exported_translator``) rather than
    run as its own graph: a search flag is given (the graph's search is fixed), several
    SavedModels are named (an ensemble), or one of the program's ``other_reasons`` holds (e.g.
    translate's sampling flags)."""
    from . import decoding_flags

    return bool(FLAGS.saved_model) and bool(
        decoding_flags.given() or len(saved_models(FLAGS.saved_model)) > 1 or any(other_reasons))


def check_saved_models(value):
    """Each SavedModel of a --saved_model value, and none of a run's flags beside it, before
    anything slow."""
    from absl import app

    from . import checks

    given = [f"--{name}" for name in ("checkpoint", "vocab_path")
             if name in FLAGS and FLAGS[name].present]
    if given:
        raise app.UsageError(f"{', '.join(given)}: with --model_dir only; a SavedModel holds its "
                             "weights and its vocabulary.")
    for path in saved_models(value):
        checks.saved_model("saved_model", path)


def load_exported_translator(value):
    """``(translator, loaded)`` for SavedModels rebuilt in the program rather than run as their
    own graphs (``inference.load_exported_translator``): a search or sampling flag given with
    --saved_model, several of them (an ensemble, ``inference.ensemble``), or an export exported
    again. The search settings are the (first) export's, each search flag given replacing its
    own. One export's translator carries what it records of its origin (``data_config``,
    ``checkpoint``, ``selected``), for an export of it to record too. ``loaded`` names them, e.g.
    ``saved_models/x/1 (SavedModel, from runs/x/averaged/ckpt), rebuilt here from its weights:
    beam 8, alpha 0.6, extra length 50``."""
    from keras_transformer import inference
    from keras_transformer.export.common import recorded_data_config
    from keras_transformer.weights import exported_version_path

    from . import decoding_flags

    paths = [exported_version_path(path) for path in saved_models(value)]
    decoding = decoding_flags.decoding_config(inference.exported_decoding_config(paths[0])
                                              or inference.DecodingConfig())
    members = [inference.load_exported_translator(path, decoding) for path in paths]
    translator = (members[0] if len(members) == 1
                  else inference.ensemble(members, paths, "SavedModels"))
    described = ", ".join(describe_export(path) for path in paths)
    if len(paths) > 1:
        return translator, (f"an ensemble of {len(paths)} SavedModels: {described}, rebuilt here "
                            f"from their weights: {decoding_flags.describe(decoding)}")
    recorded = inference.recorded_settings(paths[0]) or {}
    translator.data_config = recorded_data_config(paths[0])
    translator.checkpoint = recorded.get("checkpoint")
    translator.selected = recorded.get("selected")
    return translator, (f"{described}, rebuilt here from its weights: "
                        f"{decoding_flags.describe(decoding)}")


def load_run_translator(model_dir, decoding_config=None, vocab_path=None):
    """``(translator, loaded)`` for the run in ``model_dir`` with --checkpoint's checkpoint:
    ``loaded`` names it and why it is the one, e.g. ``runs/x/averaged/ckpt (averaged; the default:
    averaged, else ema, else best, else latest)``. No ``decoding_config``: the paper's search."""
    from keras_transformer import runs

    checkpoint, why = _chosen_checkpoint(model_dir)
    translator = runs.load_translator(model_dir, checkpoint, decoding_config, vocab_path)
    return translator, f"{translator.checkpoint} ({why})"


def _chosen_checkpoint(model_dir):
    """``(checkpoint, why)``: --checkpoint, else the run's default, chosen once, here, so that the
    line names the one loaded."""
    from keras_transformer import runs

    if FLAGS.checkpoint:
        return FLAGS.checkpoint, f"--checkpoint={FLAGS.checkpoint}"
    name, checkpoint = runs.default_checkpoint(model_dir)
    return checkpoint, f"{name}; the default: " + ", else ".join(runs.DEFAULT_ORDER)
