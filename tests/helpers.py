"""Shared test helpers: fully populated contexts and conversions to flatc's object API."""

from __future__ import annotations

import importlib
import os
import random
import re
import sys
from collections import defaultdict
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from delegate._generated import serialization_generated as fbgen
from delegate.context import model
from delegate.context.fields import Kind, field_specs

#: The project's shared folder: ../shared beside the checkout, or $DELEGATE_SHARED_DIR.
_BESIDE_CHECKOUT = Path(__file__).resolve().parent.parent.parent / "shared"
SHARED = Path(os.environ.get("DELEGATE_SHARED_DIR") or _BESIDE_CHECKOUT)
MODELS = SHARED / "models"


class Populator:
    """Builds model objects with every field set to a non-default value.

    Enum fields cycle through every value of their enum (starting past the
    default), so a large enough tree holds each enum value somewhere.
    """

    def __init__(self, seed: int = 0, list_size: int = 2):
        self.rng = random.Random(seed)
        self.list_size = list_size
        self.enum_next: dict[type, int] = defaultdict(lambda: 1)
        self.serial = 0

    def _string(self) -> str:
        self.serial += 1
        return f"name_{self.serial}_ü_中"

    def _int32(self) -> int:
        return self.rng.choice([-1, 1]) * self.rng.randint(1, 2**31 - 1)

    def _float32(self) -> float:
        return float(np.float32(self.rng.uniform(0.5, 1e6) * self.rng.choice([-1, 1])))

    def value(self, kind: Kind, target: type | None) -> Any:
        n = self.list_size
        if kind is Kind.BOOL:
            return True
        if kind is Kind.INT32:
            return self._int32()
        if kind is Kind.UINT32:
            return self.rng.randint(1, 2**32 - 1)
        if kind is Kind.FLOAT32:
            return self._float32()
        if kind is Kind.ENUM:
            assert target is not None
            members = list(target)
            i = self.enum_next[target]
            self.enum_next[target] = i + 1
            return members[i % len(members)]
        if kind is Kind.STRING:
            return self._string()
        if kind is Kind.BYTES:
            return self.rng.randbytes(self.rng.randint(1, 48))
        if kind is Kind.TABLE:
            assert target is not None
            return self.table(target)
        if kind is Kind.TABLE_LIST:
            assert target is not None
            return [self.table(target) for _ in range(n)]
        if kind is Kind.STRING_LIST:
            return [self._string() for _ in range(n)]
        if kind is Kind.INT32_LIST:
            return [self._int32() for _ in range(n + 1)]
        return [self._float32() for _ in range(n + 1)]

    def table(self, cls: type) -> Any:
        return cls(**{s.name: self.value(s.kind, s.target) for s in field_specs(cls)})


def populated_context(seed: int = 0) -> model.InferenceContext:
    """A context with every reachable table and field populated and every enum value used."""
    pop = Populator(seed)
    ctx = pop.table(model.InferenceContext)
    # Enough tensors that each storage type, layout and data type shows up at top level too.
    ctx.tensors = [pop.table(model.TensorDescWithId) for _ in range(len(model.TensorStorageType))]
    # One node per TensorToGrid value (two compiler options each covers CompilerOptions too).
    ctx.nodes = [pop.table(model.CLNode) for _ in range(len(model.TensorToGrid))]
    return ctx


# ----------------------------------------------- flatc object API conversions


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def to_flatc(obj: Any) -> Any:
    """A model object as flatc's generated object-API object (``<Table>T``)."""
    t = getattr(fbgen, type(obj).__name__ + "T")()
    for spec in field_specs(type(obj)):
        value = getattr(obj, spec.name)
        k = spec.kind
        if k is Kind.TABLE:
            value = None if value is None else to_flatc(value)
        elif k is Kind.TABLE_LIST:
            value = [to_flatc(v) for v in value] if value else None
        elif k is Kind.BYTES:
            value = np.frombuffer(bytes(value), dtype=np.uint8) if len(value) else None
        elif k in (Kind.STRING_LIST, Kind.INT32_LIST, Kind.FLOAT32_LIST):
            value = list(value) if value else None
        elif k is Kind.ENUM:
            value = int(value)
        setattr(t, _camel(spec.name), value)
    return t


def _text(v: bytes | str | None) -> str | None:
    return v.decode("utf-8") if isinstance(v, bytes) else v


def from_flatc(cls: type, t: Any) -> Any:
    """flatc's object-API object back into the model class ``cls``."""
    kwargs = {}
    for spec in field_specs(cls):
        value = getattr(t, _camel(spec.name))
        k = spec.kind
        if k is Kind.TABLE:
            value = None if value is None else from_flatc(spec.target, value)
        elif k is Kind.TABLE_LIST:
            value = [from_flatc(spec.target, v) for v in value or []]
        elif k is Kind.BYTES:
            value = b"" if value is None else bytes(np.asarray(value, dtype=np.uint8))
        elif k is Kind.STRING:
            value = _text(value)
        elif k is Kind.STRING_LIST:
            value = [_text(v) for v in value or []]
        elif k in (Kind.INT32_LIST, Kind.FLOAT32_LIST):
            value = [v.item() if hasattr(v, "item") else v for v in (value if value is not None else [])]
        elif k is Kind.ENUM:
            value = spec.target(value)
        elif k is Kind.BOOL:
            value = bool(value)
        kwargs[spec.name] = value
    return cls(**kwargs)


