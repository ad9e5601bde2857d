"""The plugin's ABI shim: the callbacks csrc/plugin.c calls through cffi ``extern "Python+C"``
(delegate creation, Prepare, kernel init, prepare after a resize, free).

Each one translates between C and the modules that decide (registry.py: the delegates and kernels;
prepare.py: the Prepare plan; kernels.py: a kernel's resize recompile) and catches its own
exceptions: an error becomes a message the user sees (dlg_report or the kernel's error buffer)
and a failure status, never a traceback lost inside C.
"""

from __future__ import annotations

import time
import traceback
from typing import Any

from .. import cancel
from .._native import ffi, lib
from ..errors import CompileCancelled, DelegateError
from ..runtime.device import select_device
from .binding import bind_kernel, tensor_dims
from .capture import execution_plan, int_array
from .kernels import KernelEntry, partition_info, recompile, record_device
from .messages import PLUGIN, cause
from .options import DelegateOptions
from .prepare import Preparing
from .registry import REGISTRY, live_kernels, live_runtimes, state_of_pointer

_INTERRUPTS = (KeyboardInterrupt, SystemExit, CompileCancelled)  # not errors: Ctrl-C, exit, a cancelled build


def _address(context: Any) -> int:
    return int(ffi.cast("uintptr_t", context))


def _copy_error(message: str, buffer: Any, size: int) -> None:
    raw = message.encode("utf-8", "replace")[: size - 1]
    ffi.memmove(buffer, raw + b"\0", len(raw) + 1)


def _interrupted(exc: BaseException, error: Any = None) -> int:
    """Fail without fallback; ``exc`` cannot pass through C: the host's caller raises it (cancel.host_call)."""
    cancel.remember(exc)
    if error is not None:
        _copy_error(f"{PLUGIN}: interrupted ({type(exc).__name__})", error, ffi.sizeof(error))
    return 1


@ffi.def_extern()
def dlg_py_create(keys: Any, values: Any, count: int, error: Any, error_size: int) -> int:
    try:
        pairs = {ffi.string(keys[i]).decode(): ffi.string(values[i]).decode() for i in range(count)}
        options = DelegateOptions.parse(pairs)
        if options.device:
            select_device(options.device)  # fail now, with the device list, rather than at the first model
        return REGISTRY.create(options).ident
    except DelegateError as exc:
        _copy_error(f"{PLUGIN}: {exc}", error, error_size)
    except Exception as exc:
        _copy_error(f"{PLUGIN}: unexpected {type(exc).__name__}: {exc}", error, error_size)
    return 0


@ffi.def_extern()
def dlg_py_destroy(ident: int) -> None:
    REGISTRY.destroy(ident)


@ffi.def_extern()
def dlg_py_prepare(context: Any, native_delegate: Any, ident: int) -> int:
    delegate = REGISTRY.delegate(ident)
    if delegate is None:
        lib.dlg_report(context, f"{PLUGIN}: this delegate was already destroyed".encode())
        return 1
    state = delegate.state
    prep: Preparing | None = None
    try:
        with REGISTRY.lock:  # interpreters sharing the delegate prepare at once: += is a read and a write
            state.prepares += 1
        plan = execution_plan(context)
        prep = Preparing(None, state.report_for(_address(context)), plan)
        with REGISTRY.lock:
            delegate.preparing[_address(context)] = prep
        return delegate.plan.prepare(context, native_delegate, state, prep)
    except _INTERRUPTS as exc:
        return _interrupted(exc)
    except Exception as exc:
        return delegate.plan.fail(context, native_delegate, state, prep, exc)
    finally:
        with REGISTRY.lock:  # only valid inside this Prepare; do not keep the constants alive
            delegate.preparing.pop(_address(context), None)
        if prep is not None:
            prep.close_pending()


