"""The front door: ``load_delegate`` and ``Interpreter`` for tflite-runtime or ai-edge-litert."""

from __future__ import annotations

import errno
import importlib.util
import os
from collections.abc import Callable
from types import ModuleType
from typing import Any

from . import _native, cancel, warm_start
from .effective import Effective
from .errors import DelegateError
from .host import HostInfo, describe_host, host_module
from .interpreter import DelegatedInterpreter, ExecutionPath
from .measured_choice import CpuMaker, SelectionMaker, measurer
from .model_check import verify_model
from .plugin import DelegateState, state_of_pointer
from .plugin.options import DelegateOptions
from .plugin.registry import compiled_contexts
from .plugin.report import PartitionId, Selection
from .warm_start import BackgroundCompile, not_applicable, resolve_mode


def host_runtime() -> ModuleType:
    """The TFLite Python runtime's interpreter module: ai-edge-litert, else tflite-runtime.

    ``DELEGATE_TFLITE_HOST`` (``litert``, ``ai-edge-litert``, ``tflite-runtime``, ...) picks one.
    """
    return host_module()[1]


def current_host() -> HostInfo:
    """Which host ``host_runtime`` gives, with its version and numpy's."""
    return describe_host(host_module()[0])


def plugin_path() -> str:
    """The shared library to give a Python host's ``load_delegate``: this package's native module is
    the plugin. A process that has not imported the package may load it too: it imports the package
    itself."""
    return os.fspath(_native.__file__)


def c_plugin_path() -> str:
    """The plugin library for any host, C and C++ programs included: it links no Python, starts the
    Python the package was built with when its host has none, then forwards to ``plugin_path()``."""
    spec = importlib.util.find_spec(f"{__package__}._c_host")  # found, never imported: it has no module init
    if spec is None or not spec.origin:
        raise DelegateError("the package was installed without its C-host plugin library (_c_host); reinstall it")
    return os.fspath(spec.origin)


def _decision(settings: Any) -> Any:
    """The BestAccelerationDecision ``settings`` is (a message, or a mini-benchmark storage path), or None."""
    from ._generated import configuration_pb2 as pb
    from .settings.decisions import decision_path, read_decision

    if isinstance(settings, pb.BestAccelerationDecision):
        return settings
    if isinstance(settings, (str, os.PathLike)):
        path = os.fspath(settings)
        if path.endswith(".best.fb") or decision_path(path).exists():
            decision = read_decision(path)
            if decision is None:
                raise DelegateError(f"{path}: no mini-benchmark decision found (expected {decision_path(path)})")
            return decision
    return None


def effective_settings(settings: Any, device: str | None = None, settings_type: Any = None) -> Effective:
    """How ``settings`` (message, bytes, file, dict, or a mini-benchmark decision or its storage
    path) map onto this package on ``device``.

    The device narrows the precision the settings allow to what is fastest on it, and picks the
    storage when latency outranks memory; without any OpenCL device upstream's names are kept
    (and BUFFER storage).
    """
    from .plugin.upstream_options import device_kind
    from .settings.mapping import Effective, load_settings, resolve

    decision = _decision(settings)
    if decision is not None:
        if not decision.HasField("min_latency_event"):
            return Effective(
                "builtin",
                "the mini-benchmark recorded no correct configuration for this model; running on TFLite's CPU kernels",
            )
        message: Any = decision.min_latency_event.tflite_settings
    else:
        message = load_settings(settings, settings_type)
    return resolve(message, device_kind(device or ""))


def load_delegate(settings: Any = None, settings_type: Any = None, **options: Any) -> Any:
    """The host runtime's delegate object for this OpenCL delegate.

    ``settings``: TFLite's acceleration settings (ComputeSettings or TFLiteSettings: a message,
    serialized bytes, a .textproto/.pbtxt/.json/binary file, or a dict), mapped as upstream maps
    them; they must ask for the GPU. ``settings_type`` ("TFLiteSettings", "ComputeSettings" or the
    class) says what bytes or a binary file hold (default ComputeSettings; text, JSON and dicts
    are typed by their fields). ``options`` (see ``DelegateOptions``; upstream's names such as
    ``is_precision_loss_allowed`` too) override them.
    """
    if settings is not None:
        effective = effective_settings(settings, options.get("device"), settings_type)
        if effective.engine != "gpu":
            raise DelegateError(
                f"these settings do not ask for the GPU delegate ({effective.reason}); "
                "use delegate.Interpreter(model, settings=...) to run them"
            )
        options = _over_settings(effective.options, options)
    parsed = DelegateOptions.parse({k: str(v) for k, v in options.items()})  # clear errors before the host's wrapping
    if parsed.device:
        from .runtime.device import select_device

        select_device(parsed.device)  # an unknown device: DeviceNotFoundError, not the host's "Failed to load"
    host, module = host_module()
    host_delegate = module.load_delegate(plugin_path(), {k: str(v) for k, v in options.items()})
    state = delegate_state(host_delegate)
    if state is not None:
        state.host = describe_host(host)
    return host_delegate


