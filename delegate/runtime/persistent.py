"""A run of node kernels as one persistent kernel, for CPU devices.

On PoCL every launch ends with one core idle: a worker that finds no work-group left goes to
sleep, and the next kernel starts on one core while the other is woken. A persistent kernel
launches one work-group per compute unit, and each work-group walks the nodes in order itself:
it takes its node's work-groups ("virtual" groups) one after another, emulating their
work-items with loops, and waits on a counter in global memory until every group of a node is
done before it starts the next node. On MobileNetV2 (two cores) that was 7-12% faster than the
same kernels launched one by one (benchmarks/RESULTS.md).

Scheduling: a node's groups are split along its longest grid axis into one contiguous range per
work-group, so a core keeps working on the same part of the image from layer to layer (its
cache holds what it wrote). A work-group that has finished its range takes rows from the others
(work stealing through one counter per range; a node of few rows is taken in runs of groups
across them instead, ``_pieces``), and waits only for groups that some running
work-group has taken: a work-group the driver starts late, or never alongside the others, finds
every node done and finishes, so the kernel cannot deadlock whatever the driver's scheduling.
The last work-group to leave resets the counters for the next run. A node of few groups whose
kernel takes any local size gets smaller ones (``_finer``), so that no work-group waits long for
another's last group.

Which nodes can run inside it (``eligible``): those with buffer arguments only, and either no
barrier and no local memory (their work-items are independent), or code marked
``WORK_GROUP_SERIAL``: a kernel that divides its work-group's items over ``get_local_size(0)``
work-items and synchronises them only with barriers; it runs as one work-item per work-group
(local size 1, local id 0, group ids as launched), its barriers removed. Constants come from one
buffer (the runtime's constant arena).

Each node is a function of its own, called once per virtual work-group, with its work-item code
inlined into the loop over the group's work-items and its scalars and shapes declared inside as
constants, so the compiler specialises it to its shapes and computes what the work-items share
once: MobileNetV2 7% + 2% faster than one function per distinct kernel source taking them as
arguments, for a longer cold compile and a larger binary (docs/runtime.md, Persistent kernels).
Where tensors start in their buffers is not among those constants: the calls pass the buffers at
the tensors' starts, so nodes alike in everything else (a network's repeated blocks) call one
function, compiled once (MobileNetV2: 29 functions for 44 nodes, its cold build 4.6 s -> 3.6 s,
with the same run time).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..context import kernel_text
from . import kernel_scan
from .programs import renamed_kernel
from .source import KernelSource, float_literal

#: the marker of a kernel that one work-item may run a whole work-group of (see the docstring)
#: words of the counter buffer per counter: one 64-byte line each, so cores do not share lines
_LINE = 16
#: a local array's declaration, on a line of its own (kernel_scan.at_line_start)
_LOCAL_DECL = re.compile(r"__local\s+(\w+)\s+(\w+)\s*\[\s*(\d+)\s*\]\s*;")
#: a barrier call, as a whole word (kernel_scan.after_non_word)
_BARRIER = re.compile(r"barrier\s*\([^;]*\)\s*;")
_TYPE_BYTES = {
    "FLT": 4,
    "ACCUM_FLT": 4,
    "float": 4,
    "int": 4,
    "uint": 4,
    "half": 2,
    "char": 1,
    "uchar": 1,
    "short": 2,
    "ushort": 2,
}
#: the work-item functions inside a node function: dlg_g group id, dlg_l local id (its
#: arguments), dlg_ls the local size the code sees (1 for a serial work-group), dlg_st the launched
#: local size (global ids and group counts follow it), dlg_gs the launched global size (constants
#: declared in it)
_VIRTUAL_IDS = """#define DLG_PICK(v, d) ((size_t)((d) == 0 ? (v).x : (d) == 1 ? (v).y : (v).z))
#define get_global_id(d) (DLG_PICK(dlg_g, d) * DLG_PICK(dlg_st, d) + DLG_PICK(dlg_l, d))
#define get_local_id(d) DLG_PICK(dlg_l, d)
#define get_group_id(d) DLG_PICK(dlg_g, d)
#define get_local_size(d) DLG_PICK(dlg_ls, d)
#define get_global_size(d) DLG_PICK(dlg_gs, d)
#define get_num_groups(d) (DLG_PICK(dlg_gs, d) / DLG_PICK(dlg_st, d))
"""
#: the launch sizes a node function declares (see _VIRTUAL_IDS)
_SIZES = ("dlg_ls", "dlg_st", "dlg_gs")
_ID_FUNCTIONS = (
    "get_global_id",
    "get_local_id",
    "get_group_id",
    "get_local_size",
    "get_global_size",
    "get_num_groups",
    "DLG_PICK",
)


@dataclass(frozen=True)
class ArenaSlice:
    """A constant object's place in the runtime's constant arena (bytes)."""

    offset: int
    size: int


@dataclass
class NodeKernel:
    """One node as the runtime resolved it: source, argument values (MemObjects of tensors,
    ArenaSlices of constants, numpy vectors of scalars and shapes) and launch geometry."""

    src: KernelSource
    values: list[Any]
    global_size: tuple[int, ...]
    local_size: tuple[int, ...]
    #: the work-items the node needs per axis (its grid, not rounded up to whole work-groups),
    #: when any local size serves it (no reqd_work_group_size); None: launch as sized above
    grid: tuple[int, ...] | None = None


@dataclass
class PersistentKernel:
    """The source of a persistent kernel and what its parameters are bound to, in order: the
    tensor buffers, then the constant arena, then the counter buffer of ``counter_words``."""

    source: str
    tensor_buffers: list[Any]
    counter_words: int
    #: the kernel function's name in ``source``
    name: str = "dlg_persistent"
    #: per node, in order, the function it calls (its own, or that of the first node alike)
    functions: tuple[str, ...] = ()


def _shares_work_group(code: str) -> bool:
    """Do the kernel's work-items share a work-group (barriers or local arrays)?"""
    if "__local" in code:
        return True
    # the substring test first: the barrier's pattern costs a scan of the whole text
    return "barrier" in code and any(True for _ in kernel_scan.after_non_word(_BARRIER, code))


