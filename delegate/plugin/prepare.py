"""The plan of a delegate's Prepare on one subgraph: claim (which nodes the compiler can run, less
what TFLite cannot pass around a partition), choose (the largest partitions, less those faster on
TFLite's CPU kernels) and compile (each partition now, so that a failure leaves it on CPU or fails
Prepare with its cause), then replace the chosen nodes.

A PreparePlan is given its collaborators (the graph capture, the rule cpu_when_faster's device
default, the partition loader): the plugin's delegates use the real ones, tests inject fakes
through ``registry.REGISTRY.using``.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .. import cancel
from .._native import ffi, lib
from .._warnings import warn
from ..calibration import UNMEASURED
from ..compiler.claim import NO_KERNEL, claimed_nodes
from ..compiler.composites import Inlining
from ..compiler.device_policy import cpu_when_faster
from ..compiler.graph import Graph
from ..compiler.shapes import StaticShapes, resolve
from ..compiler.while_loop import Expansion, expand_loops
from ..errors import DelegateError, PartitionTooLargeError
from ..progress import report_progress
from ..runtime import Runtime
from ..runtime.device import DeviceInfo
from .cache_keys import weights_sample
from .capture import (
    capture_graph,
    hash_constants,
    largest_partitions,
    partition_graph,
    preview_partitions,
    undo_unsafe_reason,
)
from .choice_record import decide
from .claim_rules import float_edges, propagation_blocker
from .composites import inline_composites
from .loader import CacheState, PartitionLoader, PartitionRequest
from .loops import capture_loops, context_address
from .messages import PLUGIN, cause, log, shown
from .options import DelegateOptions
from .report import DelegateState, Selection, SubgraphReport, partition_id


@dataclass
class Preparing:
    """One Prepare in progress (kernel inits run inside it)."""

    graph: Any
    report: SubgraphReport
    #: the execution plan Prepare saw, and the shapes it resolved (compiler/shapes.py)
    plan: list[int] = field(default_factory=list)
    static: StaticShapes | None = None
    #: the composites whose decompositions were put in ``graph`` (compiler/composites.py)
    inlining: Inlining = field(default_factory=lambda: Inlining([]))
    #: partitions compiled by Prepare, waiting for their kernel's init: nodes -> (runtime, cache, start)
    pending: dict[frozenset[int], tuple[Runtime, CacheState, float]] = field(default_factory=dict)
    #: partitions claimed only to report why they failed (see ``_compile``): nodes -> message
    deferred: dict[frozenset[int], str] = field(default_factory=dict)
    #: which partitions the delegate delegates, and their compiled contexts (report.py), None: all the rule keeps
    selection: Selection | None = None
    #: the plan with the WHILEs unrolled (compiler/while_loop.py): what the compiler sees of it
    expansion: Expansion | None = None
    #: SHA-256 of the model's constants (cache keys without model_token), hashed once per Prepare
    _constants_digest: bytes | None = None

    def constants_digest(self, context: Any) -> bytes:
        if self._constants_digest is None:
            h = hashlib.sha256()
            hash_constants(context, self.graph, h.update)
            self._constants_digest = h.digest()
        return self._constants_digest

    def close_pending(self) -> None:
        """Close the runtimes no kernel took (Prepare failed, or TFLite made no kernel of them)."""
        for runtime, _, _ in self.pending.values():
            runtime.close()
        self.pending.clear()


def replace_nodes(context: Any, native_delegate: Any, nodes: list[int]) -> int:
    """Ask TFLite to replace ``nodes`` with the delegate's kernels: 0, or 1 when it refuses."""
    array = ffi.new("int[]", nodes)
    return 0 if lib.dlg_replace_nodes(context, native_delegate, array, len(nodes)) == lib.kTfLiteOk else 1


