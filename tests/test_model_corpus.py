"""Every shared model through ``run_model`` (the path of ``python -m delegate run``) against TFLite's CPU kernels.

The corpus is every ``*.tflite`` in ../shared/models, ../shared/models/real and
../shared/models/quant, globbed at collection, so a new file is tested without a change here;
each is one parameter, named by its path under ../shared/models.

- F32 (default options: F32, BUFFER, fusion on): each output within ``F32_TOLERANCE`` (1e-4) of
  its scale, the largest |CPU output|, unless ``F32_EXCEPTIONS`` states another figure and why.
  Quantized outputs are compared dequantized. Models under quant/ get ``QUANT_TOLERANCE``
  (5e-2): their integer (or hybrid) kernels round on TFLite's CPU path where the delegate carries
  real values rounded onto the same grids (delegate/compiler/quant.py), so outputs may be a
  rounding step or, through a deep network, a few steps apart (tests/test_quant.py measures
  them per model).
- F16 (``precision=F16``; F32_F16 on PoCL, whose CPU has no cl_khr_fp16) on the float models
  (float inputs and outputs, not under quant/): each output within ``F16_TOLERANCE`` of its
  scale. Measured on PoCL (session of this test's writing): the worst output 1.8e-3 of its scale
  (face_detection_short_range's classificators), most 4-5e-4; 1e-2 leaves 5x margin.
- A model TFLite's CPU path cannot run under this host is found by trying it first (the
  reference of ``run_model``: the host's Interpreter with its default delegates, XNNPACK); then
  the delegate path must fail too, with a non-empty error, rather than the test skipping. Under
  tflite-runtime 2.14: selfie_segmentation (the unresolved custom op
  Convolution2DTransposeBias, which the delegate runs but the reference cannot) and
  quant/*_dynamic (op versions it cannot load). Under ai-edge-litert 2.3 XNNPACK runs
  Convolution2DTransposeBias, so selfie_segmentation is compared there (fully delegated), and
  quant/*_dynamic load and are compared.

Both interpreters are compared on their first invoke with the same seeded inputs (see
``delegate.model_run``): okay_nabu's resource variables change with every invoke.

Run time on 2 cores shared with other work, tflite-runtime 2.14 (pose_detection deselected):
6 min 19 s (3 min 36 s of CPU) with empty program caches (PoCL builds every kernel, F32 and F16
each: face_landmark, mobilenet_v2 and face_detection take 30-55 s a precision), 31 s with warm
ones (the default program cache, ~/.cache/tflite-opencl-delegate, and PoCL's); under
ai-edge-litert (scripts/test.sh), warm, 55 s. Known failures on the code this was
written against: mediapipe__hand_recrop (wrong outputs, F32 and F16: relative error 0.45),
basic-pitch__nmp (an empty RuntimeError, F32 and F16), mediapipe__pose_detection (a
segmentation fault inside the interpreter's ModifyGraphWithDelegate, which ends the pytest
process: deselect it to see the rest).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import tflite

from delegate.model_run import cpu_interpreter, input_value, run_model

from .helpers import MODELS, shared_path

FOLDERS = ("", "real", "quant")
#: each output's max abs error over its max |CPU output|, F32
F32_TOLERANCE = 1e-4
#: why basic-pitch needs more: TFLite's own CPU paths disagree on it by as much
_BASIC_PITCH = (
    "its front end takes the log of a magnitude spectrogram and normalises it by its range (REDUCE_MIN, "
    "REDUCE_MAX, DIV), which amplifies float rounding: XNNPACK and TFLite's builtin kernels differ from "
    "each other by 2.3-2.7e-4 of each output's scale on the same input, the delegate from XNNPACK by "
    "2.1-2.6e-4 and from the builtin kernels by 4.4-5.3e-4"
)
#: model (path under ../shared/models) -> (F32 tolerance, why it needs more than F32_TOLERANCE).
#: Every other model that runs is within 1e-4 (the worst, face_detection, 7e-7).
#: why selfie_segmentation's mask needs more: on a random image the measure is ill-conditioned
_SELFIE_F32 = (
    "on the seeded random image its mask is a saturated sigmoid: logits from -18.7 down (98.8% of pixels "
    "underflow to 0), where the mask's relative error is the logits' absolute error. Measured on PoCL: "
    "the delegate's logits within 5e-4 of XNNPACK's (7e-6 of their size), the mask 1.0e-4 of its largest "
    "value, 7.9e-9. On a mask that is not saturated the F32 mask is within 1e-3 absolute, no pixel on "
    "the other side of 0.5 (tests/test_mediapipe_ops.py)"
)
F32_EXCEPTIONS: dict[str, tuple[float, str]] = {
    "real/basic-pitch__nmp.tflite": (1e-3, _BASIC_PITCH),
    "real/mediapipe__selfie_segmentation.tflite": (1e-3, _SELFIE_F32),
}
#: quant/ models: each output's max abs error over its max |CPU output| (the issue's target: a
#: step of an int8 output over [0, 1) is 3.9e-3, 2e-2 of small_cnn's largest probability, 0.2)
QUANT_TOLERANCE = 5e-2
_QUANT = "integer and hybrid kernels round where the delegate computes real values (tests/test_quant.py)"
#: each output's max abs error over its max |CPU output|, F16 (measured worst 1.8e-3, see above)
F16_TOLERANCE = 1e-2
#: why selfie_segmentation's mask needs more in F16 (it runs under ai-edge-litert only)
_SELFIE = (
    "on the seeded random image its mask is a saturated sigmoid (largest value 7.9e-9: logits near -19), "
    "below half precision's smallest subnormal (6e-8): fully delegated, the final sigmoid included, half "
    "storage holds the whole mask as 0, an absolute error of 7.9e-9 and a relative one of 1 (F32: 1.0e-4, "
    "see _SELFIE_F32; on a mask that is not saturated, F16 is within 1e-2: tests/test_mediapipe_ops.py)"
)
#: as F32_EXCEPTIONS, for F16 (basic-pitch, 2.3e-2 before its log spectrogram's chain kept float32
#: storage, is within F16_TOLERANCE: 7.7e-3, compiler/precision.py)
F16_EXCEPTIONS: dict[str, tuple[float, str]] = {
    "real/mediapipe__selfie_segmentation.tflite": (1.0, _SELFIE),
}


def _corpus() -> list[Path]:
    return sorted(p for folder in FOLDERS for p in (MODELS / folder).glob("*.tflite"))


def _id(path: Path) -> str:
    return path.relative_to(MODELS).as_posix()


def _is_float_model(path: Path) -> bool:
    """Float inputs and outputs, outside quant/ (whose models compute in integers)."""
    if path.parent.name == "quant":
        return False
    model = tflite.Model.GetRootAsModel(path.read_bytes(), 0)
    graph = model.Subgraphs(0)
    ends = [graph.Inputs(i) for i in range(graph.InputsLength())]
    ends += [graph.Outputs(i) for i in range(graph.OutputsLength())]
    return all(graph.Tensors(t).Type() == tflite.TensorType.FLOAT32 for t in ends)


_MODELS = _corpus()
_ALL = [pytest.param(p, id=_id(p)) for p in _MODELS] or [pytest.param(None, id="no-shared-models")]
_FLOAT = [pytest.param(p, id=_id(p)) for p in _MODELS if _is_float_model(p)] or [
    pytest.param(None, id="no-shared-models")
]


def test_corpus_folders_are_there():
    # Under CI a missing ../shared (or one of its model folders) fails here rather than skipping.
    for folder in FOLDERS:
        shared_path("models", *([folder] if folder else []))


def _cpu_error(path: Path) -> str | None:
    """Why TFLite's CPU path (the reference of run_model) cannot run ``path`` here, or None when it can."""
    try:
        cpu = cpu_interpreter(str(path))
        rng = np.random.default_rng(0)
        for d in cpu.get_input_details():
            cpu.set_tensor(d["index"], input_value(d, rng))
        cpu.invoke()
    except (RuntimeError, ValueError) as exc:
        return str(exc).strip() or type(exc).__name__
    return None


