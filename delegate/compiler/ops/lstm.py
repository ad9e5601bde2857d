"""UNIDIRECTIONAL_SEQUENCE_LSTM, the fused LSTM layer tf_keras models convert to, in float.

Per time step t, for gates i (input), f (forget), g (cell) and o (output), each with input weights
W (units x input), recurrent weights R (units x units) and a bias b, as TFLite's float kernel:

    i = sigmoid(W_i x_t + R_i h + b_i)   f = sigmoid(W_f x_t + R_f h + b_f)
    g = act(W_g x_t + R_g h + b_g)       o = sigmoid(W_o x_t + R_o h + b_o)
    c = f * c + i * g  (clipped to +-cell_clip when cell_clip > 0)
    h = o * act(c), the step's output

The initial h and c are the node's inputs 18 (output_state) and 19 (cell_state), variable tensors
that TFLite's kernel leaves holding the last step's h and c: the next invoke starts from them
(until the interpreter resets its variables). The kernel does the same: it reads them, and writes
the last h and c back into them (``Op.updated_inputs``), which the partition hands back to TFLite
as outputs and keeps in buffers under any storage (partition.py).

Taken: tanh activation, no CIFG (input gate weights present), no peephole, projection or layer
norm weights, full (not diagonal) recurrent weights, constant float32 weights and biases, batch-
or time-major input of rank 3. Anything else stays on TFLite's CPU kernels, with the reason.

The kernel: one work-group per batch element loops over the time steps; each work-item owns
slices of 4 units (a FLT4 of each gate) and keeps c in local memory; h goes through local memory
(two buffers, alternating, so one barrier per step suffices). The weights are packed so that one
FLT4 read gives one gate of a slice's 4 units for one input channel. On a CPU device (PoCL) a
work-group is one core's loop over its work-items, so a step costs no launch; on a GPU the
sequence is as serial as TFLite's, one launch for the whole layer.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from ...context import model
from .. import layout
from ..graph import Activation, Builtin, Graph, Node
from ..kernel import ENTRY, Kernel, RequiredWorkGroup
from ..kernels.common.math_code import logistic_code, tanh_code
from ..kernels.common.pieces import buffer_object, operation
from .base import EmitContext, Op, value_tensors
from .traits import Traits

#: TFLite's input positions (lstm_shared.h): input to gate weights, recurrent weights, biases
_INPUT_WEIGHTS = (1, 2, 3, 4)
_RECURRENT_WEIGHTS = (5, 6, 7, 8)
_BIASES = (12, 13, 14, 15)
_OUTPUT_STATE, _CELL_STATE = 18, 19
#: optional inputs the kernel does not implement: peephole weights, projection, layer norm
_ABSENT = {9: "peephole", 10: "peephole", 11: "peephole", 16: "projection", 17: "projection bias"}
_ABSENT.update({i: "layer norm" for i in (20, 21, 22, 23)})
#: the most units a work-group keeps in local memory (48 bytes a slice of 4 units: 16 KiB at most)
MAX_UNITS = 1024
#: the most work-items of a work-group (each owns one slice of 4 units or more)
MAX_WORK_GROUP = 64


def _clip_code(var: str, clip: float) -> str:
    if clip <= 0.0:
        return ""
    return f"    {var} = {var} > (float4)({clip!r}f) ? (float4)({clip!r}f) : {var};\n" + (
        f"    {var} = {var} < (float4)(-{clip!r}f) ? (float4)(-{clip!r}f) : {var};\n"
    )


def _gate_sums(source: str, weights: str, slices: int) -> str:
    """Statements adding ``weights`` times every channel of ``source`` (a float4 expression of the
    channel slice ``k``, of ``slices``) into the four gate sums of unit slice ``s``."""
    lanes = "".join(
        f"      {{ float v = x.{component}; int w = ((k * 4 + {lane}) * SU + s) * 4;\n"
        f"        ai += v * convert_float4(args.{weights}.Read(w));\n"
        f"        af += v * convert_float4(args.{weights}.Read(w + 1));\n"
        f"        ag += v * convert_float4(args.{weights}.Read(w + 2));\n"
        f"        ao += v * convert_float4(args.{weights}.Read(w + 3)); }}\n"
        for lane, component in enumerate("xyzw")
    )
    return f"    for (int k = 0; k < {slices}; ++k) {{\n      float4 x = {source};\n{lanes}    }}\n"


def _kernel_text(units: int, inputs: int, steps: int, time_major: bool, cell_clip: float) -> list:
    su, si = layout.slices(units), layout.slices(inputs)
    x_at = "bb, t, k, 0" if time_major else "t, bb, k, 0"
    return [
        "\n",
        ENTRY,
        f"""  __local float4 hbuf[{2 * su}];
  __local float4 cbuf[{su}];
  const int SU = {su};
  int lid = LOCAL_ID_0;
  int lanes = GROUP_SIZE_0;
  int bb = GLOBAL_ID_1;
  for (int s = lid; s < SU; s += lanes) {{
    hbuf[s] = convert_float4(args.h_state.Read(bb, 0, s, 0));
    cbuf[s] = convert_float4(args.c_state.Read(bb, 0, s, 0));
  }}
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int t = 0; t < {steps}; ++t) {{
  __local float4* hin = hbuf + (t & 1) * SU;
  __local float4* hout = hbuf + ((t + 1) & 1) * SU;
  for (int s = lid; s < SU; s += lanes) {{
    float4 ai = convert_float4(args.biases.Read(s * 4)), af = convert_float4(args.biases.Read(s * 4 + 1));
    float4 ag = convert_float4(args.biases.Read(s * 4 + 2)), ao = convert_float4(args.biases.Read(s * 4 + 3));
""",
        _gate_sums(f"convert_float4(args.src_tensor.Read({x_at}))", "input_weights", si),
        _gate_sums("hin[k]", "recurrent_weights", su),
        f"""    float4 ig, fg, og, gg, tc;
    {logistic_code("ig", "ai")}
    {logistic_code("fg", "af")}
    {logistic_code("og", "ao")}
    {tanh_code("gg", "ag")}
    float4 c = fg * cbuf[s] + ig * gg;
{_clip_code("c", cell_clip)}    {tanh_code("tc", "c")}
    float4 h = og * tc;
    int left = {units} - s * 4;  // the last slice's lanes past the units stay zero
    if (left < 4) {{ c.w = 0.0f; h.w = 0.0f; }}
    if (left < 3) {{ c.z = 0.0f; h.z = 0.0f; }}
    if (left < 2) {{ c.y = 0.0f; h.y = 0.0f; }}
    cbuf[s] = c;
    hout[s] = h;
    args.dst_tensor.Write(TO_FLT4(h), {x_at.replace("k", "s")});
  }}
  barrier(CLK_LOCAL_MEM_FENCE);
  }}
  for (int s = lid; s < SU; s += lanes) {{
    args.h_state.Write(TO_FLT4(hbuf[({steps} & 1) * SU + s]), bb, 0, s, 0);
    args.c_state.Write(TO_FLT4(cbuf[s]), bb, 0, s, 0);
  }}
}}
""",
    ]


def pack_gate_weights(gates: list[np.ndarray], units: int, channels: int, dtype: np.dtype) -> bytes:
    """Four [units, channels] gate matrices as FLT4s: for (channel k, unit slice s, gate g) the
    gate's weights of the slice's 4 units from channel k (channels padded to 4, units to 4)."""
    su, ck = layout.slices(units), layout.slices(channels) * 4
    packed = np.zeros((ck, su * 4, 4), np.float32)  # (k, unit, gate)
    for g, w in enumerate(gates):
        packed[:channels, :units, g] = np.asarray(w, np.float32).reshape(units, channels).T
    # (k, s, u4, g) -> (k, s, g, u4)
    return np.ascontiguousarray(packed.reshape(ck, su, 4, 4).transpose(0, 1, 3, 2)).astype(dtype).tobytes()


def pack_gate_biases(biases: list[np.ndarray], units: int, dtype: np.dtype) -> bytes:
    """Four [units] gate biases as FLT4s: for (unit slice s, gate g) the slice's 4 units."""
    su = layout.slices(units)
    packed = np.zeros((4, su * 4), np.float32)
    for g, b in enumerate(biases):
        packed[g, :units] = np.asarray(b, np.float32).reshape(units)
    return np.ascontiguousarray(packed.reshape(4, su, 4).transpose(1, 0, 2)).astype(dtype).tobytes()


