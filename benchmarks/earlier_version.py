"""An earlier version of the decoding code beside today's, in one process, for A/B timings
(``benchmarks.search_ab``, ``benchmarks.decoding --before``). No flags here, so both can import it."""

import importlib
import importlib.util
import os


def load_module(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_before(path):
    """The earlier version to compare: ``(decoding module, package or None)``. ``path`` is a
    ``decoding.py`` (the search only; the model is today's) or a whole ``keras_transformer``
    folder (search, model and step function of then). A folder is imported under another name
    (``keras_transformer_before``, its own imports renamed alike), so both versions live in this
    process."""
    if os.path.isfile(path):
        return load_module(path, "decoding_before"), None
    import re
    import shutil
    import sys
    import tempfile

    name = "keras_transformer_before"
    root = tempfile.mkdtemp(prefix="search_ab_")
    shutil.copytree(path, os.path.join(root, name),
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for folder, _, files in os.walk(os.path.join(root, name)):
        for file in files:
            if file.endswith(".py"):
                source_path = os.path.join(folder, file)
                with open(source_path) as stream:
                    source = stream.read()
                with open(source_path, "w") as stream:
                    stream.write(re.sub(r"\bkeras_transformer\b", name, source))
    sys.path.insert(0, root)
    package = importlib.import_module(name)
    importlib.import_module(f"{name}.inference")
    return importlib.import_module(f"{name}.decoding"), package


def model_of(package, model):
    """``model`` rebuilt with ``package`` (an earlier version's), with the same weights."""
    if package is None:
        return model
    config = package.TransformerConfig.from_dict(model.config.to_dict())
    before = package.Transformer(config)
    def names(m):  # without the model's own name, which differs
        return [w.path.split("/", 1)[-1] for w in m.weights]

    if names(before) != names(model):
        raise ValueError("the earlier model's weights differ from today's: cannot compare them.")
    before.set_weights(model.get_weights())
    return before
