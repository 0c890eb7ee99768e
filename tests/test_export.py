"""The SavedModel: both signatures reload exactly in a fresh process, load the way TF Serving loads
them (session-based loader, PredictRequest/PredictResponse), and list in saved_model_cli; the n-best
signature gives the search's own n-best lists."""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from google.protobuf import json_format
from tensorflow_serving.apis import predict_pb2

from keras_transformer.export import (CONFIG_ASSET, IDS_SIGNATURE, TEXT_SIGNATURE, VOCABULARY_ASSET,
                                      export_ctranslate2, export_for_serving, export_saved_model)
from keras_transformer.export.saved_model import NBEST_SIGNATURE
from keras_transformer.inference import load_exported_nbest_fn
from test_inference import SENTENCES, SIGNATURE_FUNCTIONS, count_traces, small_translator

INPUTS = SENTENCES + ["", "the cat " * 30]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    translator = small_translator(beam_size=2)
    export_dir = str(tmp_path_factory.mktemp("saved_models"))
    text_path, ids_path = export_for_serving(translator, export_dir, "tiny")
    # in memory, as graphs with the exported signatures (eager op-by-op execution may round
    # differently from any graph, in memory or reloaded)
    translate_text = tf.function(translator.translate_text,
                                 input_signature=[tf.TensorSpec([None], tf.string)])
    translate_ids = tf.function(translator.translate_ids,
                                input_signature=[tf.TensorSpec([None, None], tf.int32)])
    source_ids, _, _ = translator.source_ids(tf.constant(INPUTS))
    expected = {"text": {k: np.asarray(v) for k, v in translate_text(tf.constant(INPUTS)).items()},
                "ids": {k: np.asarray(v) for k, v in translate_ids(source_ids).items()},
                "source_ids": np.asarray(source_ids)}
    return translator, export_dir, text_path, ids_path, expected


def run_python(code):
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_layout_versions_and_assets(exported):
    translator, export_dir, text_path, ids_path, _ = exported
    assert text_path == os.path.join(export_dir, "tiny", "1")
    assert ids_path == os.path.join(export_dir, "tiny_ids", "1")
    assert sorted(os.listdir(export_dir)) == ["tiny", "tiny_ids"]  # no temporary folders left
    assert os.listdir(os.path.join(export_dir, "tiny")) == ["1"]
    with open(os.path.join(text_path, "assets", VOCABULARY_ASSET), "rb") as f:
        assert f.read() == translator.tokenizer.model_proto
    with open(os.path.join(text_path, "assets", CONFIG_ASSET)) as f:
        config = json.load(f)
    assert config["model"] == translator.model.config.to_dict()
    assert config["decoding"]["beam_size"] == 2


def test_text_signature_reloads_exactly_in_a_fresh_process(exported):
    _, _, text_path, _, expected = exported
    out = run_python(f"""
import json, tensorflow as tf, tensorflow_text
loaded = tf.saved_model.load({text_path!r})
out = loaded.signatures["{TEXT_SIGNATURE}"](inputs=tf.constant({INPUTS!r}))
print(json.dumps({{k: v.numpy().tolist() if v.dtype != tf.string else [s.decode() for s in v.numpy()]
                  for k, v in out.items()}}))
""")
    assert out["translations"] == [s.decode() for s in expected["text"]["translations"]]
    assert out["scores"] == expected["text"]["scores"].tolist()
    assert out["truncated"] == expected["text"]["truncated"].tolist()


def test_the_exports_hold_no_gradient_functions_of_the_layers_custom_gradients(exported):
    """The signatures call layers whose gradients are our own (tf.custom_gradient, for the training
    step); TensorFlow's default save traces each of those gradients into the SavedModel, which
    serving never runs (and which made the save slower): none is there."""
    from tensorflow.core.protobuf import saved_model_pb2

    _, _, text_path, ids_path, _ = exported
    for path in (text_path, ids_path):
        proto = saved_model_pb2.SavedModel()
        with open(os.path.join(path, "saved_model.pb"), "rb") as stream:
            proto.ParseFromString(stream.read())
        library = proto.meta_graphs[0].graph_def.library
        custom = {node.attr["_gradient_op_type"].s for function in library.function
                  for node in function.node_def if "_gradient_op_type" in node.attr}
        assert custom, "no custom-gradient op in the signatures: this test checks nothing"
        assert not library.registered_gradients, [g.gradient_func for g in
                                                  library.registered_gradients][:3]


