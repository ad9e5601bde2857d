"""The plugin's Python half: delegate creation, Prepare (which nodes to claim) and kernel init (compile).

csrc/plugin.c calls these through cffi ``extern "Python+C"``. Every callback catches its own
exceptions: an error becomes a message the user sees (report_error / ReportError) and a failure
status, never a traceback lost inside C.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import threading
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import __version__
from .._atomic import atomic_write, remove_stale_temps
from .._integrity import seal, unseal
from .._native import ffi, lib
from ..compiler.fingerprint import compiler_fingerprint
from ..compiler.fold import consumers, fold_constants, folded_sources
from ..compiler.graph import Builtin
from ..compiler.ops.conv_pair import PAIR_LOCAL_BYTES
from ..compiler.partition import CompileOptions, compile_partition, op_name, unsupported_reason
from ..compiler.shapes import StaticShapes, fold_values, resolve
from ..errors import CacheIntegrityError, ContextFormatError, DelegateError
from ..host import HostInfo
from ..progress import report_progress
from ..runtime import Runtime, Tuning
from ..runtime.device import describe, select_device
from ..runtime.pocl_cpu import vector_floats
from .capture import (
    capture_graph,
    capture_tensor,
    capture_tensors,
    execution_plan,
    hash_constants,
    int_array,
    undo_unsafe_reason,
)
from .options import DelegateOptions

log = logging.getLogger(__name__)

_PLUGIN = "tflite-opencl-delegate"


@dataclass
class PartitionInfo:
    """One delegated partition: its nodes, how its context was obtained, and its init time."""

    nodes: list[int]
    cache: str  # "hit", "miss" or "off"
    init_ms: float
    #: kernels the partition launches, and ops run inside other kernels (elementwise ops linked into
    #: their producer, concatenations read in place by their consumer)
    kernels: int = 0
    fused_ops: int = 0
    #: times it was compiled for new shapes after a resize
    recompiles: int = 0


@dataclass
class SubgraphReport:
    """What one Prepare (one subgraph of a model: the main graph, or the body of an IF, WHILE or
    CALL_ONCE) delegated."""

    #: position among the subgraphs this delegate was applied to, in the order TFLite prepared them
    index: int
    total_nodes: int = 0
    delegated_nodes: list[int] = field(default_factory=list)
    #: node name -> why it stays on CPU
    unsupported: dict[str, str] = field(default_factory=dict)
    partitions: list[PartitionInfo] = field(default_factory=list)
    #: partitions that fell back to CPU: {"nodes": [names], "cause": text}
    fallbacks: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class _Preparing:
    """One Prepare in progress (kernel inits run inside it)."""

    graph: Any
    report: SubgraphReport
    #: the execution plan Prepare saw, and the shapes it resolved (compiler/shapes.py)
    plan: list[int] = field(default_factory=list)
    static: StaticShapes | None = None
    #: partitions compiled by Prepare, waiting for their kernel's init: nodes -> (runtime, cache, start)
    pending: dict[frozenset[int], tuple[Any, str, float]] = field(default_factory=dict)
    #: partitions claimed only to report why they failed (see ``_defer``): nodes -> message
    deferred: dict[frozenset[int], str] = field(default_factory=dict)
    #: SHA-256 of the model's constants (cache keys without model_token), hashed once per Prepare
    _constants_digest: bytes | None = None

    def constants_digest(self, context: Any) -> bytes:
        if self._constants_digest is None:
            h = hashlib.sha256()
            hash_constants(context, self.graph, h.update)
            self._constants_digest = h.digest()
        return self._constants_digest


def _address(context: Any) -> int:
    return int(ffi.cast("uintptr_t", context))


@dataclass
class DelegateState:
    """What one delegate (one ``load_delegate`` call) knows: its options and what it delegated.

    ``subgraphs`` has one report per subgraph the delegate was applied to (a model with IF, WHILE
    or CALL_ONCE has several; a subgraph prepared again, after a resize, replaces its report);
    ``total_nodes``, ``delegated_nodes``, ``unsupported``, ``partitions`` and ``fallbacks`` are
    their totals (node names carry the subgraph, ``sub1/name``, past the first).
    """

    options: DelegateOptions
    subgraphs: list[SubgraphReport] = field(default_factory=list)
    device: str = ""
    precision: str = ""
    storage_type: str = ""
    #: the TFLite runtime this delegate was loaded into (set by ``delegate.load_delegate``)
    host: HostInfo | None = None
    prepares: int = 0
    #: Prepares in progress, by TfLiteContext address: interpreters sharing this delegate may
    #: prepare at the same time (the GIL is released while the interpreter runs C code)
    preparing: dict[int, _Preparing] = field(default_factory=dict, repr=False, compare=False)
    #: TfLiteContext address -> its report, so that a second Prepare of a subgraph replaces it
    _by_context: dict[int, SubgraphReport] = field(default_factory=dict, repr=False, compare=False)

    @property
    def total_nodes(self) -> int:
        return sum(r.total_nodes for r in self.subgraphs)

    @property
    def delegated_nodes(self) -> list[int]:
        return [n for r in self.subgraphs for n in r.delegated_nodes]

    @property
    def unsupported(self) -> dict[str, str]:
        return {_qualified(r, name): why for r in self.subgraphs for name, why in r.unsupported.items()}

    @property
    def partitions(self) -> list[PartitionInfo]:
        return [p for r in self.subgraphs for p in r.partitions]

    @property
    def fallbacks(self) -> list[dict[str, Any]]:
        return [{**f, "nodes": [_qualified(r, n) for n in f["nodes"]]} for r in self.subgraphs for f in r.fallbacks]

    def report_for(self, context: Any) -> SubgraphReport:
        """A fresh report for a Prepare of ``context``, replacing that subgraph's earlier one."""
        address = _address(context)
        with _lock:
            old = self._by_context.get(address)
            report = SubgraphReport(old.index if old is not None else len(self.subgraphs))
            if old is not None:
                self.subgraphs[self.subgraphs.index(old)] = report
            else:
                self.subgraphs.append(report)
            self._by_context[address] = report
        return report