def flatc_slots() -> dict[str, dict[str, tuple[int, str]]]:
    """For each table of the generated code: PascalCase field -> (slot, Prepend type), from ``Add<Field>``."""
    source = Path(fbgen.__file__).read_text()
    slots: dict[str, dict[str, tuple[int, str]]] = defaultdict(dict)
    pattern = re.compile(r"def (\w+?)Add(\w+)\(builder, \w+\):\s*\n\s*builder\.Prepend(\w+)Slot\((\d+),")
    for table, field, prepend, slot in pattern.findall(source):
        slots[table][field] = (int(slot), prepend)
    return slots


def shared_path(*parts: str) -> Path:
    """A path under ../shared; skipped when absent, except under CI where it must be there."""
    import pytest

    path = SHARED.joinpath(*parts)
    if not path.exists():
        if os.environ.get("CI"):
            pytest.fail(f"{path} is missing: CI runs with ../shared beside the checkout")
        pytest.skip(f"{path} is not beside this checkout")
    return path


BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def benchmark_module(name: str) -> ModuleType:
    """The script ``benchmarks/<name>.py`` imported as a module (benchmarks/ is not a package; a
    dotted name reaches its folders: ``experiments.race_runtime``, ``harness.contexts``)."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCHMARKS))


def delegate_and_builtin(model: bytes, feeds: list[np.ndarray], program_cache: str, **options: Any) -> tuple:
    """``model``'s outputs through the delegate (``options``) and through TFLite's builtin CPU kernels
    (not the XNNPACK delegate the host applies by default: XNNPACK disagrees with them on corner
    cases, where the delegate follows the builtin kernels) on ``feeds``, and what the delegate
    claimed: (delegate outputs, builtin outputs, DelegateState)."""
    import delegate
    from delegate.api import host_runtime

    host = host_runtime()
    d = delegate.load_delegate(program_cache=program_cache, **options)
    gpu = host.Interpreter(model_content=model, experimental_delegates=[d])
    cpu = host.Interpreter(
        model_content=model, experimental_op_resolver_type=host.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
    )
    results = []
    for interpreter in (gpu, cpu):
        interpreter.allocate_tensors()
        for detail, value in zip(interpreter.get_input_details(), feeds, strict=True):
            interpreter.set_tensor(detail["index"], value)
        interpreter.invoke()
        results.append([interpreter.get_tensor(o["index"]) for o in interpreter.get_output_details()])
    return results[0], results[1], delegate.delegate_state(d)


def reject_kernels_of(monkeypatch: Any, op: str) -> None:
    """Make the OpenCL driver reject the kernel of every ``op`` node (an op name, ``MAX_POOL_2D``),
    a real build failure: the plugin's compile step is injected, wrapped to end those kernels with ``#error``."""
    from delegate.compiler.graph import op_name
    from delegate.plugin.registry import REGISTRY
    from tests.plugin_testing import inject

    real = REGISTRY.plan.loader.compiler.compile

    def rejected(graph: Any, nodes: list[int], *args: Any, **kwargs: Any) -> model.InferenceContext:
        ctx = real(graph, nodes, *args, **kwargs)
        names = {graph.nodes[i].name for i in nodes if op_name(graph.nodes[i].op) == op}
        for node in ctx.nodes:
            parts = set((node.name or "").replace(":", "+").split("+"))  # fused and paired kernels name each node
            if node.gpu_op is not None and node.gpu_op.code and names & parts:
                node.gpu_op.code += f"\n#error build failure injected by the test into {op}\n"
        return ctx

    inject(monkeypatch, compile=rejected)


def uniform_inputs(interpreter: Any, seed: int) -> list[tuple[int, np.ndarray]]:
    """(tensor index, value) for every input of ``interpreter``: seeded uniform [0, 1) float32."""
    rng = np.random.default_rng(seed)
    return [(d["index"], rng.uniform(size=d["shape"]).astype(np.float32)) for d in interpreter.get_input_details()]


def invoke_with(interpreter: Any, inputs: list[tuple[int, np.ndarray]]) -> list[np.ndarray]:
    """Sets ``inputs``, invokes once and returns copies of every output."""
    for index, value in inputs:
        interpreter.set_tensor(index, value)
    interpreter.invoke()
    return [interpreter.get_tensor(d["index"]).copy() for d in interpreter.get_output_details()]


def assert_outputs_close(got: list[np.ndarray], want: list[np.ndarray], tolerance: float) -> None:
    """Each output of ``got`` has its counterpart's shape and is within ``tolerance`` of it,
    relative to the counterpart's largest magnitude."""
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape
        assert np.abs(a - b).max() <= tolerance * max(float(np.abs(b).max()), 1e-30)