def _over_settings(from_settings: dict[str, str], options: dict[str, Any]) -> dict[str, str]:
    """The caller's options over those the settings chose, upstream's names translated first (so an
    option such as ``is_precision_loss_allowed`` replaces the precision the settings chose)."""
    from .plugin.upstream_options import translate

    return {**from_settings, **translate(options)}


def delegate_state(host_delegate: Any) -> DelegateState | None:
    """What a delegate object returned by ``load_delegate`` delegated (nodes, partitions, reasons, cache)."""
    return state_of_pointer(host_delegate._get_native_delegate_pointer())


_INTERPRETER_ARGS = {
    "model_content",
    "num_threads",
    "experimental_op_resolver_type",
    "experimental_preserve_all_tensors",
}


def Interpreter(
    model_path: str | os.PathLike[str] | None = None, settings: Any = None, settings_type: Any = None, **kwargs: Any
) -> DelegatedInterpreter:
    """A ``DelegatedInterpreter`` (the host runtime's Interpreter, by the same methods) configured by
    ``settings`` and/or delegate options.

    ``settings_type`` ("TFLiteSettings", "ComputeSettings" or the class) is what bytes or a binary
    settings file hold (default ComputeSettings); text, JSON and dicts are typed by their fields.

    Settings that ask for the GPU (the default) attach this delegate; delegate NONE and
    ``preference: FORCE_CPU`` give TFLite's builtin kernels with no delegate at all, XNNPACK the
    XNNPACK path (with its threads), OPENGL with compilation fallback TFLite's default CPU plan.
    The delegate object is at ``interpreter.opencl_delegate`` (None on CPU), its state at
    ``interpreter.opencl`` and what it runs with at ``interpreter.effective`` (the mapping of the
    settings, or this delegate with the options given).

    ``num_threads`` (TFLite's, for the nodes TFLite runs): when neither it nor the settings choose,
    an interpreter whose delegate runs on a CPU device (PoCL) takes that device's compute units,
    one thread per core as the delegate's kernels, instead of TFLite's one thread, unless the
    model's estimated work is too small to share (delegate/cpu_threads.py); the choice is at
    ``interpreter.opencl.tflite_threads``.

    ``background_compile`` (``auto``, the default, or ``$DELEGATE_BACKGROUND_COMPILE``; ``on``;
    ``off``): build the delegate in a background thread while invokes run on TFLite's CPU
    kernels, and switch to it at the first invoke after it is ready (delegate/warm_start.py,
    docs/runtime.md "Background compile"). ``auto`` waits up to ``warm_start.AUTO_GRACE_S`` from
    creation for the build in ``allocate_tensors`` (a warm cache: the delegate from the first
    invoke), and leaves stateful models, inputs with open dims and settings without fallback alone.
    """
    if model_path is not None:
        model_path = os.fspath(model_path)
    host = host_runtime()
    mode = resolve_mode(kwargs.pop("background_compile", None))
    interpreter_args = {k: kwargs.pop(k) for k in list(kwargs) if k in _INTERPRETER_ARGS}
    _check_model(model_path, interpreter_args.get("model_content"))
    given = dict(kwargs)  # the caller's options, as ``effective`` reports them
    if model_path is not None:  # read for what TFLite's delegate interface does not give (plugin/loops.py)
        kwargs.setdefault("model_file", model_path)
    effective = None
    if settings is not None:
        effective = effective_settings(settings, kwargs.get("device"), settings_type)
        if effective.num_threads and "num_threads" not in interpreter_args:
            interpreter_args["num_threads"] = effective.num_threads
        if effective.engine != "gpu":
            if effective.engine == "builtin":
                interpreter_args.setdefault(
                    "experimental_op_resolver_type", host.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
                )
            on_cpu = host.Interpreter(model_path=model_path, **interpreter_args)
            return DelegatedInterpreter(on_cpu, path=ExecutionPath.CPU_BY_SETTINGS, effective=effective)
        kwargs = _over_settings(effective.options, kwargs)
    delegate = load_delegate(**kwargs)
    cpu_args = {k: v for k, v in interpreter_args.items() if k != "experimental_op_resolver_type"}
    cores = cpu_device_threads(kwargs.get("device")) if "num_threads" not in interpreter_args else 0

    # execution fallback: an invoke that fails on the device runs on a CPU interpreter made then
    make_cpu = _cpu_maker(host, model_path, cpu_args)
    fallback_cpu = make_cpu if effective is not None and effective.execution_fallback else None

    state: DelegateState | None = None
    cpu = None
    if mode != "off":
        # One thread unless the caller chose: the other cores compile (back-to-back invokes of
        # MobileNetV2 on XNNPACK's default threads made its compile 2.3x slower on 2 cores).
        cpu = host.Interpreter(model_path=model_path, **{"num_threads": 1, **cpu_args})
    if cores > 1:
        # the delegate runs on a CPU device, on every core: TFLite's nodes get them too (cpu_threads.py)
        state = _choose_threads(host, model_path, cpu_args, cpu, cores, interpreter_args, delegate)
    if cpu is not None:
        state = state or delegate_state(delegate)
        reason = not_applicable(cpu, effective)
        if reason is None:
            return DelegatedInterpreter.with_background_compile(
                cpu,
                lambda: _allocated(_delegated(host, model_path, delegate, interpreter_args)),
                mode=mode,
                grace_s=warm_start.AUTO_GRACE_S if mode == "auto" else 0.0,
                fallback_allowed=bool(
                    (state and state.options.compile_fallback) or (effective and effective.execution_fallback)
                ),
                opencl=state,
                opencl_delegate=delegate,
                effective=effective or _from_options(given, interpreter_args),
                make_cpu=fallback_cpu,
                measure=_measurer(state, host, model_path, cpu_args, interpreter_args, kwargs),
            )
        if mode == "on":
            raise DelegateError(f"background_compile=on does not apply: {reason}; use background_compile='off'")
        if state is not None:
            state.background_compile = BackgroundCompile(mode, path="off", cause=reason)
    delegated = _delegated(host, model_path, delegate, interpreter_args)  # the host's error first
    state = state if state is not None else delegate_state(delegate)
    return DelegatedInterpreter(
        delegated,
        opencl=state,
        opencl_delegate=delegate,
        effective=effective or _from_options(given, interpreter_args),
        make_cpu=fallback_cpu,
        measure=_measurer(state, host, model_path, cpu_args, interpreter_args, kwargs),
    )