def _qualified(report: SubgraphReport, name: str) -> str:
    return name if report.index == 0 else f"sub{report.index}/{name}"


@dataclass
class _Kernel:
    """A delegate kernel's runtime and the cffi arrays its C side points at."""

    runtime: Runtime
    arrays: list[Any]  # cffi arrays the C kernel points at
    #: what recompiling after a resize needs: the delegate, the subgraph's nodes (as Prepare
    #: captured them: kernel callbacks may not ask TFLite for nodes) and plan, the partition's tensors
    state: DelegateState | None = None
    nodes: dict[int, Any] = field(default_factory=dict)
    plan: list[int] = field(default_factory=list)
    partition: tuple[list[int], list[int], list[int]] = ((), (), ())  # type: ignore[assignment]
    #: the TFLite dims of the bound inputs and outputs it was compiled for
    dims: list[tuple[int, ...]] = field(default_factory=list)
    report: SubgraphReport | None = None


_lock = threading.Lock()
_ids = itertools.count(1)
_delegates: dict[int, DelegateState] = {}
_kernels: dict[int, _Kernel] = {}


def state_of_pointer(pointer: int) -> DelegateState | None:
    """The state of the delegate at a native ``TfLiteDelegate*`` address (as the host runtime holds it)."""
    if not pointer:
        return None
    native = ffi.cast("TfLiteDelegate *", pointer)
    data = ffi.cast("int64_t *", native.data_)
    return _delegates.get(int(data[0]))


def live_kernels() -> int:
    """Compiled partitions currently alive (for leak checks)."""
    return len(_kernels)


def live_runtimes() -> list[Runtime]:
    """The Runtimes of the compiled partitions currently alive, oldest first (for tools and tests)."""
    with _lock:
        return [k.runtime for k in _kernels.values()]


def _copy_error(message: str, buffer: Any, size: int) -> None:
    raw = message.encode("utf-8", "replace")[: size - 1]
    ffi.memmove(buffer, raw + b"\0", len(raw) + 1)


@ffi.def_extern()
def dlg_py_create(keys: Any, values: Any, count: int, error: Any, error_size: int) -> int:
    try:
        pairs = {ffi.string(keys[i]).decode(): ffi.string(values[i]).decode() for i in range(count)}
        options = DelegateOptions.parse(pairs)
        if options.device:
            select_device(options.device)  # fail now, with the device list, rather than at the first model
        with _lock:
            ident = next(_ids)
            _delegates[ident] = DelegateState(options)
        return ident
    except DelegateError as exc:
        _copy_error(f"{_PLUGIN}: {exc}", error, error_size)
    except Exception as exc:
        _copy_error(f"{_PLUGIN}: unexpected {type(exc).__name__}: {exc}", error, error_size)
    return 0