def test_ids_export_loads_without_tf_text_and_matches(exported):
    _, _, _, ids_path, expected = exported
    out = run_python(f"""
import json, sys, tensorflow as tf
loaded = tf.saved_model.load({ids_path!r})
assert "tensorflow_text" not in sys.modules
out = loaded.signatures["{IDS_SIGNATURE}"](source_ids=tf.constant({expected["source_ids"].tolist()!r}))
print(json.dumps({{k: v.numpy().tolist() for k, v in out.items()}}))
""")
    for key in ("ids", "scores", "lengths"):
        assert out[key] == expected["ids"][key].tolist(), key


def predict_like_tf_serving(export_path, rest_body):
    """What tensorflow_model_server does with a REST predict call: JSON body -> PredictRequest ->
    session run of the named signature -> PredictResponse -> JSON ("row" format)."""
    import tensorflow_text  # noqa: F401  (registers the ops, as a server built with tf-text has them)
    body = json.loads(rest_body)
    request = predict_pb2.PredictRequest()
    request.model_spec.signature_name = body.get("signature_name", "serving_default")
    graph = tf.Graph()
    with tf.compat.v1.Session(graph=graph) as session:
        meta_graph = tf.compat.v1.saved_model.loader.load(session, ["serve"], export_path)
        signature = meta_graph.signature_def[request.model_spec.signature_name]
        (input_name,) = signature.inputs  # one input: "instances" is a list of its values
        dtype = tf.dtypes.as_dtype(signature.inputs[input_name].dtype).as_numpy_dtype
        request.inputs[input_name].CopyFrom(tf.make_tensor_proto(np.array(body["instances"], dtype=dtype)))
        request = predict_pb2.PredictRequest.FromString(request.SerializeToString())  # over the wire
        feed = {signature.inputs[k].name: tf.make_ndarray(v) for k, v in request.inputs.items()}
        outputs = session.run({k: v.name for k, v in signature.outputs.items()}, feed)
    response = predict_pb2.PredictResponse()
    for name, value in outputs.items():
        response.outputs[name].CopyFrom(tf.make_tensor_proto(value))
    response = predict_pb2.PredictResponse.FromString(response.SerializeToString())
    columns = {k: tf.make_ndarray(v) for k, v in response.outputs.items()}
    rows = [{k: (v[i].decode() if isinstance(v[i], bytes) else v[i].tolist()) for k, v in columns.items()}
            for i in range(len(body["instances"]))]
    assert json_format.MessageToJson(response)  # a valid message
    return json.dumps({"predictions": rows})


def test_tf_serving_style_session_load_and_predict_request(exported):
    _, _, text_path, _, expected = exported
    rest = predict_like_tf_serving(text_path, json.dumps({"signature_name": "serving_default",
                                                         "instances": INPUTS}))
    predictions = json.loads(rest)["predictions"]
    assert [p["translations"] for p in predictions] == [s.decode() for s in expected["text"]["translations"]]
    np.testing.assert_array_equal([p["scores"] for p in predictions], expected["text"]["scores"])
    rest = predict_like_tf_serving(text_path, json.dumps({"signature_name": IDS_SIGNATURE,
                                                         "instances": expected["source_ids"].tolist()}))
    predictions = json.loads(rest)["predictions"]
    assert [p["ids"] for p in predictions] == expected["ids"]["ids"].tolist()


def test_saved_model_cli_lists_both_signatures(exported):
    _, _, text_path, _, _ = exported
    cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    shown = subprocess.run([cli, "show", "--all", "--dir", text_path], capture_output=True, text=True,
                           timeout=120).stdout
    assert f"signature_def['{TEXT_SIGNATURE}']" in shown and f"signature_def['{IDS_SIGNATURE}']" in shown
    assert f"signature_def['{NBEST_SIGNATURE}']" in shown
    assert "inputs['inputs']" in shown and "outputs['translations']" in shown
    assert "inputs['source_ids']" in shown


def test_existing_version_and_unwritable_target_are_clear_errors(exported, tmp_path):
    translator, export_dir, _, _, _ = exported
    with pytest.raises(ValueError, match="exists already"):
        export_saved_model(translator, os.path.join(export_dir, "tiny"), version=1)
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(ValueError, match="cannot write .*file/model/1: Not a directory"):
        export_saved_model(translator, str(blocker / "model"))
    # TF Serving loads numbered version folders only: another one would be an export nothing loads
    for version in (-1, "latest", 1.5, True):
        for export in (lambda: export_saved_model(translator, str(tmp_path / "m"), version=version),
                       lambda: export_for_serving(translator, str(tmp_path), "m", version=version),
                       lambda: export_ctranslate2(translator, str(tmp_path), "m", version=version)):
            with pytest.raises(ValueError, match=re.escape(f"version={version!r}: a whole number >= 0")):
                export()
    for name in (None, "", "a/b", ".."):
        with pytest.raises(ValueError, match=re.escape(f"name={name!r}: the model's folder name")):
            export_for_serving(translator, str(tmp_path), name)
    assert sorted(os.listdir(tmp_path)) == ["file"]  # nothing was written