@ffi.def_extern()
def dlg_py_kernel_init(context: Any, params: Any, kernel: Any) -> int:
    start = time.perf_counter()
    try:
        delegate = REGISTRY.delegate(int(ffi.cast("int64_t *", params.delegate.data_)[0]))
        if delegate is None:
            raise DelegateError("the delegate was destroyed before its kernel was created")
        nodes = list(int_array(params.nodes_to_replace))
        prep = delegate.preparing.get(_address(context))
        if prep is None:
            raise DelegateError("a delegate kernel was created outside the delegate's Prepare")
        deferred = next((m for part, m in prep.deferred.items() if set(nodes) <= part), None)
        if deferred is not None:
            _copy_error(deferred, kernel.error, ffi.sizeof(kernel.error))
            return 1
        partition = (nodes, list(int_array(params.input_tensors)), list(int_array(params.output_tensors)))
        pending = prep.pending.pop(frozenset(nodes), None)
        if pending is not None:
            runtime, cache_state, start = pending
        else:
            runtime, cache_state = delegate.plan.load(context, partition, delegate.options, prep)
        # the subgraph's own nodes (an unrolled WHILE's copies are made again by a recompile)
        own = set(prep.plan)
        state, captured = delegate.state, {i: n for i, n in prep.graph.nodes.items() if i in own}
        entry = KernelEntry(runtime, state, delegate.plan, prep.report, captured, list(prep.plan), partition)
        handle = REGISTRY.add_kernel(entry)
        entry.dims, entry.arrays = bind_kernel(context, entry.runtime, kernel)
        kernel.handle = handle
        record_device(state, runtime)
        prep.report.partitions.append(partition_info(runtime, nodes, cache_state, start))
        return 0
    except _INTERRUPTS as exc:
        return _interrupted(exc, kernel.error)
    except Exception as exc:
        detail = str(exc) if isinstance(exc, DelegateError) else f"{type(exc).__name__}: {exc}"
        if not isinstance(exc, DelegateError):
            detail += "\n" + "".join(traceback.format_exception(exc)[-3:])
        _copy_error(f"{PLUGIN}: compiling a partition failed: {detail}", kernel.error, ffi.sizeof(kernel.error))
        return 1


@ffi.def_extern()
def dlg_py_kernel_prepare(context: Any, kernel: Any, propagated: int) -> int:
    """The kernel's prepare: nothing to do while the partition's tensors keep the shapes it was
    compiled for; after a resize (TFLite has propagated the new shapes through the original nodes,
    kTfLiteDelegateFlagsRequirePropagatedShapes), the partition is compiled again for them. Where
    TFLite could not propagate them (``propagated`` 0: the delegate cleared the flag, see
    ``claim_rules.propagation_blocker``) the shapes inside the partition are stale, and it refuses."""
    try:
        entry = REGISTRY.kernel(int(kernel.handle))
        if entry is None:
            raise DelegateError("the delegate kernel was already freed")
        runtime = entry.runtime
        ids = [*runtime.input_ids, *runtime.output_ids]
        if [tensor_dims(context, i) for i in ids] == entry.dims:
            return 0
        if not propagated:
            raise DelegateError(
                "TFLite does not propagate shapes through this graph for the delegate (it has a custom op that "
                "only a delegate runs, or nodes that run other subgraphs: IF, WHILE, CALL_ONCE), and the delegate "
                "is applied when the interpreter is created, so this model's inputs keep the shapes it was "
                "converted with: convert it with the input shape you need"
            )
        recompile(context, entry, kernel, REGISTRY.lock)
        return 0
    except _INTERRUPTS as exc:
        return _interrupted(exc, kernel.error)
    except Exception as exc:
        why = cause(exc) if isinstance(exc, DelegateError) else f"{type(exc).__name__}: {cause(exc)}"
        message = f"{PLUGIN}: the partition's tensors changed shape and it could not be compiled again: {why}"
        _copy_error(message, kernel.error, ffi.sizeof(kernel.error))
        return 1


@ffi.def_extern()
def dlg_py_kernel_free(handle: int) -> None:
    """Close the kernel's runtime. TFLite frees kernels from C (the interpreter's destructor), where
    an exception cannot pass: an interrupt landing in the release is held until the release is
    done (Runtime.close resumes), then raised again (cancel.redeliver) instead of being lost."""
    interrupt: BaseException | None = None
    while True:
        try:
            entry = REGISTRY.kernel(handle)
            if entry is not None:
                entry.runtime.close()
            REGISTRY.pop_kernel(handle)
            break
        except _INTERRUPTS as exc:
            interrupt = interrupt or exc
    if interrupt is not None:
        cancel.redeliver(interrupt)


__all__ = ["live_kernels", "live_runtimes", "state_of_pointer"]
