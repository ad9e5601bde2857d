#!/usr/bin/env python3
"""Writes the small TensorFlow-made test models of tests/models/: the kinds users convert today.

Every model has random (seeded) weights, few channels and short sequences, and goes through the
real converter, ``tf.lite.TFLiteConverter.from_keras_model`` (Keras 3 and tf_keras models). Run
with the TensorFlow venv's Python:

    TF_VENV/bin/python tests/models/make_models.py [--out DIR] [--only NAME ...]

The same TensorFlow / Keras / tf_keras versions give the same files (seeded weights and
calibration data); other versions may lower ops differently. tests/models/README.md lists the
versions the committed files were made with.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# oneDNN's reordered float sums would make the calibration of the int8 models depend on the CPU
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import numpy as np
import tensorflow as tf

keras = tf.keras  # Keras 3 under TF >= 2.16
Layer: Any = keras.layers.Layer  # a name type checkers take as a base class

try:  # the legacy Keras 2: its LSTM converts to the fused UNIDIRECTIONAL_SEQUENCE_LSTM
    import tf_keras
except ImportError:  # pragma: no cover - depends on the venv
    tf_keras = None

HERE = Path(__file__).resolve().parent
#: calibration samples of the int8 models
CALIBRATION = 16


def _seed(name: str) -> None:
    """One fixed seed per model, so that a model's weights do not depend on which others are built;
    a quantized variant takes its float model's (``vit_tiny_int8``: ``vit_tiny``'s), so that both
    hold the same weights and the cost of quantizing can be measured against the float one."""
    seed = sum(name.removesuffix("_int8").removesuffix("_dynamic").encode()) % 10_000
    keras.utils.set_random_seed(seed)
    if tf_keras is not None:
        tf_keras.utils.set_random_seed(seed)


def convert(model: Any, configure: Callable[[Any], None] | None = None) -> bytes:
    """``from_keras_model``: a Keras 3 model goes through its inference export (a SavedModel with
    ``training=False``, variables frozen), a tf_keras one through the legacy path."""
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    if configure is not None:
        configure(converter)
    return converter.convert()


# --- building blocks (Keras 3) ---------------------------------------------------------------


class PositionEmbedding(Layer):
    """A learned embedding per position, added to the input (ViT's and BERT's)."""

    def build(self, input_shape: tuple[int, ...]) -> None:
        self.table = self.add_weight(
            shape=(1, input_shape[1], input_shape[2]), initializer=keras.initializers.RandomNormal(stddev=0.02)
        )

    def call(self, x: Any) -> Any:
        return x + self.table


class ClassToken(Layer):
    """ViT's learned class token, put before the patch tokens (batch 1)."""

    def build(self, input_shape: tuple[int, ...]) -> None:
        self.token = self.add_weight(shape=(1, 1, input_shape[2]), initializer="random_normal")

    def call(self, x: Any) -> Any:
        return keras.ops.concatenate([self.token, x], axis=1)


class LayerScale(Layer):
    """ConvNeXt's per-channel scale of a residual branch."""

    def build(self, input_shape: tuple[int, ...]) -> None:
        self.gamma = self.add_weight(shape=(input_shape[-1],), initializer=keras.initializers.Constant(0.5))

    def call(self, x: Any) -> Any:
        return x * self.gamma