@ffi.def_extern()
def dlg_py_destroy(ident: int) -> None:
    with _lock:
        _delegates.pop(ident, None)


def _report(context: Any, message: str) -> None:
    lib.dlg_report(context, message.encode("utf-8", "replace"))


def _largest_partitions(context: Any, nodes: list[int], limit: int) -> list[int]:
    if limit <= 0 or not nodes:
        return nodes
    array = ffi.new("int[]", [len(nodes), *nodes])
    params = ffi.new("TfLiteDelegateParams **")
    count = ffi.new("int *")
    status = context.PreviewDelegatePartitioning(context, ffi.cast("TfLiteIntArray *", array), params, count)
    if status != lib.kTfLiteOk:
        return nodes
    partitions = [int_array(params[0][i].nodes_to_replace) for i in range(count[0])]
    partitions.sort(key=len, reverse=True)
    keep = {n for part in partitions[:limit] for n in part}
    return [n for n in nodes if n in keep]


def _supported_nodes(
    graph: Any, plan: list[int], options: DelegateOptions, static: StaticShapes
) -> tuple[list[int], dict[str, str]]:
    """The nodes to claim, in plan order, and why each other one stays on CPU.

    Nodes the compiler folds into constants (DENSIFY of sparse weights and DEQUANTIZE of weights,
    compiler/fold.py; integer shape arithmetic, compiler/shapes.py) need no kernel: they are
    claimed only when every consumer is, so that their outputs never have to leave the partition.
    """
    weights = fold_constants(graph, dequantize=options.enable_quantized_inference)
    shape_folded = fold_values(graph, static)
    supported, unsupported = [], {}
    for index in plan:
        node = graph.nodes[index]
        if op_name(node.op) in options.exclude_ops:
            unsupported[node.name] = "excluded by the exclude_ops option"
        elif index in shape_folded:
            continue
        elif node.op == Builtin.DEQUANTIZE and index not in weights:
            unsupported[node.name] = (
                "DEQUANTIZE runs on CPU: enable_quantized_inference is off"
                if not options.enable_quantized_inference
                else "DEQUANTIZE of a non-constant or unsupported tensor"
            )
        elif node.op == Builtin.DENSIFY and index not in weights:
            unsupported[node.name] = "DENSIFY of a non-constant tensor"
        elif index not in weights:
            reason = unsupported_reason(node, graph) or static.reason(node)
            if reason is None:
                supported.append(index)
            else:
                unsupported[node.name] = reason
    readers = consumers(graph)
    claimed = set(supported)
    folded = [i for i in plan if (i in weights or i in shape_folded) and graph.nodes[i].name not in unsupported]
    # A folded chain (SHAPE -> STRIDED_SLICE -> PACK, DENSIFY -> DEQUANTIZE) is claimed from its end.
    for index in reversed(folded):
        node = graph.nodes[index]
        outs = [o for o in node.outputs if o >= 0]
        # With no reader the folded tensor is a graph output, which the partition would have to produce.
        if all(readers.get(o) and all(r in claimed for r in readers[o]) for o in outs):
            claimed.add(index)
        elif index in weights:
            unsupported[node.name] = f"{op_name(node.op)} folded only when every consumer is delegated"
        else:
            unsupported[node.name] = f"{op_name(node.op)} is not supported by the compiler"
    return [i for i in plan if i in claimed], unsupported


def _preview(context: Any, nodes: list[int]) -> list[tuple[list[int], list[int], list[int]]]:
    """The partitions the runtime will make of ``nodes``: (nodes, inputs, outputs) each."""
    array = ffi.new("int[]", [len(nodes), *nodes])
    params = ffi.new("TfLiteDelegateParams **")
    count = ffi.new("int *")
    status = context.PreviewDelegatePartitioning(context, ffi.cast("TfLiteIntArray *", array), params, count)
    if status != lib.kTfLiteOk:
        raise DelegateError("the interpreter could not preview the partitions")
    return [
        (list(int_array(p.nodes_to_replace)), list(int_array(p.input_tensors)), list(int_array(p.output_tensors)))
        for p in (params[0][i] for i in range(count[0]))
    ]


