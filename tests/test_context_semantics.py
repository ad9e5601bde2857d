"""Well-formed contexts whose values mean nothing runnable: each refused by name, before a device
is touched, through ``Runtime.load`` (model, bytes, path) and ``python -m delegate run CONTEXT``.

The native reader accepts these files (they are valid FlatBuffers of the schema, and ``inspect``
still reads them); context/semantics.py is where the rules live (docs/runtime.md, "Resource
limits" and "Trust model").
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable

import pytest

from delegate import ContextFile, ContextFormatError, Runtime, serialize_context
from delegate.cli import main
from delegate.context import model as m
from delegate.context.semantics import check_semantics
from delegate.context.synthetic import synthetic_mobilenet
from delegate.runtime import memory

from .runtime_helpers import chain, desc

Change = Callable[[m.InferenceContext], None]
#: a device name no machine has: a check that ran after device selection would raise DeviceNotFoundError
NO_DEVICE = "no device has this name"


def _set(path: str, value: object) -> Change:
    """A change setting the attribute at the dotted ``path`` (``nodes[0].gpu_op.x``) of a context."""

    def change(ctx: m.InferenceContext) -> None:
        *head, last = path.split(".")
        obj: object = ctx
        for part in head:
            name, _, index = part.partition("[")
            obj = getattr(obj, name)
            if index:
                obj = obj[int(index.rstrip("]"))]  # type: ignore[index]
        setattr(obj, last, value)

    return change


def _texture_object(ctx: m.InferenceContext) -> None:
    texture = m.Texture2DDescriptor(element_type=m.DataType.FLOAT32, size=m.Int2(4, 0))
    ctx.nodes[0].gpu_op.arguments.texture2d_objects.append(m.Texture2DDescriptorMapValue("lut", texture))


def _tensor_object(ctx: m.InferenceContext) -> None:
    constant = desc(4, w=0)
    ctx.nodes[0].gpu_op.arguments.tensor_objects.append(m.TensorDescriptorMapValue("weights", constant))


def _custom_grid(ctx: m.InferenceContext) -> None:
    op = ctx.nodes[0].gpu_op
    op.tensor_to_grid = m.TensorToGrid.CUSTOM
    op.grid_size = m.Int3(16, 0, 2)


#: (label, change to chain(1), what the message must say: where, field, value and rule)
CASES: list[tuple[str, Change, str]] = [
    ("height -5", _set("tensors[1].desc.shape.h", -5), r"tensor 1: desc\.shape\.h is -5; every dimension of a tensor"),
    ("height 0", _set("tensors[1].desc.shape.h", 0), r"tensor 1: desc\.shape\.h is 0; every dimension .* at least 1"),
    ("depth -1", _set("tensors[0].desc.shape.d", -1), r"tensor 0: desc\.shape\.d is -1; every dimension"),
    ("no shape", _set("tensors[2].desc.shape", None), r"tensor 2: desc\.shape is absent; a tensor needs its shape"),
    ("work-group -8", _set("nodes[0].gpu_op.work_group_size.x", -8),
     r"node 0 \(inc0\): gpu_op\.work_group_size\.x is -8; each axis of a work-group is a number of work-items, "
     r"at least 1"),
    ("work-group 0", _set("nodes[1].gpu_op.work_group_size.z", 0),
     r"node 1 \(residual\): gpu_op\.work_group_size\.z is 0; each axis of a work-group"),
    ("custom grid 0", _custom_grid, r"node 0 \(inc0\): gpu_op\.grid_size\.y is 0; a CUSTOM grid is at least 1"),
    ("flush period 0", lambda c: (_set("flush_periodically", True)(c), _set("flush_period", 0)(c)),
     r"flush_period is 0; flush_periodically needs a period of at least 1 launch"),
    ("flush period -3", _set("flush_period", -3),
     r"flush_period is -3; a flush period is a number of launches, not negative"),
    ("dangling node input", _set("nodes[0].input_ids", [42]),
     r"node 0 \(inc0\): input_ids\[0\] is 42; no tensor declares that id"),
    ("dangling node output", _set("nodes[1].output_ids", [7]),
     r"node 1 \(residual\): output_ids\[0\] is 7; no tensor declares that id"),
    ("repeated node output", lambda c: (_set("nodes[1].output_ids", [2, 2])(c),
                                        _set("nodes[1].gpu_op.dst_tensors_names", ["dst_tensor", "again"])(c)),
     r"node 1 \(residual\): output_ids\[1\] is 2; listed twice; each id appears once in output_ids"),
    ("dangling context input", _set("input_ids", [9]), r"input_ids\[0\] is 9; no tensor declares that id"),
    ("dangling context output", _set("output_ids", [-1]), r"output_ids\[0\] is -1; no tensor declares that id"),
    ("repeated context input", _set("input_ids", [0, 0]), r"input_ids\[1\] is 0; listed twice"),
    ("duplicate tensor id", _set("tensors[2].id", 1),
     r"tensors\[2\]: id is 1; tensors\[1\] declares it too; tensor ids are unique"),
    ("negative tensor id", _set("tensors[0].id", -4), r"tensors\[0\]: id is -4; tensor ids are not negative"),
    ("dangling variable", _set("variable_ids_and_refs", [m.PairOfValueIds(12, 0)]),
     r"variable_ids_and_refs\[0\]: first is 12; no tensor declares that id"),
    ("negative variable ref", _set("variable_ids_and_refs", [m.PairOfValueIds(1, -2)]),
     r"variable_ids_and_refs\[0\]: second is -2; a variable ref is a TFLite tensor index"),
    ("variable listed twice", _set("variable_ids_and_refs", [m.PairOfValueIds(1, 0), m.PairOfValueIds(1, 3)]),
     r"variable_ids_and_refs\[1\]: first is 1; variable_ids_and_refs\[0\] names it too"),
    ("tensor without descriptor", _set("tensors[1].desc", None),
     r"tensor 1: desc is absent; every tensor needs a descriptor"),
    ("node without kernel", _set("nodes[0].gpu_op", None),
     r"node 0 \(inc0\): gpu_op is absent; every node runs a kernel"),
    ("names and ids", _set("nodes[1].gpu_op.src_tensors_names", ["a"]),
     r"node 1 \(residual\): gpu_op\.src_tensors_names is 1 names; the node has 2 input_ids"),
    ("texture size 0", _texture_object,
     r"node 0 \(inc0\): gpu_op\.arguments\.texture2d_objects\['lut'\]\.size\.y is 0; a texture is at least 1 texel"),
    ("constant width 0", _tensor_object,
     r"node 0 \(inc0\): gpu_op\.arguments\.tensor_objects\['weights'\]\.shape\.w is 0; every dimension"),
    ("buffer size -4", lambda c: c.nodes[0].gpu_op.arguments.buffer_objects.append(
        m.BufferDescriptorMapValue("scratch", m.BufferDescriptor(size=-4))),
     r"buffer_objects\['scratch'\]\.size is -4; a size is not negative"),
]  # fmt: skip


def _broken(change: Change) -> m.InferenceContext:
    ctx = chain(1)
    change(ctx)
    return ctx


@pytest.mark.parametrize("change,message", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_refused_through_the_api_before_a_device_is_touched(change, message, tmp_path):
    ctx = _broken(change)
    data = serialize_context(ctx, check_schedule=False)
    with ContextFile(data) as f:  # well-formed: the reader takes it, inspect still works
        assert f.to_model() == ctx
    for source, name in ((ctx, "context"), (data, "<buffer>")):
        with pytest.raises(ContextFormatError, match=message) as info:
            Runtime.load(source, device=NO_DEVICE)
        assert info.value.kind == "semantic" and str(info.value).startswith(f"{name}: ")
        assert "byte offset" not in str(info.value)  # a model has no bytes to point at
    path = tmp_path / "broken.ctx"
    path.write_bytes(data)
    with pytest.raises(ContextFormatError, match=message) as info:
        Runtime.load(path, device=NO_DEVICE)
    assert str(info.value).startswith(f"{path}: ")  # the file is named


@pytest.mark.parametrize(
    "path,value,message",
    [
        ("precision", 7, r"^context: precision is 7; CalculationsPrecision has values 0\.\.2$"),
        (
            "tensors[1].desc.storage_type",
            9,
            r"tensors\[1\]\.desc\.storage_type is 9; TensorStorageType has values 0\.\.6",
        ),
        ("nodes[0].gpu_op.tensor_to_grid", -1, r"nodes\[0\]\.gpu_op\.tensor_to_grid is -1; TensorToGrid has values"),
        (
            "nodes[0].gpu_op.arguments.tensor_linear_objects[0].value.storage_type",
            2,
            r"tensor_linear_objects\[0\]\.value\.storage_type is 2; LinearStorageType has values 0\.\.1",
        ),
    ],
)
def test_enums_out_of_range_in_a_model_are_refused(path, value, message):
    # A file cannot hold them (the native reader refuses them: test_context_bad_input.py); a model
    # built in Python can.
    with pytest.raises(ContextFormatError, match=message):
        Runtime.load(_broken(_set(path, value)), device=NO_DEVICE)


def test_contexts_the_package_writes_pass():
    check_semantics(chain(3))
    check_semantics(synthetic_mobilenet(image_size=32, weight_scale=0))
    # the fields the runtime does not read may hold anything: refs and definitions are bound by name
    ctx = chain(1)
    ctx.nodes[0].gpu_op.definition = m.OperationDef(src_tensors=[m.TensorDescriptor(shape=m.BHWDC())])
    ctx.nodes[0].gpu_op.work_groups_count = m.Int3(0, -1, 0)
    ctx.nodes[0].gpu_op.arguments.tensor_refs.append(m.TensorDescriptorMapValue("x", m.TensorDescriptor()))
    check_semantics(ctx)


def test_the_runtime_never_takes_a_size_below_one_as_one():
    with pytest.raises(ValueError, match=r"shape\.h is 0, not a size"):
        memory.Shape.of(desc(4, h=0))


def _cli_cases() -> list[tuple[str, Change, str]]:
    wanted = ("height -5", "work-group -8", "flush period 0", "dangling node input", "duplicate tensor id")
    return [c for c in CASES if c[0] in wanted]


def test_cli_run_refuses_with_one_line_and_exit_2(tmp_path, capsys):
    for label, change, message in _cli_cases():
        path = tmp_path / f"{label.replace(' ', '_')}.ctx"
        path.write_bytes(serialize_context(_broken(change), check_schedule=False))
        assert main(["run", str(path), "--device", NO_DEVICE]) == 2, label
        captured = capsys.readouterr()
        assert captured.out == ""
        lines = captured.err.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: {path}: "), captured.err
        assert re.search(message, lines[0]), (label, lines[0])


def test_cli_run_in_a_process(tmp_path):
    path = tmp_path / "height.ctx"
    path.write_bytes(serialize_context(_broken(_set("tensors[1].desc.shape.h", -5)), check_schedule=False))
    result = subprocess.run(
        [sys.executable, "-m", "delegate", "run", str(path)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        f"error: {path}: tensor 1: desc.shape.h is -5; every dimension of a tensor shape (b, h, w, d, c) is at least 1"
    ]


def test_run_help_states_the_trust_model(capsys):
    with pytest.raises(SystemExit) as info:
        main(["run", "--help"])
    assert info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "holds OpenCL kernels that run on the device" in text
    assert "run only files you trust as you would a program" in text
    assert "writes out of bounds or never ends" in text and "Trust model" in text