def _measurer(
    state: DelegateState | None,
    host: Any,
    model_path: str | None,
    cpu_args: dict[str, Any],
    interpreter_args: dict[str, Any],
    options: dict[str, Any],
) -> Callable[[Any], Any]:
    """cpu_when_faster by measurement (measured_choice.py): against TFLite alone with the threads
    the delegated interpreter has, and TFLite's default of one unless the caller chose; each
    partition alone with delegates of the same ``options``."""
    threads = interpreter_args.get("num_threads")
    candidates = (threads,) if "num_threads" in cpu_args else (threads or 1, 1)
    selected = _selection_maker(host, model_path, interpreter_args, options)
    return measurer(state, _threads_maker(host, model_path, cpu_args), candidates, selected)


def _selection_maker(
    host: Any, model_path: str | None, interpreter_args: dict[str, Any], options: dict[str, Any]
) -> SelectionMaker:
    """What makes an allocated host Interpreter of the model with a delegate of ``options`` that
    delegates only the partitions given, loading the contexts ``state``'s delegate compiled for
    them (plugin/report.py, Selection), its inputs resized to ``shapes``."""

    def make(state: DelegateState, keep: frozenset[PartitionId], shapes: list[tuple[int, tuple[int, ...]]]) -> Any:
        delegate = load_delegate(**options)
        selected = delegate_state(delegate)
        assert selected is not None
        contexts = {key: ctx for key, ctx in compiled_contexts(state).items() if key in keep}
        selected.selection = Selection(keep, contexts)
        interpreter = _delegated(host, model_path, delegate, interpreter_args)
        for index, shape in shapes:
            interpreter.resize_tensor_input(index, list(shape))
        return _allocated(interpreter)

    return make


