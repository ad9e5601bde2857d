"""The type of what ``delegate.Interpreter`` returns: the host's Interpreter, plus what we add to it.

The host (ai-edge-litert or tflite-runtime) is untyped, so this Protocol states the methods both
hosts' Interpreters have, for type checkers and editors; at run time the object is the host's own,
or a wrapper with the same methods: the execution fallback's (fallback.py) or, while the delegate
compiles in the background, warm_start.WarmStartInterpreter (which adds ``wait_for_delegate``,
``build_finished`` and ``close``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import numpy as np

    from .plugin import DelegateState
    from .settings.mapping import Effective

TensorDetails = dict[str, Any]


class DelegatedInterpreter(Protocol):
    """A TFLite Interpreter with this delegate attached (or on CPU, as the settings asked)."""

    #: what the delegate did (nodes, partitions, reasons a node stayed on CPU, cache, host); None on CPU
    opencl: DelegateState | None
    #: the host's delegate object, for ``experimental_delegates`` of another interpreter; None on CPU
    opencl_delegate: Any
    #: how the acceleration settings mapped onto the delegate; None without settings
    effective: Effective | None

    def allocate_tensors(self) -> None: ...

    def invoke(self) -> None: ...

    def get_input_details(self) -> list[TensorDetails]: ...

    def get_output_details(self) -> list[TensorDetails]: ...

    def get_tensor_details(self) -> list[TensorDetails]: ...

    def set_tensor(self, tensor_index: int, value: np.ndarray) -> None: ...

    def get_tensor(self, tensor_index: int, subgraph_index: int = 0) -> np.ndarray: ...

    def tensor(self, tensor_index: int) -> Callable[[], np.ndarray]: ...

    def resize_tensor_input(self, input_index: int, tensor_size: Sequence[int], strict: bool = False) -> None: ...

    def get_signature_list(self) -> dict[str, dict[str, list[str]]]: ...

    def get_signature_runner(self, signature_key: str | None = None) -> Any: ...

    def reset_all_variables(self) -> None: ...
