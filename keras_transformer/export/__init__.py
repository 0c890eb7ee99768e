"""Exports of a trained model: SavedModels for TF Serving (``saved_model``) and CTranslate2 model
folders (``ctranslate2``), sharing staging and versions (``common``); during training, the best
dev BLEU's SavedModel (``best.ExportBest``, ``--export_best``).

``EXPORTERS`` maps each ``python -m trainers.export --format`` to its function
``(translator, export_dir, name, version=None, **options) -> path(s)`` (OpenNMT-tf keeps a registry
likewise).
"""

from keras_transformer.export.best import ExportBest
from keras_transformer.export.common import (CONFIG_ASSET, VOCABULARY_ASSET, check_finite,
                                             decoding_settings, next_version, staged_export,
                                             write_run_files)
from keras_transformer.export.ctranslate2 import export_ctranslate2
from keras_transformer.export.saved_model import (IDS_SIGNATURE, TEXT_SIGNATURE,
                                                  export_for_serving, export_saved_model)

EXPORTERS = {"saved_model": export_for_serving, "ctranslate2": export_ctranslate2}

__all__ = ["CONFIG_ASSET", "EXPORTERS", "ExportBest", "IDS_SIGNATURE", "TEXT_SIGNATURE", "VOCABULARY_ASSET",
           "check_finite", "decoding_settings", "export_ctranslate2", "export_for_serving",
           "export_saved_model", "next_version", "staged_export", "write_run_files"]