def _cause(exc: BaseException) -> str:
    """The first line of an error (and the line it introduces, such as a build log's first error),
    or its type when it has no text: never an empty message."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    if lines[0].endswith(":") and len(lines) > 1:
        detail = next((line for line in lines[1:] if "error" in line.lower()), lines[1])
        return f"{lines[0]} {detail[:300]}"
    return lines[0]


def _shown(names: list[str]) -> str:
    return ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")


def _precompile(context: Any, prep: _Preparing, chosen: list[int], state: DelegateState, unsafe: bool) -> list[int]:
    """Compile every partition now, so that a failure can leave just that partition on CPU
    (``compile_fallback``) or fail Prepare with the nodes and the cause; the delegated nodes left.

    ``unsafe``: TFLite could not restore its plan after a failed Prepare (``undo_unsafe_reason``),
    so without fallback a failing partition is claimed with a kernel that reports the cause when
    the interpreter allocates its tensors (``_defer``) instead of failing Prepare."""
    if not chosen:
        return chosen
    keep = set(chosen)
    previews = _preview(context, chosen)
    for number, (nodes, inputs, outputs) in enumerate(previews):
        start = time.perf_counter()
        report_progress("compiling partitions", number, len(previews), f"{len(nodes)} nodes")
        try:
            runtime, cache_state = _load_partition(context, nodes, inputs, outputs, state, prep)
        except Exception as exc:  # any stage: capture of weights, compile, build, allocation
            names = [prep.graph.nodes[n].name for n in nodes]
            cause = _cause(exc)
            if not isinstance(exc, (DelegateError, ValueError, OSError)):
                cause = f"{type(exc).__name__}: {cause}"
            message = f"compiling the partition of {_shown(names)} failed: {cause}"
            if not state.options.compile_fallback:
                if unsafe:
                    prep.deferred[frozenset(nodes)] = f"{_PLUGIN}: {message}"
                    continue
                raise DelegateError(message) from exc
            log.warning("%s fall back to CPU: %s", _shown(names), cause)
            warnings.warn(f"{_PLUGIN}: {_shown(names)} fall back to CPU: {cause}", stacklevel=1)
            prep.report.fallbacks.append({"nodes": names, "cause": cause})
            for name in names:
                prep.report.unsupported[name] = f"compile fallback: {cause}"
            keep -= set(nodes)
            continue
        prep.pending[frozenset(nodes)] = (runtime, cache_state, start)
        log.info(
            "partition %d of %d: %d nodes, %d kernels, ready in %.0f ms (serialization cache: %s)",
            number + 1,
            len(previews),
            len(nodes),
            len(runtime.node_names),
            (time.perf_counter() - start) * 1e3,
            cache_state,
        )
    report_progress("compiling partitions", len(previews), len(previews))
    return [n for n in chosen if n in keep]


def _propagation_blocker(graph: Any, plan: list[int]) -> str | None:
    """The node that keeps TFLite from propagating shapes through the original plan, or None.

    With kTfLiteDelegateFlagsRequirePropagatedShapes, TFLite prepares the original nodes at every
    allocation, delegated ones included; a custom op that no kernel implements (one only a
    delegate runs, as XNNPACK runs MediaPipe's Convolution2DTransposeBias under ai-edge-litert)
    fails that prepare, and with it the whole allocation."""
    for index in plan:
        node = graph.nodes[index]
        if node.unresolved:
            return node.name
    return None


def _claim(context: Any, native_delegate: Any, state: DelegateState, prep: _Preparing) -> int:
    """Prepare's work on one subgraph: capture, choose, compile, and replace the chosen nodes."""
    report, options = prep.report, state.options
    plan = prep.plan
    graph = prep.graph = capture_graph(context, plan)
    if _propagation_blocker(graph, plan) is not None:  # for this delegate: TFLite reads the flag per allocation
        native_delegate.flags &= ~lib.kTfLiteDelegateFlagsRequirePropagatedShapes
    prep.static = resolve(graph, plan)
    supported, unsupported = _supported_nodes(graph, plan, options, prep.static)
    chosen = _largest_partitions(context, supported, options.max_delegated_partitions)
    for index in set(supported) - set(chosen):
        unsupported[graph.nodes[index].name] = "outside the largest max_delegated_partitions partitions"
    report.total_nodes = len(plan)
    report.unsupported = unsupported
    chosen = _precompile(context, prep, chosen, state, undo_unsafe_reason(context, plan) is not None)
    report.delegated_nodes = [n for n in chosen if not any(n in d for d in prep.deferred)]
    shown = list(report.unsupported.items())[:5]
    log.info(
        "subgraph %d: %d of %d nodes delegated in %d partition(s); on CPU: %s%s",
        report.index,
        len(report.delegated_nodes),
        len(plan),
        len(prep.pending),
        ", ".join(f"{name} ({why})" for name, why in shown) or "nothing",
        f" and {len(report.unsupported) - len(shown)} more" if len(report.unsupported) > len(shown) else "",
    )
    if not chosen:
        return 0
    return _replace(context, native_delegate, chosen)


def _replace(context: Any, native_delegate: Any, nodes: list[int]) -> int:
    array = ffi.new("int[]", nodes)
    return 0 if lib.dlg_replace_nodes(context, native_delegate, array, len(nodes)) == lib.kTfLiteOk else 1


@ffi.def_extern()
def dlg_py_prepare(context: Any, native_delegate: Any, ident: int) -> int:
    state = _delegates.get(ident)
    if state is None:
        _report(context, f"{_PLUGIN}: this delegate was already destroyed")
        return 1
    prep: _Preparing | None = None
    try:
        state.prepares += 1
        plan = execution_plan(context)
        prep = _Preparing(None, state.report_for(context), plan)
        with _lock:
            state.preparing[_address(context)] = prep
        return _claim(context, native_delegate, state, prep)
    except Exception as exc:
        return _failed_prepare(context, native_delegate, state, prep, exc)
    finally:
        with _lock:  # only valid inside this Prepare; do not keep the constants alive
            state.preparing.pop(_address(context), None)
        if prep is not None:
            for runtime, _, _ in prep.pending.values():
                runtime.close()


def _failed_prepare(
    context: Any, native_delegate: Any, state: DelegateState, prep: _Preparing | None, exc: Exception
) -> int:
    """Prepare failed outside a partition's compile (or a partition failed without fallback).

    Returning an error makes TFLite undo the delegation and prepare its original plan again; on
    graphs where that undo corrupts the plan (``undo_unsafe_reason``: tflite-runtime 2.14 then
    crashes in DENSIFY's Prepare), the delegate instead claims nothing (with compile fallback:
    TFLite's CPU kernels run the graph, with a warning) or claims the plan with kernels that report
    the cause when the interpreter allocates its tensors.
    """
    cause = _cause(exc)
    if not isinstance(exc, DelegateError):
        cause = f"{type(exc).__name__}: {cause}"
    message = f"{_PLUGIN}: Prepare failed: {cause}"
    plan = prep.plan if prep is not None else []
    if prep is not None:
        for runtime, _, _ in prep.pending.values():
            runtime.close()
        prep.pending.clear()
        prep.report.delegated_nodes = []
    if state.options.compile_fallback:
        log.warning("%s; the graph runs on TFLite's CPU kernels", message)
        warnings.warn(f"{message}; the graph runs on TFLite's CPU kernels", stacklevel=1)
        if prep is not None:
            prep.report.fallbacks.append({"nodes": ["(all)"], "cause": cause})
        return 0
    try:
        unsafe = bool(plan) and undo_unsafe_reason(context, plan) is not None
    except Exception:
        unsafe = False
    if not unsafe or prep is None:
        _report(context, message)
        return 1
    prep.deferred = {frozenset(plan): message}
    return _replace(context, native_delegate, plan)


def _cache_key(graph: Any, nodes: list[int], options: DelegateOptions, device_key: str, model_id: bytes) -> str:
    """The serialization cache key of a partition; ``model_id``: what identifies the model's weights
    (the model_token, else the SHA-256 of its constants)."""
    h = hashlib.sha256()
    h.update(
        json.dumps(
            [
                __version__,
                device_key,
                options.precision.name,
                options.storage_type.name,
                options.fuse,
                options.enable_quantized_inference,
                options.tuning.value,
                options.vector_width,
                compiler_fingerprint(),
            ]
        ).encode()
    )
    for index in nodes:
        node = graph.nodes[index]
        shapes = [graph.tensor(i).shape if i >= 0 else None for i in (*node.inputs, *node.outputs)]
        h.update(
            json.dumps(
                [node.op, node.version, node.inputs, node.outputs, sorted(node.params.items()), shapes], default=str
            ).encode()
        )
    h.update(model_id)
    return h.hexdigest()[:40]


def write_cache_entry(ctx_model: Any, path: Path) -> Path:
    """Write a compiled partition to the serialization cache: atomically, with its SHA-256 trailer."""
    from ..context import serialize_context  # a miss only: the writer imports flatbuffers

    return atomic_write(path, seal(serialize_context(ctx_model)))


def _partition_graph(context: Any, nodes: list[int], graph: Any, options: DelegateOptions) -> Any:
    """``graph`` (captured by this Prepare, constants folded) with every constant the partition's
    nodes read valued.

    The whole graph is used because a partition may read a folded DEQUANTIZE or DENSIFY output
    whose node is in another partition (ai-edge-litert makes single-node partitions when all
    tensors are kept); folded chains (sparse fp16 -> DENSIFY -> DEQUANTIZE) are followed back to
    the model's constants, sparse ones read densified (capture.py).
    """
    wanted = folded_sources(graph, (i for index in nodes for i in graph.nodes[index].inputs))
    for i in wanted:
        if graph.tensors[i].is_constant and graph.tensors[i].constant is None:
            graph.tensors[i] = capture_tensor(context, i, read_limit=None)
    fold_constants(graph, dequantize=options.enable_quantized_inference)
    return graph


def _pair_local_bytes(info: Any) -> int:
    """How much local memory a depthwise + 1x1 pair kernel may hold on this device: none on a GPU
    (the pair kernel is shaped for CPU cores, see compiler/ops/conv_pair.py)."""
    return 0 if info.is_gpu else min(PAIR_LOCAL_BYTES, info.local_mem_bytes)


def _vector_width(info: Any, options: DelegateOptions) -> int:
    """Floats per vector register the compiler shapes matrix products for (option vector_width):
    by default 16 on CPU devices whose compiler targets AVX-512 (runtime/pocl_cpu.py), else 8,
    GPUs included. 16 is refused elsewhere: PoCL's LLVM 15 crashes compiling some of those kernels
    for AVX2, and on GPUs they are untested."""
    native = 8 if info.is_gpu else vector_floats(info.compiler_cpu)
    if options.vector_width == 16 and native != 16:
        target = "a GPU" if info.is_gpu else f"compiles for {info.compiler_cpu or 'an unknown CPU model'}"
        raise DelegateError(
            f"vector_width=16 needs a CPU device compiling for AVX-512, and {info.name} {target}; "
            "use vector_width=auto or 8"
        )
    return options.vector_width or native


def _load_partition(
    context: Any, nodes: list[int], inputs: list[int], outputs: list[int], state: DelegateState, prep: _Preparing
) -> tuple[Runtime, str]:
    """Compile (or load from the serialization cache) and load one partition of ``prep``'s graph."""
    options = state.options
    graph = _partition_graph(context, nodes, prep.graph, options)
    device = select_device(options.device or None)
    info = describe(device)
    compile_options = CompileOptions(
        options.precision, options.storage_type, options.fuse, _pair_local_bytes(info), _vector_width(info, options)
    )
    folder = Path(options.serialization_dir) if options.serialization_dir else None
    if folder is not None:
        program_cache: Any = folder / "programs"
    elif options.program_cache == "none":
        program_cache = False
    elif options.program_cache == "default":
        program_cache = None
    else:
        program_cache = Path(options.program_cache)
    if folder is None:
        log.debug("no serialization_dir: compiling the partition of %d nodes", len(nodes))
        ctx_model = compile_partition(graph, nodes, inputs, outputs, compile_options)
        runtime = _ready(
            _load_runtime(ctx_model, device, program_cache, options),
            options,
            tune=True,
        )
        return runtime, "off"
    model_id = options.model_token.encode() if options.model_token else prep.constants_digest(context)
    key = _cache_key(graph, nodes, options, info.key, model_id)
    token = "".join(c if c.isalnum() or c in "-_" else "_" for c in options.model_token) or "model"
    path = folder / f"{token}-{key}.ctx"
    remove_stale_temps(folder)  # left by writers killed mid-write
    if path.exists():
        try:
            payload = unseal(path.read_bytes(), f"cache entry {path}")
            log.info("serialization cache hit: %s", path)
            return _ready(
                _load_runtime(payload, device, program_cache, options),
                options,
                tune=False,
            ), "hit"
        except ContextFormatError as exc:
            log.warning("cache entry %s is unreadable (%s); rebuilding it", path, exc.detail)
            warnings.warn(f"{_PLUGIN}: cache entry {path} is unreadable ({exc.detail}); rebuilding it", stacklevel=1)
        except CacheIntegrityError as exc:
            log.warning("%s; rebuilding it", exc)
            warnings.warn(f"{_PLUGIN}: {exc}; rebuilding it", stacklevel=1)
    else:
        log.info("serialization cache miss: no entry %s (model, options, device or package version differ)", path)
    ctx_model = compile_partition(graph, nodes, inputs, outputs, compile_options)
    runtime = _ready(
        _load_runtime(ctx_model, device, program_cache, options),
        options,
        tune=True,
    )
    try:
        write_cache_entry(runtime.model, path)  # with the tuned work-group sizes
    except BaseException:
        runtime.close()
        raise
    return runtime, "miss"


def _load_runtime(source: Any, device: Any, program_cache: Any, options: DelegateOptions) -> Runtime:
    return Runtime.load(source, device=device, cache_dir=program_cache, persistent=options.persistent)


def _ready(runtime: Runtime, options: DelegateOptions, *, tune: bool) -> Runtime:
    """Tune a freshly compiled partition (when asked) and warm it up (see DelegateOptions)."""
    try:
        if tune and options.tuning != Tuning.NONE:
            runtime.tune(options.tuning)
        if options.warm_up:
            runtime.warm_up()
    except BaseException:
        runtime.close()
        raise
    return runtime


@ffi.def_extern()
def dlg_py_kernel_init(context: Any, params: Any, kernel: Any) -> int:
    start = time.perf_counter()
    try:
        ident = int(ffi.cast("int64_t *", params.delegate.data_)[0])
        state = _delegates.get(ident)
        if state is None:
            raise DelegateError("the delegate was destroyed before its kernel was created")
        nodes = list(int_array(params.nodes_to_replace))
        prep = state.preparing.get(_address(context))
        if prep is None:
            raise DelegateError("a delegate kernel was created outside the delegate's Prepare")
        deferred = next((m for part, m in prep.deferred.items() if set(nodes) <= part), None)
        if deferred is not None:
            _copy_error(deferred, kernel.error, ffi.sizeof(kernel.error))
            return 1
        inputs_ = list(int_array(params.input_tensors))
        outputs_ = list(int_array(params.output_tensors))
        pending = prep.pending.pop(frozenset(nodes), None)
        if pending is not None:
            runtime, cache_state, start = pending
        else:
            runtime, cache_state = _load_partition(context, nodes, inputs_, outputs_, state, prep)
        entry = _Kernel(runtime, [], state, dict(prep.graph.nodes), list(prep.plan), (nodes, inputs_, outputs_))
        entry.report = prep.report
        with _lock:
            handle = next(_ids)
            _kernels[handle] = entry
        _bind(context, entry, kernel)
        kernel.handle = handle
        state.device = f"{runtime.device_info.platform} / {runtime.device_info.name}"
        state.precision = runtime.precision.name
        state.storage_type = state.options.storage_type.name
        prep.report.partitions.append(_partition_info(runtime, nodes, cache_state, start))
        return 0
    except Exception as exc:
        detail = str(exc) if isinstance(exc, DelegateError) else f"{type(exc).__name__}: {exc}"
        if not isinstance(exc, DelegateError):
            detail += "\n" + "".join(traceback.format_exception(exc)[-3:])
        _copy_error(f"{_PLUGIN}: compiling a partition failed: {detail}", kernel.error, ffi.sizeof(kernel.error))
        return 1


def _partition_info(runtime: Runtime, nodes: list[int], cache_state: str, start: float) -> PartitionInfo:
    names = runtime.node_names
    fused = sum(name.count("+") for name in names)
    return PartitionInfo(nodes, cache_state, (time.perf_counter() - start) * 1e3, len(names), fused)


def _dims(context: Any, index: int) -> tuple[int, ...]:
    return int_array(context.tensors[index].dims)


def _bind(context: Any, entry: _Kernel, kernel: Any) -> None:
    """Point the C kernel at ``entry``'s runtime: its plan, the tensors it binds, their sizes and the
    TFLite dims it was compiled for (checked at every invoke)."""
    runtime = entry.runtime
    inputs, outputs = runtime.input_ids, runtime.output_ids
    entry.dims = [_dims(context, i) for i in (*inputs, *outputs)]
    in_dims, out_dims = entry.dims[: len(inputs)], entry.dims[len(inputs) :]
    entry.arrays = [
        ffi.new("int32_t[]", inputs or [0]),
        ffi.new("uint64_t[]", [_bytes(s) for s in runtime.input_shapes] or [0]),
        ffi.new("int32_t[]", outputs or [0]),
        ffi.new("uint64_t[]", [_bytes(s) for s in runtime.output_shapes] or [0]),
        ffi.new("int32_t[]", [v for d in in_dims for v in (len(d), *d)] or [0]),
        ffi.new("int32_t[]", [v for d in out_dims for v in (len(d), *d)] or [0]),
    ]
    runtime.keep_host_buffers()  # TFLite's tensor memory outlives the kernel: zero-copy buffers stay
    kernel.plan = runtime.native_plan
    kernel.inputs_count, kernel.input_tensors, kernel.input_bytes = len(inputs), entry.arrays[0], entry.arrays[1]
    kernel.outputs_count, kernel.output_tensors, kernel.output_bytes = len(outputs), entry.arrays[2], entry.arrays[3]
    kernel.input_dims, kernel.output_dims = entry.arrays[4], entry.arrays[5]


@ffi.def_extern()
def dlg_py_kernel_prepare(context: Any, kernel: Any, propagated: int) -> int:
    """The kernel's prepare: nothing to do while the partition's tensors keep the shapes it was
    compiled for; after a resize (TFLite has propagated the new shapes through the original nodes,
    kTfLiteDelegateFlagsRequirePropagatedShapes), the partition is compiled again for them. Where
    TFLite could not propagate them (``propagated`` 0: the delegate cleared the flag, see
    ``_propagation_blocker``) the shapes inside the partition are stale, and it refuses."""
    try:
        entry = _kernels.get(int(kernel.handle))
        if entry is None:
            raise DelegateError("the delegate kernel was already freed")
        runtime = entry.runtime
        ids = [*runtime.input_ids, *runtime.output_ids]
        if [_dims(context, i) for i in ids] == entry.dims:
            return 0
        if not propagated:
            raise DelegateError(
                "TFLite cannot propagate shapes through this graph (it has a custom op that only a delegate "
                "runs), so a resize after the delegate was applied is not followed: create the interpreter again "
                "and resize before its first allocate_tensors(), or run on CPU"
            )
        _recompile(context, entry, kernel)
        return 0
    except Exception as exc:
        cause = _cause(exc) if isinstance(exc, DelegateError) else f"{type(exc).__name__}: {_cause(exc)}"
        message = f"{_PLUGIN}: the partition's tensors changed shape and it could not be compiled again: {cause}"
        _copy_error(message, kernel.error, ffi.sizeof(kernel.error))
        return 1


def _recompile(context: Any, entry: _Kernel, kernel: Any) -> None:
    """Compile ``entry``'s partition for the shapes its tensors have now, and swap it in."""
    state = entry.state
    assert state is not None and entry.report is not None
    nodes, inputs, outputs = entry.partition
    graph = capture_tensors(context, entry.nodes)
    static = resolve(graph, entry.plan)
    # The partition's nodes must still be the ones Prepare would claim with these shapes.
    supported, unsupported = _supported_nodes(graph, entry.plan, state.options, static)
    lost = [graph.nodes[i].name for i in nodes if i not in supported]
    if lost:
        why = unsupported.get(lost[0], "not claimed")
        raise DelegateError(f"{lost[0]} cannot run on the delegate with the new shapes: {why}")
    prep = _Preparing(graph, entry.report, entry.plan, static)
    start = time.perf_counter()
    runtime, cache_state = _load_partition(context, nodes, inputs, outputs, state, prep)
    if (runtime.input_ids, runtime.output_ids) != (entry.runtime.input_ids, entry.runtime.output_ids):
        runtime.close()
        raise DelegateError("the recompiled partition binds other tensors than before")
    old = entry.runtime
    entry.runtime = runtime
    _bind(context, entry, kernel)
    old.close()
    info = _partition_info(runtime, nodes, cache_state, start)
    with _lock:
        partitions = entry.report.partitions
        for k, p in enumerate(partitions):
            if p.nodes == nodes:
                info.recompiles = p.recompiles + 1
                partitions[k] = info


def _bytes(shape: tuple[int, ...]) -> int:
    n = 4
    for d in shape:
        n *= d
    return n


@ffi.def_extern()
def dlg_py_kernel_free(handle: int) -> None:
    with _lock:
        entry = _kernels.pop(handle, None)
    if entry is not None:
        entry.runtime.close()


__all__ = ["DelegateState", "live_kernels", "live_runtimes", "state_of_pointer"]