class SequenceLstm(Op):
    """UNIDIRECTIONAL_SEQUENCE_LSTM in float (module docstring)."""

    codes = (Builtin.UNIDIRECTIONAL_SEQUENCE_LSTM,)
    data_inputs = 1
    code_traits: ClassVar[dict[int, Traits]] = {Builtin.UNIDIRECTIONAL_SEQUENCE_LSTM: Traits(product=True)}

    def check(self, node: Node, graph: Graph) -> str | None:
        if len(node.inputs) not in (20, 24) or len(node.outputs) != 1:
            return f"{len(node.inputs)} inputs and {len(node.outputs)} outputs (20 or 24 inputs and 1 output expected)"
        inputs = node.inputs
        for position, what in _ABSENT.items():
            if position < len(inputs) and inputs[position] >= 0:
                return f"{what} weights (input {position}) are left to TFLite's CPU kernels"
        if inputs[1] < 0 or inputs[12] < 0:
            return "a coupled input and forget gate (CIFG: no input gate weights) is left to TFLite's CPU kernels"
        if node.params.get("activation") != Activation.TANH:
            return f"activation {node.params.get('activation')} is left to TFLite's CPU kernels (tanh is taken)"
        weights = [inputs[i] for i in (*_INPUT_WEIGHTS, *_RECURRENT_WEIGHTS, *_BIASES)]
        states = [inputs[_OUTPUT_STATE], inputs[_CELL_STATE]]
        problem = value_tensors(graph, [inputs[0], *weights, *states, node.outputs[0]])
        if problem:
            return problem
        for i in weights:
            if not graph.tensor(i).is_constant:
                return f"weights or bias tensor {i} is not a constant"
        x = graph.tensor(inputs[0]).shape
        if len(x) != 3:
            return f"input of rank {len(x)} (3 expected)"
        batch = x[1] if node.params.get("time_major") else x[0]
        units, channels = self._units(node, graph), x[2]
        expected = {
            **{i: (units, channels) for i in _INPUT_WEIGHTS},
            **{i: (units, units) for i in _RECURRENT_WEIGHTS},
            **{i: (units,) for i in _BIASES},
            _OUTPUT_STATE: (batch, units),
            _CELL_STATE: (batch, units),
        }
        for position, shape in expected.items():
            if graph.tensor(inputs[position]).shape != shape:
                return f"input {position} has shape {list(graph.tensor(inputs[position]).shape)}, not {list(shape)}"
        if units > MAX_UNITS:
            return f"{units} units (at most {MAX_UNITS}: the state lives in a work-group's local memory)"
        for position in (_OUTPUT_STATE, _CELL_STATE):
            state = inputs[position]
            if not graph.tensor(state).is_variable:
                return f"state input {position} (tensor {state}) is not a variable tensor"
            if any(other.index != node.index and state in other.inputs for other in graph.nodes.values()):
                return f"state tensor {state} is read by another node too"
        return None

    @staticmethod
    def _units(node: Node, graph: Graph) -> int:
        return graph.tensor(node.inputs[2]).shape[0]

    def implied_shape(self, node: Node, graph: Graph) -> tuple[int, ...] | None:
        x = graph.tensor(node.inputs[0]).shape
        return (*x[:-1], self._units(node, graph))

    def macs(self, node: Node, graph: Graph) -> int:
        x = graph.tensor(node.inputs[0]).shape
        units = self._units(node, graph)
        return x[0] * x[1] * 4 * units * (x[2] + units)

    def updated_inputs(self, node: Node) -> tuple[int, ...]:
        return (node.inputs[_OUTPUT_STATE], node.inputs[_CELL_STATE])

    def emit(self, node: Node, ctx: EmitContext) -> Kernel:
        graph, inputs = ctx.graph, node.inputs
        x = graph.tensor(inputs[0]).shape
        time_major = bool(node.params.get("time_major"))
        steps, batch = (x[0], x[1]) if time_major else (x[1], x[0])
        units, channels = self._units(node, graph), x[2]

        def values(positions: tuple[int, ...]) -> list[np.ndarray]:
            found = [graph.tensor(inputs[i]).constant for i in positions]
            if any(v is None for v in found):
                raise ValueError(f"{node.name}: a weight's value was not read")
            return found  # type: ignore[return-value]

        objects = [
            buffer_object("input_weights", pack_gate_weights(values(_INPUT_WEIGHTS), units, channels, ctx.dtype),
                          ctx.dtype, element_size=4),
            buffer_object("recurrent_weights", pack_gate_weights(values(_RECURRENT_WEIGHTS), units, units, ctx.dtype),
                          ctx.dtype, element_size=4),
            buffer_object("biases", pack_gate_biases(values(_BIASES), units, ctx.dtype), ctx.dtype, element_size=4),
        ]  # fmt: skip
        group = min(layout.slices(units), MAX_WORK_GROUP)
        body = _kernel_text(units, channels, steps, time_major, float(node.params.get("cell_clip", 0.0)))
        kernel = operation(body, srcs=["src_tensor"], work_group=RequiredWorkGroup((group, 1, 1)),
                           buffer_objects=objects)  # fmt: skip
        kernel.operation.dst_tensors_names += ["h_state", "c_state"]
        kernel.operation.tensor_to_grid = model.TensorToGrid.CUSTOM
        kernel.operation.grid_size = model.Int3(group, batch, 1)
        return kernel


OP = SequenceLstm()