def _local_bytes(code: str) -> int:
    if "__local" not in code:
        return 0
    total = 0
    for _, match in kernel_scan.at_line_start(_LOCAL_DECL, code, " \t"):
        type_name, count = match.group(1), match.group(3)
        base = type_name.rstrip("0123456789")
        lanes = int(type_name[len(base) :] or 1)
        if base not in _TYPE_BYTES:
            raise ValueError(f"local array of type {type_name}")
        total += -(-_TYPE_BYTES[base] * lanes * int(count) // 32) * 32
    return total


def eligible(src: KernelSource) -> bool:
    """Can the node kernel of ``src`` run inside a persistent kernel (see the module docstring)?"""
    if any(p.kind in ("tensor_image", "object_image") for p in src.params):
        return False
    if not src.body or "main_function" not in src.body:
        return False
    code = src.body
    if not _shares_work_group(code):
        return True
    if not kernel_text.is_serial(code):
        return False
    try:
        _local_bytes(code)
    except ValueError:
        return False
    return True


def _literal(decl_type: str, value: np.ndarray) -> str:
    v = np.asarray(value).ravel()
    if v.dtype.kind in "iu":
        items = ", ".join(str(int(x)) for x in v)
    else:
        items = ", ".join(float_literal(float(x)) for x in v)
    return f"({decl_type})({items})"


#: the name a node function's text is prepared under, replaced by the node's own (_function)
_PLACEHOLDER = "dlg_node_function"


def _prepared(body: str, serial: bool) -> tuple[str, str, str]:
    """``body`` as a function named _PLACEHOLDER, split into what precedes its signature, what
    follows the signature up to its opening brace, and its code: the barriers of a serial node
    removed, its local arrays hoisted onto ``dlg_local``."""
    text = renamed_kernel(body, _PLACEHOLDER)
    text = kernel_text.without_required_work_group(text)
    if serial:
        text = kernel_scan.sub_after_non_word(_BARRIER, text, lambda _: ";")
    hoisted = (
        (line, m.end(), f"  __local {m.group(1)}* {m.group(2)} = (__local {m.group(1)}*)dlg_local;")
        for line, m in kernel_scan.at_line_start(_LOCAL_DECL, text, " \t")
    )
    text = kernel_scan.replaced(text, hoisted)
    head, rest = text.split(f"__kernel void {_PLACEHOLDER}(", 1)
    _, after = rest.split(")", 1)
    opening, code = after.split("{", 1)
    return head, opening, code


def _function(prepared: tuple[str, str, str], name: str, params: list[str], constants: list[str]) -> str:
    """A node's ``prepared`` body (``_prepared``) as the device function ``name`` of one
    work-item, taking the virtual group and local ids and ``params`` (declarations), with
    ``constants`` (declarations with values: the node's launch sizes, scalars and shapes) at the
    top of its body. Static and inlined into its node's group function (``_group_function``): no
    copy of its own in the program."""
    head, opening, code = (part.replace(_PLACEHOLDER, name) for part in prepared)
    virtual = "__local char* dlg_local, int4 dlg_g, int4 dlg_l"
    signature = ", ".join([virtual, *params])
    declarations = "".join(f"  {c};\n" for c in constants)
    return f"{head}static __attribute__((always_inline)) void {name}({signature}){opening}{{\n{declarations}{code}"


def _group_function(name: str, item: str, params: list[str], seen: tuple, ls: tuple, grid: tuple | None) -> str:
    """The device function ``name`` of one virtual work-group: its work-items (``seen``: the
    local size the code sees; launched ``ls``) one after another through ``item``, those inside
    ``grid`` when given (the launch rounds the grid up to whole work-groups). Kept out of line:
    one function per node, what a profiler names (the item code inlined into its loop, so what
    the work-items share is computed once per group)."""
    call = f"{item}(dlg_local, dlg_g, dl{''.join(', ' + p.rsplit(None, 1)[1] for p in params)});"
    if grid is not None:
        inside = [f"dlg_g.{c} * {ls[a]} + dl.{c} < {grid[a]}" for a, c in enumerate("xyz") if grid[a] % ls[a]]
        if inside:
            call = f"if ({' && '.join(inside)}) {call}"
    signature = ", ".join(["__local char* dlg_local, int4 dlg_g", *params])
    return f"""__attribute__((noinline)) void {name}({signature}) {{
  for (uint v = 0u; v < {seen[0] * seen[1] * seen[2]}u; ++v) {{
    const int4 dl = (int4)(v % {seen[0]}u, (v / {seen[0]}u) % {seen[1]}u, v / {seen[0] * seen[1]}u, 0);
    {call}
  }}
}}
"""


def _tensor_offsets(node: NodeKernel) -> dict[str, int]:
    """Where each tensor of ``node`` starts in its buffer (bytes: its shape's s6), by tensor name."""
    return {
        param.name: int(np.asarray(value).ravel()[6])
        for param, value in zip(node.src.params, node.values, strict=True)
        if param.kind == "tensor_shape"
    }


def _at_buffer_start(shape: np.ndarray) -> np.ndarray:
    """A tensor's shape argument with its offset (s6) zero: the offset goes into the buffer
    pointer the node function takes, so nodes alike but for where their tensors lie share it."""
    moved = np.array(shape, copy=True).ravel()
    moved[6] = 0
    return moved


#: what a node alike an earlier one brings to a persistent kernel's build, its step in the kernel
#: function, in bytes of node source that build as long (PoCL, a chain of 24 to 47 nodes alike:
#: 0.05-0.06 s a step; MobileNetV2's node source: 4.2 us a byte)
STEP_BYTES = 12 << 10


def _likeness(node: NodeKernel) -> tuple:
    """Everything a node's functions are made of (``build``): its source, parameter declarations,
    constant values (tensors' offsets apart), launch sizes and grid. Nodes of equal likeness share
    their functions."""
    constants = tuple(
        _at_buffer_start(value).tobytes() if param.kind == "tensor_shape" else np.asarray(value).tobytes()
        for param, value in zip(node.src.params, node.values, strict=True)
        if isinstance(value, np.ndarray)
    )
    decls = tuple(param.decl for param in node.src.params)
    return node.src.body, decls, constants, tuple(node.global_size), tuple(node.local_size), node.grid


def source_sizes(nodes: Sequence[NodeKernel]) -> list[int]:
    """What each node brings to the build of a persistent kernel of them all, in bytes of source:
    its kernel's source, or its step's (STEP_BYTES) where an earlier node is alike."""
    seen: set[tuple] = set()
    sizes = []
    for node in nodes:
        key = _likeness(node)
        sizes.append(STEP_BYTES if key in seen else len(node.src.body))
        seen.add(key)
    return sizes


#: virtual work-groups a node should have per work-group of the persistent kernel (``_finer``)
GROUPS_PER_UNIT = 4


def _finer(grid: tuple[int, ...], gs: tuple[int, ...], ls: tuple[int, ...], units: int) -> tuple[tuple, tuple]:
    """Launch sizes for a node whose work-items any local size serves (its ``grid``): its own
    ``gs`` and ``ls``, unless it has fewer than GROUPS_PER_UNIT virtual groups per work-group of the
    kernel (``units``), where its local size is divided (the largest axis first, by its least
    factor) until it has that many or is one work-item. A work-group takes whole groups, so a node
    of 5 groups on 2 cores kept one core waiting for a fifth of the node (MobileNetV2's last 1x1
    products); its global size is the grid rounded up to the new local size."""
    ls_new = list(ls)

    def groups() -> int:
        return int(np.prod([-(-grid[a] // ls_new[a]) for a in range(3)]))

    while groups() < GROUPS_PER_UNIT * units and max(ls_new) > 1:
        a = max(range(3), key=lambda i: ls_new[i])
        ls_new[a] //= next(f for f in range(2, ls_new[a] + 1) if ls_new[a] % f == 0)
    if ls_new == list(ls):
        return gs, ls
    return tuple(-(-grid[a] // ls_new[a]) * ls_new[a] for a in range(3)), tuple(ls_new)


def build(nodes: Sequence[NodeKernel], names: Sequence[str], units: int = 1) -> PersistentKernel:
    """The persistent kernel of ``nodes`` (all ``eligible``, one prelude), run in order by
    ``units`` work-groups (the launch's; it sizes the smallest nodes' virtual groups, ``_finer``)."""
    if not nodes:
        raise ValueError("a persistent kernel needs nodes")
    texts: list[str] = []
    tensors: dict[int, int] = {}
    tensor_list: list[Any] = []
    local_bytes = 0
    steps: list[str] = []
    prepared: dict[tuple[str, bool], tuple[str, str, str]] = {}  # nodes of one source share the text work
    functions: dict[tuple, str] = {}  # a node's likeness -> the name of its functions in the program
    called: list[str] = []  # per node, the name of the function it calls
    for k, node in enumerate(nodes):
        body = node.src.body
        serial = _shares_work_group(body)
        name = f"n{k}"
        local_bytes = max(local_bytes, _local_bytes(body))
        params: list[str] = []
        constants: list[str] = []
        args = []
        offsets = _tensor_offsets(node)
        for param, value in zip(node.src.params, node.values, strict=True):
            decl = param.decl.replace("__constant ", "__global const ")
            decl_type = decl.rsplit(None, 1)[0]
            if isinstance(value, np.ndarray):
                if param.kind == "tensor_shape":
                    value = _at_buffer_start(value)
                constants.append(f"{decl} = {_literal(decl_type, value)}")
                continue
            params.append(decl)
            if isinstance(value, ArenaSlice):
                args.append(f"({decl_type})(dlg_constants + {value.offset + offsets.get(param.name, 0)})")
            else:
                index = tensors.setdefault(id(value), len(tensors))
                if index == len(tensor_list):
                    tensor_list.append(value)
                offset = offsets.get(param.name, 0) if param.kind == "tensor_buffer" else 0
                args.append(f"({decl_type})(dlg_t{index} + {offset})" if offset else f"({decl_type})dlg_t{index}")
        gs = tuple(node.global_size) + (1,) * (3 - len(node.global_size))
        ls = tuple(node.local_size) + (1,) * (3 - len(node.local_size))
        groups = [gs[a] // ls[a] for a in range(3)]
        # a serial work-group is one work-item: local size 1, the global ids of the group's first item
        seen = (1, 1, 1) if serial else ls
        # work-items past the grid (rounding it up to whole work-groups) are skipped, not called
        grid = None if serial or node.grid is None else tuple(node.grid) + (1,) * (3 - len(node.grid))
        if grid is not None:
            gs, ls = _finer(grid, gs, ls, units)
            groups, seen = [gs[a] // ls[a] for a in range(3)], ls
        key = _likeness(node)
        if key not in functions:  # a node like an earlier one (shapes, constants, launch) calls its function
            functions[key] = name
            launch = zip(_SIZES, (seen, ls, gs), strict=True)
            sizes = [f"int4 {v} = (int4)({x}, {y}, {z}, 0)" for v, (x, y, z) in launch]
            if (body, serial) not in prepared:
                prepared[body, serial] = _prepared(body, serial)
            texts.append(_function(prepared[body, serial], f"{name}_item", params, sizes + constants))
            texts.append(_group_function(name, f"{name}_item", params, seen, ls, grid))
        called.append(functions[key])
        steps.append(_step(k, names[k], functions[key], args, groups, units))
    nodes_count = len(nodes)
    # counters: per node, one range counter per work-group (P of them, up to MAX_UNITS) and a done
    # counter; then the exit counter
    source = "\n".join(
        [
            nodes[0].src.prelude,
            _VIRTUAL_IDS,
            *texts,
            *(f"#undef {f}" for f in _ID_FUNCTIONS),
            _kernel(steps, len(tensor_list), local_bytes, nodes_count),
        ]
    )
    return PersistentKernel(source, tensor_list, _counter_words(nodes_count), functions=tuple(called))


#: the most work-groups (compute units) a persistent kernel is launched with
MAX_UNITS = 64


#: the counter words of one node: a line per range (one per work-group), then its done line
_NODE_WORDS = (MAX_UNITS + 1) * _LINE
#: where a node's done counter lies among its words
_DONE = MAX_UNITS * _LINE


def _counter_words(nodes: int) -> int:
    return nodes * _NODE_WORDS + _LINE  # and the exit counter's line


#: the fewest pieces a node's groups are taken in, per work-group of the kernel (``_pieces``)
PIECES_PER_UNIT = 16


def _pieces(rows: int, inner: int, units: int) -> int:
    """How many pieces the work-groups take a node's ``rows`` x ``inner`` groups in: its rows
    (longest grid axis) where there are PIECES_PER_UNIT per work-group or more, else runs of
    groups cut across rows, that many or one group each. A work-group that has taken its last
    piece waits for the others' last ones: with whole rows, SSD's 9 rows of 3 groups split 5:4
    between two cores, and one core waited a ninth of the node."""
    return max(rows, min(rows * inner, PIECES_PER_UNIT * units))


def _step(k: int, name: str, function: str, args: list[str], groups: list[int], units: int) -> str:
    """Node ``k``: take pieces of its groups (``_pieces``: rows along its longest grid axis, or
    runs of groups in that order), run each group through its group ``function``, then wait for
    the node's end."""
    axis = max(range(3), key=lambda a: groups[a])
    others = [a for a in range(3) if a != axis]
    rows, inner = groups[axis], groups[others[0]] * groups[others[1]]
    component = {axis: "s", others[0]: f"o % {groups[others[0]]}u", others[1]: f"o / {groups[others[0]]}u"}
    group = f"(int4)({component[0]}, {component[1]}, {component[2]}, 0)"
    call = f"{function}(dlg_local, {group}{''.join(', ' + a for a in args)});"
    base = k * _NODE_WORDS
    label = re.sub(r"[^\w+.-]", "_", name)[:80]
    pieces = _pieces(rows, inner, units)
    if pieces == rows:  # a piece is a row: its groups in a loop
        run = f"""const uint s = c;
        for (uint o = 0u; o < {inner}u; ++o) {{
          {call}
        }}"""
    else:  # a piece is a run of groups in row order, from c * total / pieces
        total = rows * inner
        run = f"""const uint end = (uint)((c + 1ul) * {total}ul / {pieces}ul);
        for (uint g = (uint)(c * {total}ul / {pieces}ul); g < end; ++g) {{
          const uint s = g / {inner}u, o = g % {inner}u;
          {call}
        }}"""
    return f"""  /* {label} */
  {{
    const uint n = {pieces}u;
    uint taken = 0u;
    for (uint q = 0u; q < P; ++q) {{
      const uint range = (p + q) % P;
      const uint lo = range * n / P, hi = (range + 1u) * n / P;
      for (uint c = lo + atomic_inc(&dlg_counters[{base} + range * {_LINE}u]); c < hi;
           c = lo + atomic_inc(&dlg_counters[{base} + range * {_LINE}u])) {{
        ++taken;
        {run}
      }}
    }}
    DLG_DONE({base + _DONE}u, taken, n);
  }}"""


def _kernel(steps: list[str], tensors: int, local_bytes: int, nodes: int) -> str:
    params = ", ".join(
        [
            *(f"__global char* dlg_t{i}" for i in range(tensors)),
            "__global const char* dlg_constants",
            "__global volatile uint* dlg_counters",
        ]
    )
    exit_word = nodes * _NODE_WORDS
    return f"""
/* a node is done when the groups every work-group took add up to its n; the wait is for groups a
   running work-group has taken, so it always ends */
#define DLG_DONE(word, taken, n) \\
  do {{ \\
    if ((taken) != 0u) atomic_add(&dlg_counters[word], (taken)); \\
    while (dlg_counters[word] != (n)) {{ }} \\
    atomic_or(&dlg_counters[word], 0u); \\
  }} while (0)

__kernel __attribute__((reqd_work_group_size(1, 1, 1))) void dlg_persistent({params}) {{
  __local float8 dlg_local8[{max(local_bytes, 32) // 32}];
  __local char* dlg_local = (__local char*)dlg_local8;
  const uint p = get_group_id(0), P = get_num_groups(0);
{chr(10).join(steps)}
  if (atomic_inc(&dlg_counters[{exit_word}u]) == P - 1u) {{
    /* the last one out resets the counters for the next run: those this run used, P range
       counters and the done counter of each node, not the lines of every possible work-group */
    for (uint k = 0u; k < {nodes}u; ++k) {{
      for (uint r = 0u; r < P; ++r) dlg_counters[k * {_NODE_WORDS}u + r * {_LINE}u] = 0u;
      dlg_counters[k * {_NODE_WORDS}u + {_DONE}u] = 0u;
    }}
    dlg_counters[{exit_word}u] = 0u;
  }}
}}
"""
