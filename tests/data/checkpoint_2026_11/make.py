"""Writes the checkpoints of this folder (tests/test_checkpoint_compat.py reads them). They were
written by the code of commit e4eea39 (before the decoder layers spelled out their sub-layers):

    PYTHONPATH=<checkout of e4eea39> python tests/data/checkpoint_2026_11/make.py tests/data/checkpoint_2026_11

Each config gets a checkpoint, its fields and the teacher-forced logits on a fixed batch."""
import json, sys
import numpy as np
import keras
import keras_transformer as kt
from keras_transformer import runs
out = sys.argv[1]
CONFIGS = {"post_ln_shared": dict(vocab_size=16, num_layers=2, d_model=8, d_ff=16, num_heads=2, max_length=16),
           "pre_ln_learned_untied": dict(vocab_size=16, num_layers=2, d_model=8, d_ff=16, num_heads=2, max_length=16,
                                         positional="learned", norm_first=True, share_embeddings=False,
                                         target_vocab_size=12)}
source = np.array([[5, 6, 7, 3, 0], [9, 3, 0, 0, 0]])
target = np.array([[2, 4, 5, 6], [2, 7, 0, 0]])
for name, fields in CONFIGS.items():
    keras.utils.set_random_seed(7)
    m = kt.Transformer(kt.TransformerConfig.from_preset("tiny", **fields))
    runs.model_checkpoint(m).write(f"{out}/{name}/ckpt")
    json.dump(fields, open(f"{out}/{name}/config.json", "w"), indent=1)
    np.savez(f"{out}/{name}/logits.npz", source=source, target=target, logits=np.asarray(m((source, target))))
print(kt.__file__)