def _cpu_maker(host: Any, model_path: str | None, args: dict[str, Any]) -> Callable[[], Any]:
    """What makes an allocated host Interpreter of the model without the delegate."""

    def make() -> Any:
        cpu = host.Interpreter(model_path=model_path, **args)
        cpu.allocate_tensors()
        return cpu

    return make


def _threads_maker(host: Any, model_path: str | None, args: dict[str, Any]) -> CpuMaker:
    """What makes an allocated host Interpreter of the model without the delegate, on ``n``
    threads, its inputs resized to ``shapes`` (those the delegated one has: a caller's resize)."""

    def make(n: int, shapes: list[tuple[int, tuple[int, ...]]]) -> Any:
        cpu = host.Interpreter(model_path=model_path, **{**args, "num_threads": n})
        for index, shape in shapes:
            cpu.resize_tensor_input(index, list(shape))
        cpu.allocate_tensors()
        return cpu

    return make


def _from_options(options: dict[str, Any], interpreter_args: dict[str, Any]) -> Effective:
    """What an interpreter made from keyword options alone runs with: this delegate, those options."""
    given = {key: str(value) for key, value in options.items()}
    return Effective(
        engine="gpu",
        options=given,
        num_threads=interpreter_args.get("num_threads"),
        compile_fallback=DelegateOptions.parse(given).compile_fallback,
    )


def _check_model(model_path: str | None, model_content: Any) -> None:
    """Refuse a corrupt model before the host reads it (it would crash the host's Interpreter); a
    path that is no file gets the OSError Python gives, not the host's "model allocation is null"."""
    if model_path is not None:
        if not os.path.exists(model_path):
            raise FileNotFoundError(errno.ENOENT, "no such model file", model_path)
        if os.path.isdir(model_path):
            raise IsADirectoryError(errno.EISDIR, "a folder, not a model file", model_path)
        verify_model(model_path)
    elif model_content is not None:
        verify_model(model_content)


def _choose_threads(host: Any, model_path: str | None, cpu_args: dict[str, Any], probe: Any, cores: int,
                    interpreter_args: dict[str, Any], delegate: Any) -> DelegateState | None:  # fmt: skip
    """Set ``interpreter_args``' num_threads from the model's work (cpu_threads.py), read from
    ``probe`` (a host Interpreter of the model, made here when None), and record the choice in
    the delegate's state (returned). A model the host cannot read keeps TFLite's default: its
    delegated Interpreter reports the error."""
    from .cpu_threads import tflite_threads

    try:
        probe = probe if probe is not None else host.Interpreter(model_path=model_path, **cpu_args)
        choice = tflite_threads(probe, cores)
    except (RuntimeError, ValueError):
        return None
    interpreter_args["num_threads"] = choice.threads
    state = delegate_state(delegate)
    if state is not None:
        state.tflite_threads = choice
    return state


def cpu_device_threads(device: Any = None) -> int:
    """Threads for the TFLite nodes of an interpreter whose delegate runs on the OpenCL ``device``
    (None: the default): that device's compute units when it is a CPU device, which the nodes
    then share with the delegate's kernels (one runs at a time); 0 for a GPU or no device."""
    from .errors import DeviceNotFoundError
    from .runtime.device import describe, select_device

    try:
        info = describe(select_device(device or None))
    except DeviceNotFoundError:
        return 0
    return 0 if info.is_gpu else info.compute_units


def _delegated(host: Any, model_path: str | None, delegate: Any, interpreter_args: dict[str, Any]) -> Any:
    """The host's Interpreter with ``delegate`` attached (TFLite prepares the delegate here: the compile)."""
    try:
        with cancel.host_call():  # Ctrl-C during the compile: KeyboardInterrupt, not the host's error
            return host.Interpreter(model_path=model_path, experimental_delegates=[delegate], **interpreter_args)
    except RuntimeError as exc:
        if str(exc).strip():
            raise
        # TFLite returned an error without reporting one: say at least where it failed.
        raise RuntimeError(
            "the TFLite runtime failed to apply the OpenCL delegate without giving a reason; "
            "the host's own Interpreter, without the delegate, shows whether TFLite runs the model by itself"
        ) from exc


def _allocated(interpreter: Any) -> Any:
    with cancel.host_call():
        interpreter.allocate_tensors()
    return interpreter
