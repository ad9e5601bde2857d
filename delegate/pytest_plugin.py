"""pytest fixtures to benchmark (or test) a TFLite model on the delegate and on TFLite's CPU path.

The package registers this module as a pytest plugin (a ``pytest11`` entry point), so every
pytest run in an environment with the package has two fixtures, each a factory:

- ``delegate_interpreter(model, *, input_shapes=None, seed=0, settings=None, **options)``:
  ``delegate.Interpreter(model, settings, **options)``, the delegate attached.
- ``cpu_interpreter(model, *, input_shapes=None, seed=0, num_threads=None)``: the host runtime's
  default CPU path (XNNPACK, one thread per core unless ``num_threads``), the reference that
  ``python -m delegate run`` compares with.

Both return the interpreter allocated (after resizing the inputs named or numbered in
``input_shapes``, for a model whose stored input shape is a placeholder) with every input set to
a seeded random value of its dtype (``delegate.model_run.input_value``), and not yet invoked: a
benchmark is ``benchmark(interpreter.invoke)``. The runtime, the compiler and TFLite load only
when a fixture is used; a pytest run that uses none pays only for the package's top level (about
40 ms).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import pytest

if TYPE_CHECKING:
    from .interpreter import DelegatedInterpreter

#: input name (or position) -> its shape
InputShapes = Mapping[str | int, Sequence[int]]


class DelegateInterpreterFactory(Protocol):
    """What the ``delegate_interpreter`` fixture gives."""

    def __call__(
        self,
        model: str | os.PathLike[str],
        *,
        input_shapes: InputShapes | None = None,
        seed: int = 0,
        settings: Any = None,
        **options: Any,
    ) -> DelegatedInterpreter: ...


class CpuInterpreterFactory(Protocol):
    """What the ``cpu_interpreter`` fixture gives: a host-runtime Interpreter."""

    def __call__(
        self,
        model: str | os.PathLike[str],
        *,
        input_shapes: InputShapes | None = None,
        seed: int = 0,
        num_threads: int | None = None,
    ) -> Any: ...


def _shapes(input_shapes: InputShapes | None) -> dict[str | int, tuple[int, ...]] | None:
    return {key: tuple(int(d) for d in dims) for key, dims in input_shapes.items()} if input_shapes else None


def _set_inputs(interpreter: Any, seed: int) -> None:
    from .model_run import seeded_inputs

    for index, value in seeded_inputs(interpreter, seed):
        interpreter.set_tensor(index, value)


def make_delegate_interpreter(
    model: str | os.PathLike[str],
    *,
    input_shapes: InputShapes | None = None,
    seed: int = 0,
    settings: Any = None,
    **options: Any,
) -> DelegatedInterpreter:
    """``model`` on the delegate, allocated, seeded inputs set (the ``delegate_interpreter`` fixture)."""
    from .api import Interpreter
    from .model_run import allocate

    # a benchmark of the delegate: no invokes on TFLite's CPU kernels while it compiles
    interpreter = Interpreter(model, settings=settings, **{"background_compile": "off", **options})
    allocate(interpreter, _shapes(input_shapes))
    _set_inputs(interpreter, seed)
    return interpreter


def make_cpu_interpreter(
    model: str | os.PathLike[str],
    *,
    input_shapes: InputShapes | None = None,
    seed: int = 0,
    num_threads: int | None = None,
) -> Any:
    """``model`` on TFLite's default CPU path, allocated, seeded inputs set (the ``cpu_interpreter`` fixture)."""
    from .model_run import cpu_interpreter as reference

    interpreter = reference(os.fspath(model), _shapes(input_shapes), num_threads)
    _set_inputs(interpreter, seed)
    return interpreter


@pytest.fixture
def delegate_interpreter() -> DelegateInterpreterFactory:
    """A factory: ``delegate_interpreter(model, **options)`` is ``model`` on the delegate, ready to invoke."""
    return make_delegate_interpreter


@pytest.fixture
def cpu_interpreter() -> CpuInterpreterFactory:
    """A factory: ``cpu_interpreter(model)`` is ``model`` on TFLite's default CPU path, ready to invoke."""
    return make_cpu_interpreter