def write_old_export(path):
    """A SavedModel like the exports written before the n-best signature: a text serving_default
    only (its outputs are placeholders; nothing here translates with it)."""

    class Old(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
        def serve(self, inputs):
            return {"translations": inputs, "scores": tf.zeros(tf.shape(inputs)),
                    "truncated": tf.zeros(tf.shape(inputs), tf.bool)}

    old = Old()
    tf.saved_model.save(old, path, signatures={"serving_default": old.serve})


def test_nbest_signature_is_the_searchs_whole_nbest_list(exported, tmp_path):
    translator, export_dir, text_path, ids_path, expected = exported
    nbest_fn, path, beam_size = load_exported_nbest_fn(os.path.join(export_dir, "tiny"))
    assert path == text_path and beam_size == 2
    out = {k: np.asarray(v) for k, v in nbest_fn(tf.constant(INPUTS)).items()}
    ids = expected["ids"]["ids"]
    texts = np.asarray(translator.tokenizer.detokenize(ids.reshape(-1, ids.shape[2]))).reshape(ids.shape[:2])
    for row, text in enumerate(INPUTS):
        if text:
            assert out["translations"][row].tolist() == texts[row].tolist()
            np.testing.assert_allclose(out["scores"][row], expected["ids"]["scores"][row], rtol=1e-6)
        else:  # as the text signature answers an empty input: "" with score 0, and nothing after
            assert out["translations"][row].tolist() == [b"", b""]
            assert out["scores"][row].tolist() == [0.0, float("-inf")]
    # The best of each list is what the text signature answers.
    assert out["translations"][:, 0].tolist() == expected["text"]["translations"].tolist()
    np.testing.assert_allclose(out["scores"][:, 0], expected["text"]["scores"], rtol=1e-6)
    assert out["truncated"].tolist() == expected["text"]["truncated"].tolist()

    with pytest.raises(ValueError, match="has no text signature: it is the ids-only export"):
        load_exported_nbest_fn(ids_path)
    write_old_export(str(tmp_path / "old" / "1"))
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path}/old/1 has no {NBEST_SIGNATURE} "
                                                   "signature: it was exported before n-best lists")):
        load_exported_nbest_fn(str(tmp_path / "old"))


def test_an_export_rebuilt_here_searches_as_its_graph_and_with_any_other_settings(exported):
    """``inference.load_exported_translator``: with the settings the export records, what its own
    graph answers; with others (a wider beam, another alpha and length, sampling), what the
    exported model in memory answers with them."""
    from keras_transformer.inference import (DecodingConfig, SamplingConfig, Translator,
                                             exported_decoding_config, load_exported_translator)

    translator, export_dir, text_path, _, expected = exported
    assert exported_decoding_config(text_path) == translator.decoding
    rebuilt = load_exported_translator(os.path.join(export_dir, "tiny"))
    assert rebuilt.decoding == translator.decoding
    out = {k: np.asarray(v) for k, v in rebuilt.text_function()(tf.constant(INPUTS)).items()}
    assert out["translations"].tolist() == expected["text"]["translations"].tolist()
    np.testing.assert_allclose(out["scores"], expected["text"]["scores"], rtol=1e-6)

    other = DecodingConfig(beam_size=3, alpha=1.0, extra_length=4)
    mine = load_exported_translator(text_path, other)
    theirs = Translator(translator.model, translator.tokenizer, other)
    sampling = SamplingConfig(top_p=0.9, seed=5)
    for function, args in [("nbest_function", ()), ("text_function", (sampling,))]:
        got, want = [{k: np.asarray(v) for k, v in
                      getattr(t, function)(*args)(tf.constant(INPUTS)).items()}
                     for t in (mine, theirs)]
        assert got["translations"].tolist() == want["translations"].tolist()
        np.testing.assert_allclose(got["scores"], want["scores"], rtol=1e-5)
        if function == "nbest_function":
            assert got["translations"].shape == (len(INPUTS), 3)  # the beam asked for, not the export's