def encoder_block(x: Any, hidden: int, heads: int, mlp: int, pre_norm: bool = True, mask: Any = None) -> Any:
    """A transformer encoder block: MultiHeadAttention and a GELU MLP, pre-norm (ViT, Whisper) or
    post-norm (BERT)."""
    attention = keras.layers.MultiHeadAttention(num_heads=heads, key_dim=hidden // heads)
    norm1, norm2 = keras.layers.LayerNormalization(epsilon=1e-6), keras.layers.LayerNormalization(epsilon=1e-6)
    up, down = keras.layers.Dense(mlp, activation="gelu"), keras.layers.Dense(hidden)
    if pre_norm:
        h = norm1(x)
        x = x + attention(h, h, attention_mask=mask)
        return x + down(up(norm2(x)))
    x = norm1(x + attention(x, x, attention_mask=mask))
    return norm2(x + down(up(x)))


# --- the models ----------------------------------------------------------------------------


def vit() -> tuple[Any, list[tf.TensorSpec]]:
    """ViT: 8x8 patches of a 32x32 image (16 tokens of 48), a class token, 2 pre-norm blocks."""
    hidden = 48
    image = keras.Input((32, 32, 3), batch_size=1, name="image")
    x = keras.layers.Conv2D(hidden, 8, strides=8, name="patches")(image)
    x = keras.layers.Reshape((16, hidden))(x)
    x = ClassToken()(x)
    x = PositionEmbedding()(x)
    for _ in range(2):
        x = encoder_block(x, hidden, heads=4, mlp=2 * hidden)
    x = keras.layers.LayerNormalization(epsilon=1e-6)(x[:, 0])
    logits = keras.layers.Dense(10, name="logits")(x)
    return keras.Model(image, logits), [tf.TensorSpec((1, 32, 32, 3), tf.float32)]


def bert() -> tuple[Any, list[tf.TensorSpec]]:
    """BERT-like: token ids and an attention mask (int32, 24 tokens), embeddings, 2 post-norm
    blocks; outputs the sequence and the pooled (tanh) first token."""
    hidden, seq, vocab = 32, 24, 128
    ids = keras.Input((seq,), batch_size=1, dtype="int32", name="input_ids")
    mask = keras.Input((seq,), batch_size=1, dtype="int32", name="attention_mask")
    x = keras.layers.Embedding(vocab, hidden, name="token_embedding")(ids)
    x = PositionEmbedding()(x)
    x = keras.layers.LayerNormalization(epsilon=1e-12)(x)
    # [1, seq] -> [1, 1, seq]: every query attends to the tokens the mask keeps
    attend = keras.ops.expand_dims(keras.ops.cast(mask, "bool"), 1)
    for _ in range(2):
        x = encoder_block(x, hidden, heads=2, mlp=4 * hidden, pre_norm=False, mask=attend)
    pooled = keras.layers.Dense(hidden, activation="tanh", name="pooler")(x[:, 0])
    model = keras.Model([ids, mask], [x, pooled])
    return model, [tf.TensorSpec((1, seq), tf.int32), tf.TensorSpec((1, seq), tf.int32)]


def whisper() -> tuple[Any, list[tf.TensorSpec]]:
    """Whisper-like audio encoder: 64 frames of 16 mel bins, two GELU Conv1D (the second strided),
    fixed sinusoidal positions, 2 pre-norm blocks, a final LayerNorm."""
    hidden, frames, mels = 32, 64, 16
    mel = keras.Input((frames, mels), batch_size=1, name="log_mel")
    x = keras.layers.Conv1D(hidden, 3, padding="same", activation="gelu")(mel)
    x = keras.layers.Conv1D(hidden, 3, strides=2, padding="same", activation="gelu")(x)
    position = np.arange(frames // 2)[:, None] / (10_000 ** (np.arange(hidden // 2)[None] / (hidden // 2 - 1)))
    x = x + np.concatenate([np.sin(position), np.cos(position)], axis=1)[None].astype(np.float32)
    for _ in range(2):
        x = encoder_block(x, hidden, heads=2, mlp=4 * hidden)
    out = keras.layers.LayerNormalization(epsilon=1e-5)(x)
    return keras.Model(mel, out), [tf.TensorSpec((1, frames, mels), tf.float32)]


def convnext() -> tuple[Any, list[tf.TensorSpec]]:
    """ConvNeXt-like: a 4x4 stem, 2 stages of 2 blocks (depthwise 7x7, LayerNorm, Dense on the
    4-D tensor, GELU, Dense, layer scale), a downsampling between, pooled logits."""
    image = keras.Input((32, 32, 3), batch_size=1, name="image")
    x = keras.layers.Conv2D(16, 4, strides=4)(image)
    x = keras.layers.LayerNormalization(epsilon=1e-6)(x)
    for stage, width in enumerate((16, 32)):
        if stage:
            x = keras.layers.LayerNormalization(epsilon=1e-6)(x)
            x = keras.layers.Conv2D(width, 2, strides=2)(x)
        for _ in range(2):
            h = keras.layers.DepthwiseConv2D(7, padding="same")(x)
            h = keras.layers.LayerNormalization(epsilon=1e-6)(h)
            h = keras.layers.Dense(4 * width, activation="gelu")(h)  # Dense on [1, H, W, C]: tensordot
            h = keras.layers.Dense(width)(h)
            x = x + LayerScale()(h)
    x = keras.layers.GlobalAveragePooling2D()(x)
    x = keras.layers.LayerNormalization(epsilon=1e-6)(x)
    return keras.Model(image, keras.layers.Dense(10)(x)), [tf.TensorSpec((1, 32, 32, 3), tf.float32)]


def conv_bn_silu(x: Any, width: int, kernel: int = 3, stride: int = 1) -> Any:
    """A YOLO-style Conv (no bias, SAME) / BatchNorm / SiLU layer."""
    x = keras.layers.Conv2D(width, kernel, strides=stride, padding="same", use_bias=False)(x)
    x = keras.layers.BatchNormalization()(x)
    return keras.layers.Activation("silu")(x)


def yolo_fpn(
    size: int = 64, widths: tuple[int, int, int, int] = (8, 16, 24, 32), values: int = 9
) -> tuple[Any, list[tf.TensorSpec]]:
    """A YOLO/FPN-style detector on a ``size`` square image: a strided Conv/BatchNorm/SiLU backbone
    (``widths`` at the 1/2, 1/4, 1/8 and 1/16 scales), a top-down path (UpSampling2D, Concatenate,
    Conv) and a 1x1 head per scale (3 anchors x ``values``: 5 + the classes)."""
    conv = conv_bn_silu
    w2, w4, w8, w32 = widths
    image = keras.Input((size, size, 3), batch_size=1, name="image")
    x = conv(image, w2, stride=2)
    p3 = conv(conv(x, w4, stride=2), w4)
    p4 = conv(p3, w8, stride=2)
    p5 = conv(p4, w32, stride=2)
    top = conv(p5, w8, kernel=1)
    mid = conv(keras.layers.Concatenate()([keras.layers.UpSampling2D()(top), p4]), w8)
    low = conv(keras.layers.Concatenate()([keras.layers.UpSampling2D()(conv(mid, w4, 1)), p3]), w4)
    heads = [keras.layers.Conv2D(3 * values, 1, name=f"head_{i}")(f) for i, f in enumerate((low, mid, top))]
    return keras.Model(image, heads), [tf.TensorSpec((1, size, size, 3), tf.float32)]


def _sequence_input(frames: int = 12, features: int = 8) -> tuple[Any, list[tf.TensorSpec]]:
    return keras.Input((frames, features), batch_size=1, name="sequence"), [
        tf.TensorSpec((1, frames, features), tf.float32)
    ]


def lstm_keras3() -> tuple[Any, list[tf.TensorSpec]]:
    """Keras 3 LSTM (16 units, 12 steps): converted as a WHILE loop."""
    seq, specs = _sequence_input()
    x = keras.layers.LSTM(16, return_sequences=True)(seq)
    return keras.Model(seq, keras.layers.Dense(4)(x)), specs


def gru() -> tuple[Any, list[tf.TensorSpec]]:
    """Keras 3 GRU (16 units, 12 steps, last state): converted as a WHILE loop."""
    seq, specs = _sequence_input()
    x = keras.layers.GRU(16)(seq)
    return keras.Model(seq, keras.layers.Dense(4)(x)), specs


def bilstm_keras3() -> tuple[Any, list[tf.TensorSpec]]:
    """Keras 3 Bidirectional LSTM (2 x 12 units): two WHILE loops and a REVERSE_V2."""
    seq, specs = _sequence_input()
    x = keras.layers.Bidirectional(keras.layers.LSTM(12, return_sequences=True))(seq)
    return keras.Model(seq, keras.layers.Dense(4)(x)), specs


def lstm_tf_keras() -> Any:
    """tf_keras LSTM (16 units, 12 steps): the fused UNIDIRECTIONAL_SEQUENCE_LSTM."""
    seq = tf_keras.Input((12, 8), batch_size=1, name="sequence")
    x = tf_keras.layers.LSTM(16, return_sequences=True)(seq)
    return tf_keras.Model(seq, tf_keras.layers.Dense(4)(x))


def bilstm_tf_keras() -> Any:
    """tf_keras Bidirectional LSTM (2 x 12 units): two fused UNIDIRECTIONAL_SEQUENCE_LSTM."""
    seq = tf_keras.Input((12, 8), batch_size=1, name="sequence")
    x = tf_keras.layers.Bidirectional(tf_keras.layers.LSTM(12, return_sequences=True))(seq)
    return tf_keras.Model(seq, tf_keras.layers.Dense(4)(x))


# --- quantization ----------------------------------------------------------------------------


def _representative(specs: list[tf.TensorSpec], name: str) -> Callable[[], Iterator[list[np.ndarray]]]:
    """Seeded calibration inputs: floats uniform in [0, 1) (as the tests feed), token ids over the
    vocabulary, attention masks mostly ones."""

    def samples() -> Iterator[list[np.ndarray]]:
        rng = np.random.default_rng(sum(name.encode()))
        for _ in range(CALIBRATION):
            values = []
            for i, spec in enumerate(specs):
                shape = tuple(spec.shape)
                if spec.dtype == tf.float32:
                    values.append(rng.random(shape, dtype=np.float32))
                elif i == 0:  # BERT's token ids
                    values.append(rng.integers(0, 128, shape).astype(np.int32))
                else:  # its attention mask
                    values.append((rng.random(shape) < 0.9).astype(np.int32))
            yield values

    return samples


def full_integer(specs: list[tf.TensorSpec], name: str, int8_io: bool) -> Callable[[Any], None]:
    """Full-integer quantization with a representative dataset; ``int8_io``: int8 float inputs and
    outputs too (integer inputs such as token ids stay int32)."""

    def configure(converter: Any) -> None:
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = _representative(specs, name)
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        if int8_io:
            converter.inference_input_type = tf.int8
        converter.inference_output_type = tf.int8

    return configure


def dynamic_range(converter: Any) -> None:
    """Dynamic-range quantization: int8 weights, float activations (hybrid kernels)."""
    converter.optimizations = [tf.lite.Optimize.DEFAULT]


# --- the set ---------------------------------------------------------------------------------


def _keras3(build: Callable[[], tuple[Any, list[tf.TensorSpec]]], name: str, quant: str = "") -> bytes:
    model, specs = build()
    if quant == "int8":
        return convert(model, full_integer(specs, name, int8_io=specs[0].dtype == tf.float32))
    if quant == "dynamic":
        return convert(model, dynamic_range)
    return convert(model)


#: file stem -> what makes its bytes (each after _seed(stem))
MODELS: dict[str, Callable[[str], bytes]] = {
    "vit_tiny": lambda n: _keras3(vit, n),
    "vit_tiny_int8": lambda n: _keras3(vit, n, "int8"),
    "bert_tiny": lambda n: _keras3(bert, n),
    "bert_tiny_int8": lambda n: _keras3(bert, n, "int8"),
    "whisper_encoder_tiny": lambda n: _keras3(whisper, n),
    "whisper_encoder_tiny_dynamic": lambda n: _keras3(whisper, n, "dynamic"),
    "convnext_tiny": lambda n: _keras3(convnext, n),
    "yolo_fpn_tiny": lambda n: _keras3(yolo_fpn, n),
    "lstm_keras3": lambda n: _keras3(lstm_keras3, n),
    "gru_keras3": lambda n: _keras3(gru, n),
    "bilstm_keras3": lambda n: _keras3(bilstm_keras3, n),
}
if tf_keras is not None:
    MODELS["lstm_tf_keras"] = lambda n: convert(lstm_tf_keras())
    MODELS["bilstm_tf_keras"] = lambda n: convert(bilstm_tf_keras())


def versions() -> dict[str, str]:
    found = {"tensorflow": tf.__version__, "keras": keras.__version__, "numpy": np.__version__}
    if tf_keras is not None:
        found["tf_keras"] = tf_keras.__version__
    return found


def write_set(
    argv: list[str] | None, description: str, default_out: Path, names: list[str], build: Callable[[str], bytes]
) -> int:
    """The command line of a model set kept outside the repository (benchmarks/vision_models.py and
    the like): ``--out DIR`` and ``--only NAME ...``; each model is seeded by its name, built, written
    as ``NAME.tflite`` and entered in the folder's ``manifest.json`` with its size and the versions
    that made it (a manifest already there keeps the entries of models not rebuilt)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", type=Path, default=default_out, help=f"folder written (default {default_out})")
    parser.add_argument("--only", nargs="*", choices=names, help="these models only")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    found = versions()
    print(" ".join(f"{k} {v}" for k, v in found.items()), file=sys.stderr)
    manifest_path = args.out / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
    entries = manifest.get("models", {})
    for name in args.only or names:
        start = time.perf_counter()
        _seed(name)
        data = build(name)
        (args.out / f"{name}.tflite").write_bytes(data)
        entries[name] = {"bytes": len(data), "versions": found}
        print(
            f"{name}.tflite: {len(data) / 1024:.1f} KiB, {time.perf_counter() - start:.0f} s",
            file=sys.stderr,
            flush=True,
        )
        manifest_path.write_text(json.dumps({"models": entries}, indent=1, sort_keys=True) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE, help="folder written (default: this one)")
    parser.add_argument("--only", nargs="*", choices=sorted(MODELS), help="these models only")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if tf_keras is None:
        print("tf_keras is not installed: the fused-LSTM models are skipped", file=sys.stderr)
    print(" ".join(f"{k} {v}" for k, v in versions().items()), file=sys.stderr)
    for name in args.only or MODELS:
        _seed(name)
        data = MODELS[name](name)
        path = args.out / f"{name}.tflite"
        path.write_bytes(data)
        print(f"{path.name}: {len(data) / 1024:.1f} KiB", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
