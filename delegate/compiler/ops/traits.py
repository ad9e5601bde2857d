"""What the passes around code generation ask of an op, declared by the op itself (``Op.traits``):
how its integer kernel treats quantization (quant.py), its role in half-precision storage
(precision.py), its weights for dynamic-range dequantization (fold.py), whether it takes a
kernel of its own (cpu_choice.py). A pass asks ``traits_of(code)``; it keeps no table of codes."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Quantization(Enum):
    """How the op's integer (int8 / uint8) kernel treats its output's quantization (quant.py)."""

    #: no quantized form in the compiler: a quantized node stays on CPU
    NONE = "none"
    #: computes in real values and requantizes onto the output's grid
    REQUANTIZES = "requantizes"
    #: moves, picks, pads with or averages the input's integers without requantizing them
    #: (TFLite's kernels, ai-edge-litert 2.3: the output's integers are the input's, read on the
    #: output's scale and zero point), or rejects a model whose int8 / uint8 tensors differ in
    #: quantization (MIRROR_PAD, EXPAND_DIMS, PADV2's pad value, REDUCE_MAX / MIN). Carried in float
    #: such a node agrees with TFLite only when every such tensor has one quantization (quant.py).
    KEEPS_INTEGERS = "keeps_integers"


@dataclass(frozen=True)
class Traits:
    """One op code's traits; the defaults are those of an op no pass treats specially."""

    quantization: Quantization = Quantization.NONE
    #: its quantize-and-dequantize step rounds with the zero point (TFLite's average pooling)
    rounds_with_zero_point: bool = False
    #: a matrix product: (position of its data input, position of its constant weights)
    matrix_product: tuple[int, int] | None = None
    #: a product of its inputs (matrix products, BATCH_MATMUL): a value small enough to vanish in
    #: half that it writes may come from its inputs (precision.py's LOG inputs)
    product: bool = False
    #: its output's magnitude is bounded by its inputs' (data movement, ADD, clamps): a bound or
    #: a float32 storage need travels through it (precision.py)
    passes_bound: bool = False
    #: small values in, small values out (MUL, SQRT, reductions): a value too small for half that
    #: it writes comes from its inputs, which then keep float32 too (precision.py)
    keeps_small: bool = False
    #: the input position whose small values its output magnifies (LOG, RSQRT, a DIV's divisor)
    small_value_input: int | None = None
    #: the largest magnitude of its output, whatever its input (RELU6: 6)
    output_bound: float | None = None
    #: TFLite's hybrid kernel: (position of the int8 weights, position of the float activations)
    hybrid_weights: tuple[int, int] | None = None
    #: it launches a kernel of its own (not linked into its producer's, not a view, not read in place)
    own_kernel: bool = True
    #: its ``Op.fold`` picks values without arithmetic on them, so it folds constants of any type
    #: exactly (float32 and bool too, not only the small integers of shape arithmetic): a node all
    #: of whose inputs are constants needs no kernel (shapes.py)
    folds_values: bool = False


#: the traits of a code no op declares
NO_TRAITS = Traits()

#: the common traits, named for what they are
MOVES_INTEGERS = Traits(quantization=Quantization.KEEPS_INTEGERS, passes_bound=True, keeps_small=True)
#: the convolutions and FULLY_CONNECTED: data input 0, constant weights 1 (TRANSPOSE_CONV differs)
MATRIX_PRODUCT = Traits(
    quantization=Quantization.REQUANTIZES, matrix_product=(0, 1), product=True, hybrid_weights=(1, 0)
)
