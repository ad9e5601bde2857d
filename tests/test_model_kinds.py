"""The models people bring (tests/models/, made by tests/models/make_models.py and
make_torch_models.py) give TFLite's CPU outputs through the delegate.

Correctness only: every model with ``cpu_when_faster=false`` (all the delegate can take), with F32
options and again with precision=F16, both interpreters' first invoke on the same seeded inputs
(``delegate.model_run``), each output within its tolerance of max(1, max |CPU output|). How much
of each model is delegated is measured by benchmarks/model_kinds.py (its baseline is in
tests/models/README.md); the coverage of the models with an embedding lookup is held to its floor
(``COVERAGE``).

Each model compiles once per program cache (the default one, ~1 s a kernel program on PoCL), so
a warm run takes a few seconds.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from delegate.model_run import run_model

MODELS = Path(__file__).resolve().parent / "models"
#: float outputs: max abs error over max(1, max |CPU output|)
F32_TOLERANCE = 1e-4
#: half-precision storage (precision=F16), as tests/test_ops.py holds ops to: measured at most 1.4e-3
#: (bert_tiny; the others 4e-5 to 9e-4)
F16_TOLERANCE = 1e-2
#: full-integer models, their int8 outputs in quantization steps: the CPU's integer kernels round
#: at every op where the delegate carries real values rounded onto the same grids
#: (delegate/compiler/quant.py), so through 2 transformer blocks outputs drift a few steps apart
#: (measured: vit_tiny_int8 and bert_tiny_int8 at most 4 steps, about half the values exact; 7 with
#: other random weights)
INT8_STEPS = 8
#: dynamic-range models, as F32_TOLERANCE: the CPU's hybrid kernels quantize activations to int8 at
#: every invoke where the delegate computes them in float with the dequantized weights (measured on
#: whisper_encoder_tiny_dynamic: 7.4e-3 from the CPU, whose XNNPACK and builtin hybrid kernels agree
#: within 2e-7; the delegate 8.6e-3 from the float model with the same weights, the CPU 1.2e-2)
DYNAMIC_TOLERANCE = 2e-2
#: model stem -> (fewest nodes delegated, most partitions) with cpu_when_faster=false: the token
#: embedding (GATHER, EMBEDDING_LOOKUP; bert_tiny_int8's int8 table) and the int32 ids and mask
#: entering the partition, the int8 attention mask (SELECT_V2), torch_transformer's causal mask (a
#: SELECT_V2 of constants, folded), the BERTs' int32 ADD wrapping negative ids (ids + vocab
#: under SELECT(LESS(ids, 0), ...), exact where it is used: compiler/int_ranges.py), tf_keras'
#: fused UNIDIRECTIONAL_SEQUENCE_LSTM, Keras 3's RNN WHILE loops, unrolled (their condition and
#: body subgraphs count), and litert-torch's STABLEHLO_COMPOSITE nodes, inlined with their
#: decompositions' nodes counted (torch_composites_mixed keeps its composite of a CUMSUM on CPU).
COVERAGE = {
    "bert_tiny": (105, 1),
    "bert_tiny_int8": (115, 1),
    "torch_transformer": (110, 1),
    "torch_composites": (121, 1),
    "torch_composites_mixed": (56, 2),
    "torch_vit_fused_qkv": (109, 1),
    "lstm_tf_keras": (2, 1),
    "bilstm_tf_keras": (6, 1),
    "lstm_keras3": (33, 1),
    "gru_keras3": (28, 1),
    "bilstm_keras3": (67, 1),
}
#: model stem -> why it is expected to fail (xfail strict: a fix shows as XPASS and must remove it)
KNOWN_FAILURES: dict[str, str] = {}


def _params() -> list:
    params = []
    for path in sorted(MODELS.glob("*.tflite")):
        marks = (
            [pytest.mark.xfail(strict=True, reason=KNOWN_FAILURES[path.stem])] if path.stem in KNOWN_FAILURES else []
        )
        params.append(pytest.param(path, id=path.stem, marks=marks))
    return params


def test_the_model_set_is_there():
    # the parametrization below is a glob: an empty folder would pass with nothing tested
    assert len(list(MODELS.glob("*.tflite"))) >= 15


@pytest.mark.opencl
@pytest.mark.parametrize("path", _params())
def test_matches_tflite_cpu(path: Path):
    result = run_model(str(path), {"cpu_when_faster": "false"}, runs=0, progress=False)
    assert result["outputs"], "no comparison with TFLite's CPU path"
    tolerance = DYNAMIC_TOLERANCE if path.stem.endswith("_dynamic") else F32_TOLERANCE
    failures = []
    for o in result["outputs"]:
        if "quantization" in o:  # an int8 output: its steps
            if not o["max_abs_steps"] <= INT8_STEPS:
                failures.append(f"{o['name']}: {o['max_abs_steps']} steps apart (at most {INT8_STEPS})")
        elif not o["max_abs_error"] <= tolerance * max(1.0, o["max_abs_reference"]):  # also false for NaN
            scale = max(1.0, o["max_abs_reference"])
            failures.append(f"{o['name']}: max abs error {o['max_abs_error']:.3g} > {tolerance:g} x {scale:.3g}")
    delegated = f"{result['delegated_nodes']} of {result['total_nodes']} nodes delegated"
    assert not failures, f"{delegated}; " + "; ".join(failures)


@pytest.mark.opencl
@pytest.mark.parametrize("path", _params())
def test_matches_tflite_cpu_in_half_precision(path: Path):
    """precision=F16 (F32_F16 on a device without cl_khr_fp16, such as PoCL: tensors stored in half):
    float outputs within F16_TOLERANCE, int8 ones within INT8_STEPS."""
    result = run_model(str(path), {"cpu_when_faster": "false", "precision": "F16"}, runs=0, progress=False)
    assert result["outputs"], "no comparison with TFLite's CPU path"
    tolerance = DYNAMIC_TOLERANCE if path.stem.endswith("_dynamic") else F16_TOLERANCE
    failures = []
    for o in result["outputs"]:
        if "quantization" in o:
            if not o["max_abs_steps"] <= INT8_STEPS:
                failures.append(f"{o['name']}: {o['max_abs_steps']} steps apart (at most {INT8_STEPS})")
        elif not o["max_abs_error"] <= tolerance * max(1.0, o["max_abs_reference"]):
            failures.append(f"{o['name']}: max abs error {o['max_abs_error']:.3g}")
    assert not failures, "; ".join(failures)


@pytest.mark.opencl
@pytest.mark.parametrize("stem", sorted(COVERAGE))
def test_models_stay_delegated(stem: str):
    result = run_model(str(MODELS / f"{stem}.tflite"), {"cpu_when_faster": "false"}, runs=0, progress=False)
    nodes, partitions = COVERAGE[stem]
    assert result["delegated_nodes"] >= nodes and result["partitions"] <= partitions, result["cpu_nodes"]


@pytest.mark.opencl
@pytest.mark.parametrize("stem", ["lstm_keras3", "bilstm_keras3"])
def test_placeholder_shapes_are_reported_as_run_time_shapes(stem: str):
    """The WHILE bodies' TensorList writes (a CONCATENATION of slices whose stored shapes are
    placeholders, signature -1): a valid model, which stays on CPU for a shape known only at run
    time, not for a corrupt file. With WHILE excluded the delegate does not unroll the loops
    (tests/test_while_loops.py), so the bodies are prepared as subgraphs of their own."""
    options = {"cpu_when_faster": "false", "exclude_ops": "WHILE"}
    result = run_model(str(MODELS / f"{stem}.tflite"), options, runs=0, progress=False)
    reasons = result["cpu_nodes"]
    assert not [name for name, why in reasons.items() if "corrupt" in why], reasons
    placeholders = [name for name, why in reasons.items() if "as a placeholder" in why]
    assert placeholders and all("concatenation" in name for name in placeholders), reasons
