"""Building OpenCL programs: identical sources once per context, binaries cached on disk.

``build_many`` puts all the kernels of a context (that share a prelude) into one program: a
driver's fixed cost per program (PoCL: the compiler start-up of every build, and loading each
binary again on a warm start) is paid once. Each kernel keeps its own selector macros (undefined
after it) and gets a unique function name; helper functions it defines are renamed per kernel.
A merged program the driver rejects is split again, so a failing kernel is reported by node.
Where the driver compiles one program at a time per process (PoCL), the kernels are split into a
few programs built at once in helper processes (build_processes.py).

The cache key is a SHA-256 of the device (platform, name, vendor, driver and OpenCL version),
this package's version, the build options and the source; entries (delegate/cache.py,
``ProgramBinaries``) are written atomically with a SHA-256 trailer that holds the key, and a binary
that fails that check, was sealed for another key (another program's, copied over), or that the
driver rejects (clCreateProgramWithBinary, the build, or kernels missing from it) is reported,
rebuilt from source and replaced; a folder that cannot be used is reported once and skipped.
Programs are made through the C API table (driver.py), so no other cache stands between this one
and the driver and the build count is exact. A driver's remarks on a build that succeeded are
shown, as a ``CompilerWarning``, only when ``PYOPENCL_COMPILER_OUTPUT`` is set (the variable
pyopencl reads for the same purpose).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import string
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .. import cancel
from .._version import __version__
from .._warnings import warn
from ..cache import ProgramBinaries
from ..errors import CacheIntegrityError, CompilerWarning, ProgramBuildError
from ..progress import report_progress
from . import build_processes, kernel_scan
from .device import DeviceInfo
from .driver import Context, OpenCLError, Program
from .source import KernelSource

log = logging.getLogger(__name__)

#: a macro's definition, on a line of its own (kernel_scan.at_line_start)
_MACRO = re.compile(r"#\s*define\s+(\w+)")
#: a function defined at the top level of a kernel's code (a return type, a name, parameters, a
#: body, from the start of a line: kernel_scan.unindented; not the kernel itself, not a statement)
_HELPER = re.compile(r"(?!__kernel)[A-Za-z_]\w*[\w \t*]*?[ \t*]+(\w+)\s*\([^;{)]*\)\s*\{")
#: the kernel functions a program's source defines (attributes may stand between __kernel and void)
_KERNEL = re.compile(r"__kernel\b[^{;]*?\bvoid\s+(\w+)\s*\(")
_INVALID_KERNEL_NAME = -46
_KEYWORDS = frozenset({"if", "for", "while", "switch", "return", "else", "do", "sizeof"})


@dataclass
class BuildStats:
    """How the programs of a context were obtained: compiled, loaded from the cache, or shared."""

    #: programs compiled from source and programs loaded from the binary cache
    built_from_source: int = 0
    loaded_from_cache: int = 0
    #: kernels whose source another kernel of the context already has (built once)
    reused_in_context: int = 0
    #: of ``built_from_source``, the programs helper processes built (build_processes.py)
    built_in_helpers: int = 0


class ProgramBuilder:
    """Builds the programs of one context on its device; holds them until ``release`` (kernels
    made from a program keep it alive in the driver, so releasing after making them is safe)."""

    def __init__(self, context: Context, info: DeviceInfo, cache_dir: Path | None) -> None:
        self.context = context
        self.info = info
        self.cache_dir = cache_dir
        self.stats = BuildStats()
        self._programs: dict[str, Program] = {}
        self._binaries = None if cache_dir is None else ProgramBinaries.open(cache_dir)
        #: processes that may build at once (1: every program here)
        self.processes = build_processes.process_count(info)
        #: helpers only on idle cores (unless $DELEGATE_BUILD_PROCESSES asked for a number)
        self.load_aware = build_processes.configured() is None

    def release(self) -> None:
        if not cancel.driver_call_abandoned():  # else left to the process's exit: a release would wait
            for program in self._programs.values():
                program.release()
        self._programs = {}

    def _key(self, source: str, options: str) -> str:
        h = hashlib.sha256()
        for part in (self.info.key, __version__, options, source):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()

    def _build(self, program: Program, options: str, node: str) -> None:
        """Build ``program`` (from source or a binary) for the device."""
        # The main thread waits instead of building: Ctrl-C is seen during a build of seconds.
        log = cancel.call_interruptibly(lambda: program.build(options)).strip()
        # A driver's remarks on a build that succeeded (NVIDIA's say its kernels are not
        # inlined) are not the user's business; PYOPENCL_COMPILER_OUTPUT=1 shows them.
        if log and os.environ.get("PYOPENCL_COMPILER_OUTPUT"):
            warnings.warn(
                f"the OpenCL compiler's remarks on the kernels of {node}:\n{log}", CompilerWarning, stacklevel=3
            )

    def _load(self, binary: bytes, source: str, options: str, node: str) -> Program:
        """The program of ``binary`` built for the device; OpenCLError (nothing left behind) when the
        driver rejects it: at clCreateProgramWithBinary, at the build, or without the kernels
        ``source`` defines (clCreateKernel would fail)."""
        program = None
        try:
            program = Program(self.context, binary=binary)
            self._build(program, options, node)
            missing = sorted(set(_KERNEL.findall(source)) - program.kernel_names())
            if missing:
                raise OpenCLError("clCreateKernel", _INVALID_KERNEL_NAME, f"the binary has no kernel {missing[0]}")
            return program
        except OpenCLError:
            if program is not None:
                program.release()
            raise

    def _from_cache(self, key: str, source: str, options: str, node: str) -> Program | None:
        """The program stored under ``key``, built from its binary; None (reported, the entry
        removed) when it is bad or the driver rejects it: at clCreateProgramWithBinary, at the
        build, or without the kernels ``source`` defines (clCreateKernel would fail)."""
        if self._binaries is None:
            return None
        try:
            binary = self._binaries.read(key)
        except CacheIntegrityError as exc:
            warn(f"{exc}: rebuilding it from source")
            self._binaries.discard(key)
            return None
        if binary is None:
            return None
        try:
            return self._load(bytes(binary), source, options, node)
        except OpenCLError as exc:
            where = self._binaries.path(key)
            warn(f"program binary {where} is rejected by the driver ({exc}): rebuilding it from source")
            self._binaries.discard(key)
            return None

    def _store(self, key: str, program: Program, complete: bool = False) -> None:
        """Put ``program``'s binary in the disk cache, if there is one; ``complete``: ask for the
        binary anyway, so the driver compiles the kernels now (PoCL compiles them at the binary,
        else at their first launch)."""
        if self._binaries is None and not complete:
            return
        try:
            binary = cancel.call_interruptibly(program.binary)  # PoCL compiles here too: seconds
        except OpenCLError:
            return  # the cache is an optimisation; a driver without binaries must not fail the load
        if self._binaries is not None:
            self._binaries.write(key, binary)

    def build(self, source: str, options: str, node: str) -> Program:
        """The built program of ``source``: from this context, the disk cache, or the compiler."""
        cancel.checkpoint()  # between builds: a cancelled background compile stops here
        return self._existing(source, options, node) or self._compile(source, options, node)

    def _existing(self, source: str, options: str, node: str) -> Program | None:
        """The program of ``source`` from this context or the disk cache, if it is there."""
        key = self._key(source, options)
        program = self._programs.get(key)
        if program is not None:
            self.stats.reused_in_context += 1
            return program
        program = self._from_cache(key, source, options, node)
        if program is not None:
            self.stats.loaded_from_cache += 1
            self._programs[key] = program
        return program

    def _compile(self, source: str, options: str, node: str, complete: bool = False) -> Program:
        """``source`` built by the driver (and stored in the disk cache); ``complete`` as for ``_store``."""
        try:
            program = Program(self.context, source=source)
        except OpenCLError as exc:
            raise ProgramBuildError(node, str(exc), source) from None
        try:
            self._build(program, options, node)
        except OpenCLError as exc:
            program.release()
            raise ProgramBuildError(node, exc.detail or str(exc), source) from None
        self.stats.built_from_source += 1
        key = self._key(source, options)
        self._store(key, program, complete)
        self._programs[key] = program
        return program

    def _adopt(self, binary: bytes, source: str, options: str, node: str) -> Program | None:
        """The program a helper process built, from its ``binary`` (stored in the disk cache);
        None where the driver rejects it here."""
        try:
            program = self._load(binary, source, options, node)
        except OpenCLError:
            return None
        key = self._key(source, options)
        if self._binaries is not None:
            self._binaries.write(key, binary)
        self.stats.built_from_source += 1
        self.stats.built_in_helpers += 1
        self._programs[key] = program
        return program

    def build_parts(self, parts: Sequence[tuple[str, str]], options: str) -> list[Program | ProgramBuildError]:
        """The program of each (source, node names), or the error of the one that failed to build:
        those in neither cache built at once, here and in helper processes (build_processes.py)."""
        results: dict[int, Program | ProgramBuildError] = {}
        pending: list[int] = []
        for index, (source, node) in enumerate(parts):
            cancel.checkpoint()
            program = self._existing(source, options, node)
            if program is None:
                pending.append(index)
            else:
                results[index] = program

        # idle_cores looks at the machine for a few milliseconds: only where there is a build to share
        share = self.load_aware and len(pending) > 1 and self.processes > 1
        limit = min(self.processes, build_processes.idle_cores()) if share else self.processes
        helpers = min(limit, len(pending)) - 1

        def build_here(index: int) -> None:
            source, node = parts[index]
            cancel.checkpoint()
            try:
                # beside helpers, which hand over compiled kernels, this process compiles its own now
                results[index] = self._compile(source, options, node, complete=helpers > 0)
            except ProgramBuildError as exc:
                results[index] = exc

        if helpers > 0:
            pending.sort(key=lambda i: -len(parts[i][0]))  # the costliest start first
            sources = [source for source, _ in parts]
            binaries = build_processes.build_in_processes(pending, sources, options, self.info.key, helpers, build_here)
            for index, binary in binaries.items():
                source, node = parts[index]
                program = self._adopt(binary, source, options, node)
                if program is not None:
                    results[index] = program
        for index in pending:
            if index not in results:
                build_here(index)
        return [results[index] for index in range(len(parts))]

    def build_many(self, kernels: Sequence[tuple[KernelSource, str]], options: str) -> list[tuple[Program, str]]:
        """(program, kernel function name) for each (source, node name): identical sources once,
        all kernels with one prelude in one program (see the module docstring)."""
        return self.build_many_alongside(kernels, (), options)[0]

    def build_many_alongside(
        self, kernels: Sequence[tuple[KernelSource, str]], alongside: Sequence[tuple[str, str]], options: str
    ) -> tuple[list[tuple[Program, str]], list[Program | ProgramBuildError]]:
        """``build_many`` of ``kernels``, and the program (or the error) of each (source, what) of
        ``alongside``: all in one ``build_parts``, so where helper processes build, a context's
        small kernels build beside its large programs rather than before them (PoCL pays its
        compiler's start-up at a process's first build: MobileNetV2's conversions took 0.67 s alone)."""
        unique: dict[str, int] = {}  # kernel text -> index into order
        order: list[tuple[KernelSource, str]] = []
        slots: list[int] = []
        for src, node in kernels:
            if src.text in unique:
                self.stats.reused_in_context += 1
            else:
                unique[src.text] = len(order)
                order.append((src, node))
            slots.append(unique[src.text])
        by_prelude: dict[str, list[int]] = {}
        for index, (src, _) in enumerate(order):
            by_prelude.setdefault(src.prelude if src.body else src.text, []).append(index)

        start, from_source, from_cache = time.perf_counter(), self.stats.built_from_source, self.stats.loaded_from_cache
        from_helpers = self.stats.built_in_helpers
        # each part: the kernels (indices into order) it holds and whether they keep their own
        # names (a kernel alone) or take k<index>
        groups: list[tuple[list[int], bool]] = []
        sources: list[tuple[str, str]] = []
        for prelude, members in by_prelude.items():
            if len(members) == 1 or any(not order[i][0].body for i in members):
                for i in members:
                    groups.append(([i], False))
                    sources.append((order[i][0].text, order[i][1]))
                continue
            costs = [len(order[i][0].body) for i in members]
            count = build_processes.part_count(sum(costs), self.processes)
            for part in build_processes.split(costs, count):
                group = [members[j] for j in part]
                groups.append((group, True))
                code = "\n".join([prelude, *(renamed_kernel(order[i][0].body, f"k{i}") for i in group)])
                sources.append((code, ", ".join(order[i][1] for i in group)))
        first = order[0][1] if order else alongside[0][1] if alongside else ""
        report_progress("building OpenCL programs", 0, 1, first)
        results = self.build_parts([*sources, *alongside], options)
        built: dict[int, tuple[Program, str]] = {}
        for (group, merged), program in zip(groups, results[: len(groups)], strict=True):
            if not isinstance(program, ProgramBuildError):
                built.update({i: (program, f"k{i}" if merged else "main_function") for i in group})
            elif not merged:
                raise program
            else:  # which kernel fails? (or, if none alone, keep them apart)
                for i in group:
                    built[i] = (self.build(order[i][0].text, options, order[i][1]), "main_function")
        report_progress("building OpenCL programs", 1, 1)
        log.info(
            "programs for %d kernels and %d alongside: %d built from source (%d by helper processes), "
            "%d from the program cache, in %.2f s",
            len(kernels),
            len(alongside),
            self.stats.built_from_source - from_source,
            self.stats.built_in_helpers - from_helpers,
            self.stats.loaded_from_cache - from_cache,
            time.perf_counter() - start,
        )
        return [built[slot] for slot in slots], results[len(groups) :]


def renamed_kernel(body: str, name: str) -> str:
    """``body`` with its kernel function called ``name``, its helper functions and macros private
    to it (helpers renamed through a macro, every macro undefined after it)."""
    helpers = sorted({m.group(1) for m in kernel_scan.unindented(_HELPER, body)} - _KEYWORDS - {"main_function"})
    head = "".join(f"#define {h} {h}_{name}\n" for h in helpers)
    code = body.replace("__kernel void main_function(", f"__kernel void {name}(", 1)
    macros = [m.group(1) for _, m in kernel_scan.at_line_start(_MACRO, body, string.whitespace)]
    tail = "".join(f"#undef {m}\n" for m in dict.fromkeys([*macros, *helpers]))
    return head + code + "\n" + tail