def _host_part(error: str) -> str:
    """What a host's error says of the failing kernel, without the node's number (which differs
    once a delegate has replaced nodes)."""
    return error.strip().split("Node number")[0].strip()


def _check(path: Path | None, options: dict[str, str], tolerance: float, why: str = "") -> None:
    if path is None:
        shared_path("models")  # fails under CI, else skips: ../shared is not beside this checkout
        pytest.skip(f"no *.tflite under {MODELS}")
    cpu_error = _cpu_error(path)
    if cpu_error is not None:
        # The reference cannot run on this host (custom ops its CPU path lacks, or an op version
        # newer than its runtime). Where the delegate takes what the host lacks, it runs the model
        # alone and the report says there is no reference, and why; where the host cannot create
        # or prepare the model at all, its own error comes through unchanged.
        try:
            result = run_model(str(path), options, runs=0, progress=False)
        except (RuntimeError, ValueError) as exc:
            assert _host_part(str(exc)) == _host_part(cpu_error), (str(exc), cpu_error)
            return
        assert result["reference"] and "CPU path cannot run this model" in result["reference"], result
        assert result["outputs"] == [] and result["delegated_nodes"] > 0, result
        return
    result = run_model(str(path), options, runs=0, progress=False)
    failures = [
        f"{o['name']}: max abs error {o['max_abs_error']:.3g} > {tolerance:g} x {o['max_abs_reference']:.3g}"
        for o in result["outputs"]
        if not o["max_abs_error"] <= tolerance * o["max_abs_reference"]  # also false for NaN
    ]
    delegated = f"{result['delegated_nodes']} of {result['total_nodes']} nodes delegated"
    assert not failures, f"{delegated} ({result['precision']}); " + "; ".join(failures) + (f" ({why})" if why else "")


