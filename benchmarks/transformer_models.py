#!/usr/bin/env python3
"""Writes the transformer set: converter-made encoders of a realistic size, not the test models'.

tests/models/ holds transformers of hidden 32 and 24 tokens, where fixed costs per node decide
the latency; these have the sizes at which attention's BATCH_MATMUL, softmax, LayerNorm and the
(tokens x hidden) FULLY_CONNECTED layers do. Each is built with random seeded weights from
tests/models/make_models.py's blocks (Keras 3 MultiHeadAttention, LayerNormalization, GELU MLP)
and goes through the real converter; the written ``manifest.json`` holds the TensorFlow / Keras
versions. The int8 variant is full-integer (int32 token ids in, int8 out), calibrated as
make_models.py's ``bert_tiny_int8``, and holds its float model's weights.

| file | input | architecture |
| --- | --- | --- |
| bert_small | 128 int32 ids + 128 int32 mask | vocabulary 30522, 4 post-norm blocks, hidden 256,
  4 heads, MLP 1024; sequence and pooled (tanh) outputs |
| vit_small | 128x128x3 | 16x16 patches (64 tokens and a class token), 6 pre-norm blocks,
  hidden 192, 3 heads, MLP 768, 1000 classes |
| whisper_encoder_small | 300 frames x 80 mel bins | two GELU Conv1D (the second strided: 150
  frames), sinusoidal positions, 4 pre-norm blocks, hidden 256, 4 heads, MLP 1024, LayerNorm |
| bert_small_int8 | as bert_small | bert_small, full-integer |

Run with the TensorFlow venv's Python (TensorFlow 2.21, Keras 3):

    TF_VENV/bin/python benchmarks/transformer_models.py [--out DIR] [--only NAME ...]

The default folder is ``~/.cache/tflite-opencl-delegate/transformer-set`` (the files are 5 to 40
MB: not committed); measure it with ``benchmarks/model_kinds.py`` and ``kernel_profile.py``.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# oneDNN's reordered float sums would make the int8 calibration depend on the CPU
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import numpy as np
import tensorflow as tf

# the converter, seeding, blocks and full-integer setup of the committed test models
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "models"))
import make_models

keras = tf.keras
layers = keras.layers
DEFAULT_OUT = Path.home() / ".cache" / "tflite-opencl-delegate" / "transformer-set"

Built = tuple[Any, list[tf.TensorSpec]]


def bert_small() -> Built:
    """BERT-small: token ids and an attention mask (int32, 128 tokens), embeddings, 4 post-norm
    blocks (hidden 256, 4 heads, MLP 1024); outputs the sequence and the pooled first token."""
    hidden, seq, vocab = 256, 128, 30522
    ids = keras.Input((seq,), batch_size=1, dtype="int32", name="input_ids")
    mask = keras.Input((seq,), batch_size=1, dtype="int32", name="attention_mask")
    x = layers.Embedding(vocab, hidden, name="token_embedding")(ids)
    x = make_models.PositionEmbedding()(x)
    x = layers.LayerNormalization(epsilon=1e-12)(x)
    attend = keras.ops.expand_dims(keras.ops.cast(mask, "bool"), 1)  # [1, 1, seq]: keys kept
    for _ in range(4):
        x = make_models.encoder_block(x, hidden, heads=4, mlp=4 * hidden, pre_norm=False, mask=attend)
    pooled = layers.Dense(hidden, activation="tanh", name="pooler")(x[:, 0])
    model = keras.Model([ids, mask], [x, pooled])
    return model, [tf.TensorSpec((1, seq), tf.int32), tf.TensorSpec((1, seq), tf.int32)]


def vit_small() -> Built:
    """ViT-small: 16x16 patches of a 128x128 image (64 tokens of 192) and a class token, 6 pre-norm
    blocks (3 heads, MLP 768), LayerNorm of the class token, 1000 classes."""
    hidden, size, patch = 192, 128, 16
    tokens = (size // patch) ** 2
    image = keras.Input((size, size, 3), batch_size=1, name="image")
    x = layers.Conv2D(hidden, patch, strides=patch, name="patches")(image)
    x = layers.Reshape((tokens, hidden))(x)
    x = make_models.ClassToken()(x)
    x = make_models.PositionEmbedding()(x)
    for _ in range(6):
        x = make_models.encoder_block(x, hidden, heads=3, mlp=4 * hidden)
    x = layers.LayerNormalization(epsilon=1e-6)(x[:, 0])
    logits = layers.Dense(1000, name="logits")(x)
    return keras.Model(image, logits), [tf.TensorSpec((1, size, size, 3), tf.float32)]


def whisper_encoder_small() -> Built:
    """Whisper-like audio encoder: 300 frames of 80 mel bins, two GELU Conv1D (the second strided:
    150 frames of 256), sinusoidal positions, 4 pre-norm blocks (4 heads, MLP 1024), LayerNorm."""
    hidden, frames, mels = 256, 300, 80
    mel = keras.Input((frames, mels), batch_size=1, name="log_mel")
    x = layers.Conv1D(hidden, 3, padding="same", activation="gelu")(mel)
    x = layers.Conv1D(hidden, 3, strides=2, padding="same", activation="gelu")(x)
    half = hidden // 2
    position = np.arange(frames // 2)[:, None] / (10_000 ** (np.arange(half)[None] / (half - 1)))
    x = x + np.concatenate([np.sin(position), np.cos(position)], axis=1)[None].astype(np.float32)
    for _ in range(4):
        x = make_models.encoder_block(x, hidden, heads=4, mlp=4 * hidden)
    out = layers.LayerNormalization(epsilon=1e-5)(x)
    return keras.Model(mel, out), [tf.TensorSpec((1, frames, mels), tf.float32)]


#: file stem -> its builder; a ``_int8`` stem is its float model, full-integer
BUILDERS: dict[str, Callable[[], Built]] = {
    "bert_small": bert_small,
    "vit_small": vit_small,
    "whisper_encoder_small": whisper_encoder_small,
}
INT8 = ("bert_small",)
NAMES = [*BUILDERS, *(f"{name}_int8" for name in INT8)]


def build(name: str) -> bytes:
    """The .tflite bytes of ``name``; ``write_set`` seeds it by its float model's name (one set of weights)."""
    model, specs = BUILDERS[name.removesuffix("_int8")]()
    # int8 in and out where the input is a float (token ids stay int32), as make_models.py's
    int8_io = specs[0].dtype == tf.float32
    configure = make_models.full_integer(specs, name, int8_io=int8_io) if name.endswith("_int8") else None
    with contextlib.redirect_stdout(io.StringIO()):  # Keras' export prints every traced signature
        return make_models.convert(model, configure)


def main(argv: list[str] | None = None) -> int:
    return make_models.write_set(argv, __doc__.splitlines()[0], DEFAULT_OUT, NAMES, build)


if __name__ == "__main__":
    sys.exit(main())
