#!/usr/bin/env python3
"""Writes the kind variants: the kinds of tests/models/ at other sizes and in other combinations.

The delegate is tuned and tested on tests/models/; these models are of the same kinds but none of
their shapes, head counts, pooling, stacking or directions are those of the test files, so
coverage, partitions and error measured on them say whether the compiler handles the kind or
only the files. Random seeded weights, the real converter (make_models.py's blocks, seeding and
full-integer setup); the written ``manifest.json`` holds the TensorFlow / Keras versions.

| file | what differs from the test models |
| --- | --- |
| bert_variant (+ _int8) | 40 tokens, vocabulary 300, hidden 64, 4 heads, 3 post-norm blocks, 5-way head |
| vit_variant (+ _int8) | 48x48 image, 12x12 patches, no class token, 3 blocks, 2 heads, mean-pooled tokens |
| whisper_variant | 80 frames of 20 bins, hidden 48, 3 heads, learned positions |
| convnext_variant | 64x64 image, 3 stages (24, 48, 64), one block each |
| yolo_variant | 96x96 image, wider backbone, 7 values per anchor |
| stacked_lstm_keras3 | two Keras 3 LSTM layers (24 units with sequences, then 16), 20 steps of 10 |
| bigru_keras3 | a Bidirectional Keras 3 GRU (10 units, sequences), 16 steps of 6 |
| stacked_lstm_tf_keras | two fused tf_keras LSTM layers (20, then 12 units), when tf_keras is installed |

Run with the TensorFlow venv's Python, then measure the folder:

    TF_VENV/bin/python benchmarks/kind_variants.py [--out DIR] [--only NAME ...]
    python benchmarks/model_kinds.py ~/.cache/tflite-opencl-delegate/kind-variants

The default folder is ``~/.cache/tflite-opencl-delegate/kind-variants`` (not committed: the set is
for checks on files the repository does not hold).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# oneDNN's reordered float sums would make the int8 calibration depend on the CPU
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import tensorflow as tf

# the converter, seeding, blocks and full-integer setup of the committed test models
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "models"))
import make_models

keras = tf.keras
layers = keras.layers
DEFAULT_OUT = Path.home() / ".cache" / "tflite-opencl-delegate" / "kind-variants"

Built = tuple[Any, list[tf.TensorSpec]]


def bert_variant() -> Built:
    """40 int32 ids and a mask, 3 post-norm blocks (hidden 64, 4 heads, MLP 128), a 5-way head."""
    hidden, seq, vocab = 64, 40, 300
    ids = keras.Input((seq,), batch_size=1, dtype="int32", name="input_ids")
    mask = keras.Input((seq,), batch_size=1, dtype="int32", name="attention_mask")
    x = layers.Embedding(vocab, hidden)(ids)
    x = make_models.PositionEmbedding()(x)
    x = layers.LayerNormalization(epsilon=1e-12)(x)
    attend = keras.ops.expand_dims(keras.ops.cast(mask, "bool"), 1)
    for _ in range(3):
        x = make_models.encoder_block(x, hidden, heads=4, mlp=2 * hidden, pre_norm=False, mask=attend)
    model = keras.Model([ids, mask], layers.Dense(5)(x[:, 0]))
    return model, [tf.TensorSpec((1, seq), tf.int32), tf.TensorSpec((1, seq), tf.int32)]


def vit_variant() -> Built:
    """12x12 patches of a 48x48 image (16 tokens of 64), 3 pre-norm blocks (2 heads), mean pooling."""
    hidden = 64
    image = keras.Input((48, 48, 3), batch_size=1, name="image")
    x = layers.Conv2D(hidden, 12, strides=12)(image)
    x = layers.Reshape((16, hidden))(x)
    x = make_models.PositionEmbedding()(x)
    for _ in range(3):
        x = make_models.encoder_block(x, hidden, heads=2, mlp=3 * hidden)
    x = layers.GlobalAveragePooling1D()(layers.LayerNormalization()(x))
    return keras.Model(image, layers.Dense(7)(x)), [tf.TensorSpec((1, 48, 48, 3), tf.float32)]


def whisper_variant() -> Built:
    """80 frames of 20 bins, two GELU Conv1D (the second strided), learned positions, 2 blocks of 48
    (3 heads), a final LayerNorm."""
    hidden, frames, mels = 48, 80, 20
    mel = keras.Input((frames, mels), batch_size=1, name="log_mel")
    x = layers.Conv1D(hidden, 3, padding="same", activation="gelu")(mel)
    x = layers.Conv1D(hidden, 3, strides=2, padding="same", activation="gelu")(x)
    x = make_models.PositionEmbedding()(x)
    for _ in range(2):
        x = make_models.encoder_block(x, hidden, heads=3, mlp=2 * hidden)
    return keras.Model(mel, layers.LayerNormalization()(x)), [tf.TensorSpec((1, frames, mels), tf.float32)]


def convnext_variant() -> Built:
    """A 4x4 stem on 64x64, 3 stages (24, 48, 64) of one block (depthwise 7x7, LayerNorm, Dense on
    the 4-D tensor, GELU, Dense, layer scale), pooled logits."""
    image = keras.Input((64, 64, 3), batch_size=1, name="image")
    x = layers.Conv2D(24, 4, strides=4)(image)
    x = layers.LayerNormalization(epsilon=1e-6)(x)
    for stage, width in enumerate((24, 48, 64)):
        if stage:
            x = layers.LayerNormalization(epsilon=1e-6)(x)
            x = layers.Conv2D(width, 2, strides=2)(x)
        h = layers.DepthwiseConv2D(7, padding="same")(x)
        h = layers.LayerNormalization(epsilon=1e-6)(h)
        h = layers.Dense(4 * width, activation="gelu")(h)
        h = layers.Dense(width)(h)
        x = x + make_models.LayerScale()(h)
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(image, layers.Dense(10)(x)), [tf.TensorSpec((1, 64, 64, 3), tf.float32)]


def yolo_variant() -> Built:
    """make_models.yolo_fpn on 96x96, wider (12, 20, 28, 40), 7 values per anchor."""
    return make_models.yolo_fpn(96, (12, 20, 28, 40), 7)


def stacked_lstm_keras3() -> Built:
    """Two Keras 3 LSTM layers (24 units returning sequences, then 16 returning the last state)."""
    seq = keras.Input((20, 10), batch_size=1, name="sequence")
    x = layers.LSTM(24, return_sequences=True)(seq)
    x = layers.LSTM(16)(x)
    return keras.Model(seq, layers.Dense(3)(x)), [tf.TensorSpec((1, 20, 10), tf.float32)]


def bigru_keras3() -> Built:
    """A Bidirectional Keras 3 GRU (10 units, sequences): two WHILE loops and a REVERSE_V2."""
    seq = keras.Input((16, 6), batch_size=1, name="sequence")
    x = layers.Bidirectional(layers.GRU(10, return_sequences=True))(seq)
    return keras.Model(seq, layers.Dense(4)(x)), [tf.TensorSpec((1, 16, 6), tf.float32)]


def stacked_lstm_tf_keras() -> Any:
    """Two fused tf_keras LSTM layers (20 units with sequences, then 12)."""
    tf_keras = make_models.tf_keras
    seq = tf_keras.Input((20, 10), batch_size=1, name="sequence")
    x = tf_keras.layers.LSTM(20, return_sequences=True)(seq)
    x = tf_keras.layers.LSTM(12)(x)
    return tf_keras.Model(seq, tf_keras.layers.Dense(3)(x))


#: file stem -> what makes its bytes (each after make_models._seed(stem))
MODELS: dict[str, Callable[[str], bytes]] = {
    "bert_variant": lambda n: make_models._keras3(bert_variant, n),
    "bert_variant_int8": lambda n: make_models._keras3(bert_variant, n, "int8"),
    "vit_variant": lambda n: make_models._keras3(vit_variant, n),
    "vit_variant_int8": lambda n: make_models._keras3(vit_variant, n, "int8"),
    "whisper_variant": lambda n: make_models._keras3(whisper_variant, n),
    "convnext_variant": lambda n: make_models._keras3(convnext_variant, n),
    "yolo_variant": lambda n: make_models._keras3(yolo_variant, n),
    "stacked_lstm_keras3": lambda n: make_models._keras3(stacked_lstm_keras3, n),
    "bigru_keras3": lambda n: make_models._keras3(bigru_keras3, n),
}
if make_models.tf_keras is not None:
    MODELS["stacked_lstm_tf_keras"] = lambda n: make_models.convert(stacked_lstm_tf_keras())


def main(argv: list[str] | None = None) -> int:
    if make_models.tf_keras is None:
        print("tf_keras is not installed: stacked_lstm_tf_keras is skipped", file=sys.stderr)
    return make_models.write_set(
        argv, __doc__.splitlines()[0], DEFAULT_OUT, sorted(MODELS), lambda name: MODELS[name](name)
    )


if __name__ == "__main__":
    sys.exit(main())