@pytest.mark.opencl
@pytest.mark.parametrize("path", _ALL)
def test_f32_matches_tflite_cpu(path):
    default = (QUANT_TOLERANCE, _QUANT) if path and path.parent.name == "quant" else (F32_TOLERANCE, "")
    tolerance, why = F32_EXCEPTIONS.get(_id(path), default) if path else default
    _check(path, {}, tolerance, why)


@pytest.mark.opencl
@pytest.mark.parametrize("path", _FLOAT)
def test_f16_within_tolerance(path):
    tolerance, why = F16_EXCEPTIONS.get(_id(path), (F16_TOLERANCE, "")) if path else (F16_TOLERANCE, "")
    _check(path, {"precision": "F16"}, tolerance, why)


#: the models the gpu kernel family (option kernel_family, compiler/kernels/gpu/gpu_conv.py) is checked on
#: here, where PoCL would pick the cpu family: the convolution networks it is made for
#: (EfficientNet-B0 too, once ../shared/models has one: none is there at this writing)
_GPU_FAMILY = [
    pytest.param(p, precision, id=f"{_id(p)}-{precision}")
    for p in _MODELS
    if p.parent == MODELS and p.stem.split("_")[0] in ("mobilenet", "unet", "efficientnet") and _is_float_model(p)
    for precision in ("F32", "F16")
] or [pytest.param(None, "F32", id="no-shared-models")]


@pytest.mark.opencl
@pytest.mark.parametrize(("path", "precision"), _GPU_FAMILY)
def test_gpu_kernel_family_matches_tflite_cpu(path, precision):
    tolerance = F32_TOLERANCE if precision == "F32" else F16_TOLERANCE
    _check(path, {"kernel_family": "gpu", "precision": precision}, tolerance)


def test_the_corpus_is_globbed(tmp_path, monkeypatch):
    # A new file in any of the three folders becomes a parameter without a change to this module.
    for folder in FOLDERS:
        (tmp_path / folder).mkdir(exist_ok=True)
        (tmp_path / folder / f"new{len(folder)}.tflite").write_bytes(b"")
    (tmp_path / "real" / "README.md").write_text("not a model")
    monkeypatch.setattr(sys.modules[__name__], "MODELS", tmp_path)
    assert [_id(p) for p in _corpus()] == ["new0.tflite", "quant/new5.tflite", "real/new4.tflite"]
