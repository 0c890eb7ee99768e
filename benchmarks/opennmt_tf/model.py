"""The main job's model (preset `mini`, pre-LN) as an OpenNMT-tf 2.32 model, for
`onmt-main --model benchmarks/opennmt_tf/model.py` (README.md here). Runs in OpenNMT-tf's own
environment, never imported by this project."""

import opennmt
import tensorflow as tf


def model():
    return opennmt.models.Transformer(
        source_inputter=opennmt.inputters.WordEmbedder(embedding_size=128),
        target_inputter=opennmt.inputters.WordEmbedder(embedding_size=128),
        num_layers=3, num_units=128, num_heads=4, ffn_inner_dim=512,
        # ours: residual (and embedding) dropout 0.1, no attention or ReLU dropout
        dropout=0.1, attention_dropout=0.0, ffn_dropout=0.0, ffn_activation=tf.nn.relu,
        position_encoder_class=opennmt.layers.SinusoidalPositionEncoder,
        # one matrix for both embeddings and the pre-softmax projection (section 3.4), no bias
        share_embeddings=opennmt.models.EmbeddingsSharingLevel.ALL, output_layer_bias=False,
        pre_norm=True)
