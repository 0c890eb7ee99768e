"""One TFDS builder shape for the offline corpora that come from a Debian package.

Both ``ding_de_en`` and ``libreoffice_help_en_de`` read a local source (a file, a folder)
instead of downloading, and split it by hashing a key of their own (:func:`hash_split`: the
source sentence, the help page). :func:`make_builder_class` turns
such a corpus into a ``tfds.core.GeneratorBasedBuilder`` serving features ``en`` and ``de``
and splits train/validation/test, exactly like ``wmt14_translate/de-en``; the class name
decides the TFDS name (``DingDeEn`` -> ``ding_de_en``). Its builders, and the WMT14 ones the
``wmt`` module makes, are made inside :func:`no_stray_tfds_folder`.
"""

import contextlib
import hashlib
import os
import shutil
import tempfile
from typing import Callable, Dict, List, Optional, Tuple

Pairs = List[Tuple[str, str]]


def hash_split(key: str, test_fraction: float, validation_fraction: float) -> str:
    """``"train"``, ``"validation"`` or ``"test"``: where ``key``'s SHA-256, its first 8 bytes as a
    fraction of 2**64, falls (below ``test_fraction``: test, then ``validation_fraction`` more:
    validation). A pure function of the key, so every copy of it lands in one split, on any
    machine and in any order."""
    u = int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "big") / 2.0**64
    if u < test_fraction:
        return "test"
    if u < test_fraction + validation_fraction:
        return "validation"
    return "train"


@contextlib.contextmanager
def no_stray_tfds_folder():
    """Makes TFDS builders inside it without leaving a folder in the system's temporary folder.

    TFDS makes an empty ``tempfile.mkdtemp("tfds")`` folder whenever it builds a dataset's info
    before the dataset is prepared (``DatasetInfo.initialize_from_bucket`` makes it before it learns
    that its GCS bucket is off) and never removes it: one stray folder per new ``data_dir``. Inside
    this context Python's temporary folder is a folder of ours, removed after.
    """
    scratch = tempfile.mkdtemp(prefix="keras_transformer_tfds_")
    previous, tempfile.tempdir = tempfile.tempdir, scratch
    try:
        yield
    finally:
        tempfile.tempdir = previous
        shutil.rmtree(scratch, ignore_errors=True)


def make_builder_class(
    class_name: str,
    *,
    version: str,
    release_note: str,
    description: str,
    homepage: str,
    license: str,
    manual_instructions: str,
    manual_name: str,
    source_kwarg: str,
    resolve_source: Callable[[Optional[str]], str],
    load_splits: Callable[[str], Dict[str, Pairs]],
):
    """A registered TFDS builder class for a corpus read from a local source path.

    ``load_splits(source)`` returns ``{"train"|"validation"|"test": [(en, de), ...]}``.
    The source is, in order: the builder argument named ``source_kwarg`` (e.g.
    ``builder_kwargs={"ding_file": PATH}``), ``manual_dir/manual_name``, ``resolve_source(None)``
    (the corpus's default locations).
    """
    import tensorflow_datasets as tfds  # heavy import, only when a builder is needed

    def __init__(self, **kwargs):
        self._source = kwargs.pop(source_kwarg, None)
        with no_stray_tfds_folder():
            tfds.core.GeneratorBasedBuilder.__init__(self, **kwargs)

    def _info(self):
        return tfds.core.DatasetInfo(
            builder=self,
            description=description,
            features=tfds.features.FeaturesDict(
                {"en": tfds.features.Text(), "de": tfds.features.Text()}
            ),
            supervised_keys=("en", "de"),
            homepage=homepage,
            license=license,
        )

    def _source_path(self, dl_manager) -> str:
        if self._source:
            return self._source
        try:
            manual = os.path.join(os.fspath(dl_manager.manual_dir), manual_name)
        except Exception:  # no manual_dir configured
            manual = None
        if manual and os.path.exists(manual):
            return manual
        return resolve_source(None)

    def _split_generators(self, dl_manager):
        return {
            name: self._generate_examples(pairs)
            for name, pairs in load_splits(self._source_path(dl_manager)).items()
        }

    def _generate_examples(self, pairs):
        for index, (en, de) in enumerate(pairs):
            yield index, {"en": en, "de": de}

    return type(class_name, (tfds.core.GeneratorBasedBuilder,), {
        "__doc__": description.strip().splitlines()[0],
        "__module__": __name__,
        "VERSION": tfds.core.Version(version),
        "RELEASE_NOTES": {version: release_note},
        "MANUAL_DOWNLOAD_INSTRUCTIONS": manual_instructions,
        # Nothing is downloaded, so there is no checksums file to look up (and the lookup
        # needs the `importlib_resources` backport, missing from some installs).
        "url_infos": None,
        "__init__": __init__,
        "_info": _info,
        "_source_path": _source_path,
        "_split_generators": _split_generators,
        "_generate_examples": _generate_examples,
    })