def test_each_signature_is_traced_once_and_the_export_keeps_the_models_weights(tmp_path,
                                                                                 monkeypatch):
    """tf.saved_model.save retraces every tf.function it saves (keras.export.ExportArchive's
    endpoints are traced once to list their variables, then again): the export saves concrete
    functions, traced once each, the ids signatures once for both SavedModels. Its variables are
    what ``inference.load_exported_model`` rebuilds the model from."""
    from keras_transformer.inference import load_exported_model

    translator = small_translator(beam_size=1)
    traces = count_traces(monkeypatch)
    path, _ = export_for_serving(translator, str(tmp_path), "tiny")
    assert traces == {name: 1 for name in SIGNATURE_FUNCTIONS}

    model, tokenizer = load_exported_model(path)
    assert tokenizer.model_proto == translator.tokenizer.model_proto
    assert len(model.weights) == len(translator.model.weights)
    for rebuilt, saved in zip(model.weights, translator.model.weights):
        assert rebuilt.path.split("/", 1)[1] == saved.path.split("/", 1)[1]  # past the model's name
        np.testing.assert_array_equal(rebuilt.numpy(), saved.numpy())


def test_a_version_holds_a_checkpoints_weights_only_if_exported_from_it_after_its_last_write(
        tmp_path, monkeypatch):
    """What ``trainers.wmt --export_dir`` run again decides by: no second version of the same
    weights, a new one for a checkpoint written (trained, averaged) since."""
    from keras_transformer.export.common import version_holding

    checkpoint = tmp_path / "run" / "averaged" / "ckpt"
    checkpoint.parent.mkdir(parents=True)
    index = tmp_path / "run" / "averaged" / "ckpt.index"
    index.write_bytes(b"")

    def export(version, recorded, written):
        folder = tmp_path / "saved" / "run" / str(version)
        (folder / "assets").mkdir(parents=True)
        settings = {} if recorded is None else {"checkpoint": recorded}
        (folder / "assets" / CONFIG_ASSET).write_text(json.dumps(settings))
        (folder / "saved_model.pb").write_bytes(b"")
        os.utime(folder / "saved_model.pb", (written, written))
        return str(folder)

    base = str(tmp_path / "saved" / "run")
    assert version_holding(base, str(checkpoint)) is None  # nothing exported yet
    os.utime(index, (1000, 1000))
    export(1, None, 2000)  # an export of before exports recorded their checkpoint
    assert version_holding(base, str(checkpoint)) is None
    second = export(2, str(checkpoint), 2000)
    assert version_holding(base, str(checkpoint)) == second
    # The same checkpoint named another way (relative to the folder the export ran in).
    monkeypatch.chdir(tmp_path)
    export(3, os.path.join("run", "averaged", "ckpt"), 2000)
    assert version_holding(base, os.path.join("run", "averaged", "ckpt")) == os.path.join(base, "3")
    os.utime(index, (3000, 3000))  # averaged again since
    assert version_holding(base, str(checkpoint)) is None
    other = tmp_path / "run" / "ckpt-4"
    (tmp_path / "run" / "ckpt-4.index").write_bytes(b"")
    os.utime(tmp_path / "run" / "ckpt-4.index", (3500, 3500))
    export(4, str(other), 4000)  # the latest export is of another checkpoint
    assert version_holding(base, str(checkpoint)) is None and version_holding(base, str(other))


def test_the_printed_serving_commands_survive_a_shell_for_any_model_name(tmp_path):
    """trainers.export's tensorflow_model_server and curl lines, for a model folder whose name
    has a space and a quote: each pasted into a shell is one command with the name as one
    argument, and the URL carries it percent-encoded. (In a process of its own: the programs'
    flags are defined once per process.)"""
    import shlex
    import urllib.parse

    name = "it's mine"
    paths = [str(tmp_path / "my exports" / folder / "1") for folder in (name, f"{name}_ids")]
    code = ("import sys; from absl import flags; from trainers import export; "
            "flags.FLAGS(['export', '--model_dir=x']); "
            "print(export.serving_help(sys.argv[1:3], sys.argv[3], [[5, 6, 3]]))")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    result = subprocess.run([sys.executable, "-c", code, *paths, name], capture_output=True,
                            text=True, timeout=300, env={**os.environ, "PYTHONPATH": root})
    assert result.returncode == 0, result.stderr[-2000:]
    text = result.stdout
    servers = [shlex.split(line) for line in text.splitlines()
               if line.startswith("tensorflow_model_server")]
    assert [args[2] for args in servers] == [f"--model_name={name}", f"--model_name={name}_ids"]
    assert [args[3] for args in servers] == [
        f"--model_base_path={tmp_path / 'my exports' / name}",
        f"--model_base_path={tmp_path / 'my exports' / name}_ids"]
    requests = [shlex.split(line) for line in text.splitlines() if line.startswith("curl")]
    assert requests[0][4] == f"http://localhost:8501/v1/models/{urllib.parse.quote(name)}:predict"
    assert json.loads(requests[1][6]) == {"signature_name": "translate_ids", "instances": [[5, 6, 3]]}