@dataclass(frozen=True)
class PreparePlan:
    """Claim -> choose -> compile, with these collaborators."""

    loader: PartitionLoader = field(default_factory=PartitionLoader)
    #: TfLiteContext and execution plan -> compiler.graph.Graph (capture.py)
    capture: Callable[[Any, list[int]], Graph] = capture_graph
    #: the rule cpu_when_faster's value on a device for the option's value (None: auto)
    cpu_default: Callable[[DeviceInfo, bool | None], bool] = cpu_when_faster

    def prepare(self, context: Any, native_delegate: Any, state: DelegateState, prep: Preparing) -> int:
        """Prepare's work on one subgraph: capture, claim, choose, compile, and replace the chosen nodes."""
        report, options = prep.report, state.options
        prep.selection = state.selection
        plan = prep.plan
        inlined_into = state.take_inlined(context_address(context))
        if inlined_into is not None:  # a composite's decomposition or a WHILE's subgraph, run in a partition
            report.total_nodes, report.delegated_nodes, report.inlined_into = len(plan), list(plan), inlined_into
            return 0
        graph = prep.graph = self.capture(context, plan)
        loop_contexts = capture_loops(context, graph, plan, options.model_file, excluded="WHILE" in options.exclude_ops)
        if propagation_blocker(graph, plan) is not None:  # for this delegate: TFLite reads the flag per allocation
            native_delegate.flags &= ~lib.kTfLiteDelegateFlagsRequirePropagatedShapes
        supported, unsupported, subgraphs = self.claim(context, prep, options)
        supported = float_edges(context, graph, supported, unsupported)
        chosen = largest_partitions(context, supported, options.max_delegated_partitions)
        for index in set(supported) - set(chosen):
            unsupported[graph.nodes[index].name] = "outside the largest max_delegated_partitions partitions"
        chosen = self._choose(context, prep, chosen, options, unsupported)
        report.total_nodes = len(plan)
        report.unsupported = unsupported
        for name, why in unsupported.items():
            if NO_KERNEL in why:
                warn(f"{PLUGIN}: {name} stays on CPU: {why}")
        chosen = self._compile(context, prep, chosen, options, undo_unsafe_reason(context, plan) is not None)
        report.delegated_nodes = [n for n in chosen if not any(n in d for d in prep.deferred)]
        for index, addresses in loop_contexts.items():  # their subgraphs run in the partition, unrolled
            if index in report.delegated_nodes:
                for address in addresses:
                    state.mark_inlined(address, f"{graph.nodes[index].name} of subgraph {report.index}")
        listed = list(report.unsupported.items())[:5]
        log.info(
            "subgraph %d: %d of %d nodes delegated in %d partition(s); on CPU: %s%s",
            report.index,
            len(report.delegated_nodes),
            len(plan),
            len(prep.pending),
            ", ".join(f"{name} ({why})" for name, why in listed) or "nothing",
            f" and {len(report.unsupported) - len(listed)} more" if len(report.unsupported) > len(listed) else "",
        )
        if not chosen:
            return 0
        refused = replace_nodes(context, native_delegate, chosen)
        if not refused:
            for composite, address in subgraphs.items():
                if composite in report.delegated_nodes:
                    state.mark_inlined(address, graph.nodes[composite].name)
        return refused

    def fail(
        self, context: Any, native_delegate: Any, state: DelegateState, prep: Preparing | None, exc: Exception
    ) -> int:
        """Prepare failed outside a partition's compile (or a partition failed without fallback).

        Returning an error makes TFLite undo the delegation and prepare its original plan again; on
        graphs where that undo corrupts the plan (``undo_unsafe_reason``: tflite-runtime 2.14 then
        crashes in DENSIFY's Prepare), the delegate instead claims nothing (with compile fallback:
        TFLite's CPU kernels run the graph, with a warning) or claims the plan with kernels that report
        the cause when the interpreter allocates its tensors.
        """
        why = cause(exc)
        if not isinstance(exc, DelegateError):
            why = f"{type(exc).__name__}: {why}"
        message = f"{PLUGIN}: Prepare failed: {why}"
        plan = prep.plan if prep is not None else []
        if prep is not None:
            prep.close_pending()
            prep.report.delegated_nodes = []
        if state.options.compile_fallback:
            log.warning("%s; the graph runs on TFLite's CPU kernels", message)
            warn(f"{message}; the graph runs on TFLite's CPU kernels")
            if prep is not None:
                prep.report.fallbacks.append({"nodes": ["(all)"], "cause": why})
            return 0
        try:
            unsafe = bool(plan) and undo_unsafe_reason(context, plan) is not None
        except Exception:
            unsafe = False
        if not unsafe or prep is None:
            lib.dlg_report(context, message.encode("utf-8", "replace"))
            return 1
        prep.deferred = {frozenset(plan): message}
        return replace_nodes(context, native_delegate, plan)

    def claim(
        self, context: Any, prep: Preparing, options: DelegateOptions
    ) -> tuple[list[int], dict[str, str], dict[int, int]]:
        """``supported`` on ``prep``'s graph with its composites inlined (compiler/composites.py) and
        its WHILEs unrolled (compiler/while_loop.py): the nodes of the plan to claim, a composite or
        a WHILE when every node it stands for is, why others are not, and each inlined composite's
        subgraph context address."""
        graph = prep.graph
        excluded = "STABLEHLO_COMPOSITE" in options.exclude_ops
        prep.inlining, subgraphs = inline_composites(context, graph, prep.plan, excluded=excluded)
        expansion = prep.expansion = expand_loops(graph, prep.inlining.plan, int(context.tensors_size))
        prep.static = resolve(graph, expansion.plan)
        supported, unsupported = self.supported(graph, expansion.plan, options, prep.static)
        supported = expansion.collapse(graph, supported, unsupported)
        return prep.inlining.collapse(graph, supported, unsupported), unsupported, subgraphs

    @staticmethod
    def supported(
        graph: Graph, plan: list[int], options: DelegateOptions, static: StaticShapes
    ) -> tuple[list[int], dict[str, str]]:
        """The nodes to claim, in plan order, and why each other one stays on CPU (compiler/claim.py)."""
        dequantize = options.enable_quantized_inference
        return claimed_nodes(graph, plan, static, exclude_ops=options.exclude_ops, dequantize=dequantize)

    def load(
        self, context: Any, partition: tuple[list[int], list[int], list[int]], options: DelegateOptions, prep: Preparing
    ) -> tuple[Runtime, CacheState]:
        """Compile (or read from the serialization cache) and load one partition of ``prep``'s graph."""
        nodes, inputs, outputs = partition
        compiled = prep.selection.take_context(prep.report.index, nodes) if prep.selection is not None else None
        if compiled is not None:  # compiled already in this process (Selection): loaded, not compiled again
            return self.loader.load_compiled(compiled, options), "memory"
        nodes = prep.inlining.expand(nodes)  # each inlined composite: its decomposition's nodes
        if prep.expansion is not None:  # each unrolled WHILE: its body's copies
            nodes = prep.expansion.expand(nodes)
        graph = partition_graph(context, nodes, prep.graph, dequantize=options.enable_quantized_inference)
        request = PartitionRequest(
            graph,
            nodes,
            inputs,
            outputs,
            constants_digest=lambda: prep.constants_digest(context),
            weights_sample=lambda: weights_sample(context, graph),
        )
        return self.loader.load(request, options)

    def _choose(
        self, context: Any, prep: Preparing, nodes: list[int], options: DelegateOptions, unsupported: dict[str, str]
    ) -> list[int]:
        """``nodes`` less the partitions the delegate cannot run faster than TFLite's CPU kernels
        (option cpu_when_faster; compiler/cpu_choice.py); every partition's figures go in the report,
        and in its record in the serialization folder (choice_record.py)."""
        info = self.loader.target(options.device).info
        requested = options.cpu_when_faster
        applied = requested if requested is not None else self.cpu_default(info, None)
        prep.report.cpu_rule = applied
        if not nodes:
            return nodes
        store = self.loader.open_cache(options.serialization_dir, options.model_token)
        calibration = info.platform_rules.calibration or UNMEASURED  # the device's platform's costs

        def model_id() -> bytes:
            return options.model_token.encode() if options.model_token else prep.constants_digest(context)

        kept: set[int] = set()
        for members, _, _ in preview_partitions(context, nodes):
            choice, where = decide(
                store,
                prep.graph,
                members,
                applied=applied,
                calibration=calibration,
                device_key=info.key,
                model_id=model_id,
                counted=prep.inlining.expand(members),
            )
            prep.report.cpu_choices.append(choice)
            if where is not None:
                prep.report.choice_records[choice.nodes] = where
            selection = prep.selection
            if selection is not None and choice.applied and not choice.on_cpu:
                # a delegate made to time or run some partitions only (delegate/measured_choice.py)
                if partition_id(prep.report.index, members) not in selection.delegated:
                    kept.update(members)
                    unsupported.update(dict.fromkeys(choice.names, selection.reason))
            elif choice.on_cpu:
                kept.update(members)
                for name in choice.names:
                    unsupported[name] = choice.reason()
        return [n for n in nodes if n not in kept]

    def _compile(
        self, context: Any, prep: Preparing, chosen: list[int], options: DelegateOptions, unsafe: bool
    ) -> list[int]:
        """Compile every partition now, so that a failure can leave just that partition on CPU
        (``compile_fallback``) or fail Prepare with the nodes and the cause; the delegated nodes left.

        ``unsafe``: TFLite could not restore its plan after a failed Prepare (``undo_unsafe_reason``),
        so without fallback a failing partition is claimed with a kernel that reports the cause when
        the interpreter allocates its tensors (``prep.deferred``) instead of failing Prepare."""
        if not chosen:
            return chosen
        keep = set(chosen)
        previews = preview_partitions(context, chosen)
        for number, (nodes, inputs, outputs) in enumerate(previews):
            start = time.perf_counter()
            report_progress("compiling partitions", number, len(previews), f"{len(nodes)} nodes")
            cancel.checkpoint()
            try:
                runtime, cache_state = self.load(context, (nodes, inputs, outputs), options, prep)
            except PartitionTooLargeError as exc:  # over the runtime's bounds (compiler/bounds.py)
                node = prep.expansion.outer(exc.node) if prep.expansion is not None else exc.node  # a WHILE
                node = prep.inlining.outer(node)  # a node of a composite's decomposition: the composite
                if node not in nodes:
                    raise DelegateError(f"compiling a partition failed: {exc}") from exc
                keep.discard(node)  # that node on CPU: the rest is partitioned and compiled again
                prep.report.unsupported[prep.graph.nodes[node].name] = exc.reason
                previews += preview_partitions(context, [n for n in nodes if n != node])
                continue
            except Exception as exc:  # any stage: capture of weights, compile, build, allocation
                if options.compile_fallback:
                    _fall_back(prep, nodes, exc)
                    keep -= set(nodes)
                elif unsafe:  # still claimed: its kernel reports the error when the interpreter allocates
                    prep.deferred[frozenset(nodes)] = f"{PLUGIN}: {_compile_failure(prep, nodes, exc)}"
                else:
                    raise DelegateError(_compile_failure(prep, nodes, exc)) from exc
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


def _fall_back(prep: Preparing, nodes: list[int], exc: Exception) -> None:
    """Leave a partition that failed to compile on CPU (option compile_fallback), with a warning."""
    names = [prep.graph.nodes[n].name for n in nodes]
    why = _failure_cause(exc)
    log.warning("%s fall back to CPU: %s", shown(names), why)
    warn(f"{PLUGIN}: {shown(names)} fall back to CPU: {why}")
    prep.report.fallbacks.append({"nodes": names, "cause": why})
    for name in names:
        prep.report.unsupported[name] = f"compile fallback: {why}"


def _failure_cause(exc: Exception) -> str:
    """A failed compile's cause, with the error's type where it is not one the delegate expects."""
    why = cause(exc)
    return why if isinstance(exc, (DelegateError, ValueError, OSError)) else f"{type(exc).__name__}: {why}"


def _compile_failure(prep: Preparing, nodes: list[int], exc: Exception) -> str:
    names = [prep.graph.nodes[n].name for n in nodes]
    return f"compiling the partition of {shown(names)} failed: {_failure_cause(exc)}"
