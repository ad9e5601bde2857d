"""Kernels with their arguments: each parameter of a kernel source resolved to a value, then all
the kernels of a context built (one program, programs.py) and their arguments set once."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._native import ffi
from ..context import model
from ..errors import ExecutionError, ProgramBuildError
from . import driver, memory
from .allocation import Allocation
from .driver import MemObject, Program
from .graph import RuntimeTensor
from .opencl import cl_api, error_name
from .programs import ProgramBuilder
from .resources import Resources
from .source import KernelSource


@dataclass
class BoundKernel:
    """A kernel's source, node name and argument values (MemObjects, ArenaSlices until the
    constant arena is sealed, numpy vectors); ``kernel``: its cl_kernel handle once made."""

    src: KernelSource
    node: str
    values: list[Any]
    kernel: Any = None


def set_kernel_args(handle: Any, values: Sequence[Any], node: str) -> None:
    """Set every argument of a cl_kernel: memory objects by handle, numpy vectors by value."""
    api = cl_api()
    for index, value in enumerate(values):
        if isinstance(value, MemObject):
            mem = ffi.new("cl_mem *", value.handle)
            rc = api.set_kernel_arg(handle, index, ffi.sizeof("cl_mem"), mem)
        elif isinstance(value, np.ndarray):
            data = np.ascontiguousarray(value)
            rc = api.set_kernel_arg(handle, index, data.nbytes, ffi.from_buffer(data))
        else:
            raise TypeError(f"node {node!r}: kernel argument {index} has type {type(value).__name__}")
        if rc != 0:
            raise ExecutionError(f"node {node!r}: clSetKernelArg({index}) failed: {error_name(rc)}")


class KernelBinder:
    """Resolves kernel parameters against ``allocation`` and makes kernels from ``builder``'s
    programs; the kernels are owned by ``owner``."""

    def __init__(self, builder: ProgramBuilder, allocation: Allocation, owner: Resources) -> None:
        self._builder = builder
        self._allocation = allocation
        self._owner = owner
        self._wrappers: dict[int, Any] = {}  # pyopencl Kernels over the handles, made on demand

    def bind(
        self,
        src: KernelSource,
        node: str,
        tensors: Mapping[str, RuntimeTensor],
        objects: Mapping[str, Any],
        object_tensors: Mapping[str, model.TensorDescriptor],
    ) -> BoundKernel:
        """The kernel of ``src`` with its arguments resolved: graph ``tensors`` and constant
        ``objects`` by name, ``object_tensors`` the descriptors of the constant tensors (their
        shape arguments); built later, with all the others (``make``)."""
        values: list[Any] = []
        for param in src.params:
            if param.kind == "tensor_buffer":
                value = (
                    self._allocation.buffers[tensors[param.name].tensor_id]
                    if param.name in tensors
                    else objects[param.name]
                )
            elif param.kind == "tensor_image":
                value = self._allocation.images[tensors[param.name].tensor_id]
            elif param.kind == "tensor_shape":
                value = self._shape(tensors[param.name] if param.name in tensors else object_tensors[param.name])
            elif param.kind in ("object_buffer", "object_image"):
                value = objects[param.name]
            else:
                value = {"int4": src.int4s, "float4": src.float4s, "half4": src.half4s}[param.kind][param.index]
            values.append(value)
        return BoundKernel(src, node, values)

    def _shape(self, t: RuntimeTensor | model.TensorDescriptor) -> np.ndarray:
        """The tensor's ``int8`` argument: W, H, D, slices, B, C, its byte offset in its buffer and
        the FLT4 elements from one slice plane to the next (constant tensors: unpadded)."""
        if isinstance(t, RuntimeTensor):
            s, offset, pitch = t.shape, self._allocation.offsets.get(t.tensor_id, 0), t.slice_pitch
        else:
            s, offset = memory.Shape.of(t), 0
            pitch = memory.slice_pitch(t)
        return np.array([s.w, s.h, s.d, s.slices, s.b, s.c, offset, pitch], dtype=np.int32)

    def make(
        self, kernels: Sequence[BoundKernel], alongside: Sequence[tuple[str, str]] = ()
    ) -> list[Program | ProgramBuildError]:
        """Build the programs of ``kernels`` (one for all of them), then create each kernel and set
        its arguments through the C API table; the programs of ``alongside`` (source, what) are
        built in the same batch (ProgramBuilder.build_many_alongside) and returned, or their errors."""
        programs, others = self._builder.build_many_alongside(
            [(k.src, k.node) for k in kernels], alongside, "-cl-std=CL1.2"
        )
        for k, (program, name) in zip(kernels, programs, strict=True):
            k.kernel = self.create(program, name, k.node, k.src.text)
            set_kernel_args(k.kernel, k.values, k.node)
        return others

    def create(self, program: Program, name: str, node: str, source: str) -> Any:
        """The kernel ``name`` of ``program`` (its arguments not set)."""
        err = ffi.new("int32_t *")
        handle = cl_api().create_kernel(program.handle, name.encode(), err)
        if err[0] != 0 or handle == ffi.NULL:
            raise ProgramBuildError(node, f"clCreateKernel({name}) failed: {error_name(err[0])}", source)
        return self._owner.kernel(handle)

    def wrapper(self, handle: Any) -> Any:
        """A pyopencl Kernel over a kernel handle (it holds its own reference), for tools;
        pyopencl is imported only here."""
        key = driver.handle_int(handle)
        kernel = self._wrappers.get(key)
        if kernel is None:
            import pyopencl as cl

            kernel = self._wrappers[key] = cl.Kernel.from_int_ptr(key, retain=True)
        return kernel

    def drop_wrappers(self) -> None:
        self._wrappers = {}
