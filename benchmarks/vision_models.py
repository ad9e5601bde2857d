#!/usr/bin/env python3
"""Writes the vision set: converter-made architectures the delegate was not tuned on.

Each model is built with random seeded weights (``weights=None``; keras.applications where it has
the architecture) and goes through the real converter (``tf.lite.TFLiteConverter.from_keras_model``,
tests/models/make_models.py's ``convert``). Inputs are smaller than the architectures' usual 224
so that PoCL's cold compiles and the timed rounds fit two slow cores; the table below, the files'
names and the written ``manifest.json`` (with the TensorFlow / Keras versions) say which. The
int8 variants are full-integer (int8 in and out), calibrated on 16 seeded images in [0, 1), and
hold their float model's weights.

| file | input | architecture |
| --- | --- | --- |
| efficientnet_b0..b3 | 128x128x3 | keras.applications EfficientNetB0..B3, 1000 classes |
| resnet50 | 128x128x3 | keras.applications ResNet50, 1000 classes |
| densenet121 | 128x128x3 | keras.applications DenseNet121, 1000 classes |
| mobilenet_v3_small, _large | 160x160x3 | keras.applications MobileNetV3Small / Large, 1000 classes |
| mobilenet_v2_160 | 160x160x3 | keras.applications MobileNetV2 (alpha 1.0), 1000 classes |
| ssd_mobilenet_v2 | 160x160x3 | MobileNetV2 (alpha 0.5) backbone, SSD heads on its 10x10 and 5x5 maps
  and two extra strided maps (3x3, 2x2): 6 anchors x 21 classes (softmax) and 6 x 4 box offsets |
| yolo_like | 160x160x3 | Conv/BatchNorm/SiLU backbone with residual stages, FPN (upsample +
  concatenate), 3 heads of 3 anchors x 25 (sigmoid) |
| mlp_mixer | 128x128x3 | 16x16 patches (64 tokens of 128), 4 Mixer blocks (token MLP 64, channel
  MLP 256, GELU), 100 classes |
| regnet_like | 128x128x3 | RegNetX-style: 7 bottleneck blocks whose 3x3 convolutions are grouped
  (24 channels per group, 2 to 22 groups), 1000 classes |
| mobilenet_v1 | 160x160x3 | keras.applications MobileNet (alpha 0.75), 1000 classes |
| *_int8 | as the float one | efficientnet_b0, mobilenet_v1, mobilenet_v3_small, resnet50,
  densenet121, yolo_like and regnet_like, full-integer |

Run with the TensorFlow venv's Python (TensorFlow 2.21, Keras 3):

    TF_VENV/bin/python benchmarks/vision_models.py [--out DIR] [--only NAME ...]

The default folder is ``~/.cache/tflite-opencl-delegate/vision-set`` (the files are 1 to 100 MB:
not committed); benchmarks/vision_regression.py measures that folder.
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

import tensorflow as tf

# the converter, seeding and full-integer setup of the committed test models
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "models"))
import make_models

keras = tf.keras
applications = keras.applications
layers = keras.layers
DEFAULT_OUT = Path.home() / ".cache" / "tflite-opencl-delegate" / "vision-set"

Built = tuple[Any, list[tf.TensorSpec]]


def _image(size: int) -> tuple[Any, list[tf.TensorSpec]]:
    return keras.Input((size, size, 3), batch_size=1, name="image"), [tf.TensorSpec((1, size, size, 3), tf.float32)]


def _application(make: Callable[..., Any], size: int, **kwargs: Any) -> Callable[[], Built]:
    """A keras.applications model at ``size`` with random weights and batch 1."""

    def build() -> Built:
        image, specs = _image(size)
        return make(input_tensor=image, weights=None, **kwargs), specs

    return build


def _conv(x: Any, width: int, kernel: int = 3, stride: int = 1) -> Any:
    x = layers.Conv2D(width, kernel, strides=stride, padding="same", use_bias=False)(x)
    x = layers.BatchNormalization()(x)
    return layers.Activation("silu")(x)


def ssd_mobilenet_v2() -> Built:
    """SSD-style: a MobileNetV2 backbone (alpha 0.5), extra strided layers, and per map a 3x3 class
    head and box head, reshaped and concatenated over the maps (as SSD's converted graphs are)."""
    anchors, classes = 6, 21
    image, specs = _image(160)
    backbone = applications.MobileNetV2(input_tensor=image, alpha=0.5, include_top=False, weights=None)
    maps = [backbone.get_layer("block_13_expand_relu").output, backbone.get_layer("out_relu").output]
    x = maps[-1]
    for width in (128, 64):
        x = layers.Conv2D(width // 2, 1, activation="relu6")(x)
        x = layers.Conv2D(width, 3, strides=2, padding="same", activation="relu6")(x)
        maps.append(x)
    scores, boxes = [], []
    for feature in maps:
        s = layers.Conv2D(anchors * classes, 3, padding="same")(feature)
        b = layers.Conv2D(anchors * 4, 3, padding="same")(feature)
        scores.append(layers.Reshape((-1, classes))(s))
        boxes.append(layers.Reshape((-1, 4))(b))
    scores_out = layers.Softmax(name="scores")(layers.Concatenate(axis=1)(scores))
    boxes_out = layers.Concatenate(axis=1, name="boxes")(boxes)
    return keras.Model(image, [boxes_out, scores_out]), specs


def yolo_like() -> Built:
    """YOLO-style: Conv/BN/SiLU stem and residual stages to 1/32, a top-down FPN (upsample and
    concatenate), 3 heads of 3 anchors x (5 + 20 classes), sigmoid."""
    image, specs = _image(160)
    x = _conv(image, 16, 3, 2)
    features = []
    for width in (32, 64, 128, 256):
        x = _conv(x, width, 3, 2)
        residual = x
        x = _conv(_conv(x, width // 2, 1), width, 3)
        x = layers.Add()([x, residual])
        features.append(x)
    p5 = _conv(features[3], 128, 1)
    p4 = _conv(layers.Concatenate()([layers.UpSampling2D()(p5), features[2]]), 64, 3)
    p3 = _conv(layers.Concatenate()([layers.UpSampling2D()(p4), features[1]]), 32, 3)
    outputs = []
    for level in (p3, p4, p5):
        head = layers.Conv2D(3 * 25, 1)(level)
        outputs.append(layers.Activation("sigmoid")(layers.Reshape((-1, 3, 25))(head)))
    return keras.Model(image, outputs), specs


def mlp_mixer() -> Built:
    """MLP-Mixer: 16x16 patches of a 128x128 image (64 tokens of 128), 4 blocks of token mixing
    (transpose, GELU MLP over tokens) and channel mixing (GELU MLP over channels), LayerNorm,
    average over tokens, 100 classes."""
    tokens, hidden = 64, 128
    image, specs = _image(128)
    x = layers.Conv2D(hidden, 16, strides=16, name="patches")(image)
    x = layers.Reshape((tokens, hidden))(x)
    for _ in range(4):
        h = layers.LayerNormalization(epsilon=1e-6)(x)
        h = layers.Permute((2, 1))(h)
        h = layers.Dense(tokens, activation="gelu")(h)
        h = layers.Dense(tokens)(h)
        x = x + layers.Permute((2, 1))(h)
        h = layers.LayerNormalization(epsilon=1e-6)(x)
        h = layers.Dense(2 * hidden, activation="gelu")(h)
        x = x + layers.Dense(hidden)(h)
    x = layers.LayerNormalization(epsilon=1e-6)(x)
    x = layers.GlobalAveragePooling1D()(x)
    return keras.Model(image, layers.Dense(100, name="logits")(x)), specs


def regnet_like() -> Built:
    """RegNetX-style: a strided stem, then bottleneck blocks (1x1, grouped 3x3 of 24 channels per
    group, 1x1; BatchNorm, ReLU; a residual where the shape allows), widths 48 to 528, four
    strided, global average pool, 1000 classes."""
    image, specs = _image(128)
    x = _conv(image, 32, 3, 2)
    for width, stride in ((48, 2), (48, 1), (96, 2), (96, 1), (240, 2), (240, 1), (528, 2)):
        y = layers.ReLU()(layers.BatchNormalization()(layers.Conv2D(width, 1, use_bias=False)(x)))
        y = layers.Conv2D(width, 3, strides=stride, padding="same", groups=width // 24, use_bias=False)(y)
        y = layers.ReLU()(layers.BatchNormalization()(y))
        y = layers.BatchNormalization()(layers.Conv2D(width, 1, use_bias=False)(y))
        if stride == 1 and x.shape[-1] == width:
            y = layers.Add()([y, x])
        x = layers.ReLU()(y)
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(image, layers.Dense(1000, name="logits")(x)), specs


#: file stem -> its builder; a ``_int8`` stem is its float model, full-integer
BUILDERS: dict[str, Callable[[], Built]] = {
    "efficientnet_b0": _application(applications.EfficientNetB0, 128),
    "efficientnet_b1": _application(applications.EfficientNetB1, 128),
    "efficientnet_b2": _application(applications.EfficientNetB2, 128),
    "efficientnet_b3": _application(applications.EfficientNetB3, 128),
    "resnet50": _application(applications.ResNet50, 128),
    "densenet121": _application(applications.DenseNet121, 128),
    "mobilenet_v3_small": _application(applications.MobileNetV3Small, 160),
    "mobilenet_v3_large": _application(applications.MobileNetV3Large, 160),
    "mobilenet_v2_160": _application(applications.MobileNetV2, 160),
    "ssd_mobilenet_v2": ssd_mobilenet_v2,
    "yolo_like": yolo_like,
    "mlp_mixer": mlp_mixer,
    "regnet_like": regnet_like,
    "mobilenet_v1": _application(applications.MobileNet, 160, alpha=0.75),
}
INT8 = ("efficientnet_b0", "mobilenet_v1", "mobilenet_v3_small", "resnet50", "densenet121", "yolo_like", "regnet_like")
NAMES = [*BUILDERS, *(f"{name}_int8" for name in INT8)]


def build(name: str) -> bytes:
    """The .tflite bytes of ``name``; ``write_set`` seeds it by its float model's name (one set of weights)."""
    model, specs = BUILDERS[name.removesuffix("_int8")]()
    configure = make_models.full_integer(specs, name, int8_io=True) if name.endswith("_int8") else None
    with contextlib.redirect_stdout(io.StringIO()):  # Keras' export prints every traced signature
        return make_models.convert(model, configure)


def main(argv: list[str] | None = None) -> int:
    return make_models.write_set(argv, __doc__.splitlines()[0], DEFAULT_OUT, NAMES, build)


if __name__ == "__main__":
    sys.exit(main())
