"""Exceptions raised by the delegate package."""

from __future__ import annotations


class DelegateError(Exception):
    """Base class of every error this package raises on purpose."""


class ContextFormatError(DelegateError, ValueError):
    """An InferenceContext file (or buffer) is not valid, or is over a resource limit.

    ``offset`` is the byte offset where the problem was found, ``kind`` one of
    ``"format"`` (the bytes are not a valid InferenceContext), ``"limit"`` (valid
    so far but over a limit of :class:`delegate.ReadLimits` or of the runtime),
    ``"memory"`` or ``"semantic"`` (well-formed, but a value means nothing the runtime
    can run: a size below 1, an undeclared id; no byte offset is named).
    """

    def __init__(self, message: str, *, offset: int = 0, kind: str = "format", source: str = "<buffer>") -> None:
        self.detail = message
        self.offset = offset
        self.kind = kind
        self.source = source
        where = "" if kind == "semantic" else f" (byte offset {offset})"
        super().__init__(f"{source}: {message}{where}")


class ModelFormatError(DelegateError, ValueError):
    """A TFLite model file (or buffer) is not valid: refused before any TFLite runtime reads it.

    ``field`` is the path of the bad field (``Model.subgraphs[0].operators[3].inputs``), ``offset``
    the byte offset where the problem was found, ``detail`` what is wrong.
    """

    def __init__(self, message: str, *, field: str = "", offset: int = 0, source: str = "<buffer>") -> None:
        self.detail = message
        self.field = field
        self.offset = offset
        self.source = source
        where = f"{field}: " if field else ""
        super().__init__(f"{source}: not a valid TFLite model: {where}{message} (byte offset {offset})")


class CacheIntegrityError(DelegateError):
    """A cache entry (compiled partition, record or program binary) cannot be used: it failed its
    SHA-256 check, was sealed for another key, or is not a regular file of bounded size."""


class SettingsError(DelegateError, ValueError):
    """Acceleration settings that cannot be parsed or are not valid."""


class DeviceNotFoundError(DelegateError):
    """No OpenCL device matches the request; the message lists the devices there are."""


class ProgramBuildError(DelegateError):
    """An OpenCL program failed to build. ``node`` names the node, ``log`` holds the build log."""

    def __init__(self, node: str, log: str, source: str = "") -> None:
        self.node = node
        self.log = log
        self.source = source
        super().__init__(f"kernel of node {node!r} failed to build:\n{log.strip()}")


class PartitionTooLargeError(DelegateError):
    """A partition would compile into a context over the runtime's bounds (context/bounds.py);
    ``node`` is the TFLite node from which on it does not fit (the plugin leaves it on CPU, which
    splits the partition there) and ``reason`` which bound it passes."""

    def __init__(self, message: str, *, node: int, reason: str) -> None:
        self.node = node
        self.reason = reason
        super().__init__(message)


class DeviceResourceError(DelegateError):
    """A context needs more of the device (memory, image size, extensions) than it has."""


class ExecutionError(DelegateError):
    """An OpenCL call failed while running a context."""


class InterpreterBusyError(DelegateError, RuntimeError):
    """A call on an interpreter that another thread is using (``invoke``, ``allocate_tensors``,
    ``set_tensor``, ...): TFLite runs one call at a time per interpreter, so the second caller is
    refused rather than left to corrupt it. Use one interpreter per thread, or a lock."""


class CompilerWarning(UserWarning):
    """A driver's remarks on a program that built (shown only with PYOPENCL_COMPILER_OUTPUT set)."""


class CompileCancelled(BaseException):
    """A background compile stopped because its interpreter was closed or dropped, or the process
    exits. A BaseException, as KeyboardInterrupt: the handlers that turn errors into fallbacks
    must let it through."""


class CacheFolderWarning(UserWarning):
    """A cache folder cannot be created, read or written: the delegate runs without that cache."""
