"""Human- and machine-readable summaries of an InferenceContext (``python -m delegate inspect``)."""

from __future__ import annotations

import re
from typing import Any

from .model import (
    BHWDC,
    CLNode,
    InferenceContext,
    Int3,
    TensorDescriptor,
    TensorStorageType,
    element_bytes,
    holds_codes,
)
from .walk import data_bytes

_KERNEL_NAME = re.compile(r"__kernel\s+void\s+(\w+)")


def kernel_name(code: str | None) -> str | None:
    """The kernel a node's source defines (``MAIN_FUNCTION`` expands to ``main_function``)."""
    if not code:
        return None
    found = _KERNEL_NAME.search(code)
    if found:
        return found.group(1)
    return "main_function" if "MAIN_FUNCTION" in code else None


def tensor_bytes(desc: TensorDescriptor) -> int | None:
    """Bytes of device memory a tensor takes: channels padded to slices of 4, except single textures."""
    element = element_bytes(desc)
    if element is None or desc.shape is None:
        return None
    s = desc.shape
    channels = s.c if desc.storage_type == TensorStorageType.SINGLE_TEXTURE_2D else (s.c + 3) // 4 * 4
    return max(s.b, 1) * max(s.h, 1) * max(s.w, 1) * max(s.d, 1) * channels * element


def _xyz(v: Int3 | None) -> list[int] | None:
    return None if v is None else [v.x, v.y, v.z]


def _shape(s: BHWDC | None) -> dict[str, int] | None:
    return None if s is None else {"b": s.b, "h": s.h, "w": s.w, "d": s.d, "c": s.c}


def _node(index: int, node: CLNode) -> dict[str, Any]:
    op = node.gpu_op
    info: dict[str, Any] = {
        "index": index,
        "name": node.name,
        "inputs": node.input_ids,
        "outputs": node.output_ids,
    }
    if op is None:
        return info | {"kernel": None}
    info.update(
        kernel=kernel_name(op.code),
        grid_size=_xyz(op.grid_size),
        work_group_size=_xyz(op.work_group_size),
        work_groups_count=_xyz(op.work_groups_count),
        work_group_launch_order=_xyz(op.work_group_launch_order),
        grid_dimension=op.grid_dimension,
        tensor_to_grid=op.tensor_to_grid.name,
        precision=op.definition.precision.name if op.definition else None,
        linkable_count=op.linkable_count,
        code_bytes=len(op.code.encode()) if op.code else 0,
        weight_bytes=data_bytes(op),
    )
    return info


def summarize(context: InferenceContext, *, file_bytes: int | None = None) -> dict[str, Any]:
    """A JSON-ready summary: options, nodes with launch geometry, tensors with sizes, weight bytes."""
    tensors = []
    for t in context.tensors:
        desc = t.desc or TensorDescriptor()
        tensors.append(
            {
                "id": t.id,
                "shape": _shape(desc.shape),
                "data_type": "codes" if holds_codes(desc) else desc.data_type.name,
                "storage_type": desc.storage_type.name,
                "layout": desc.layout.name,
                "bytes": tensor_bytes(desc),
            }
        )
    nodes = [_node(i, n) for i, n in enumerate(context.nodes)]
    return {
        "file_bytes": file_bytes,
        "precision": context.precision.name,
        "storage_type": context.storage_type.name,
        "need_flush": context.need_flush,
        "flush_periodically": context.flush_periodically,
        "flush_period": context.flush_period,
        "need_manual_release": context.need_manual_release,
        "input_ids": context.input_ids,
        "output_ids": context.output_ids,
        "variable_ids_and_refs": [[p.first, p.second] for p in context.variable_ids_and_refs],
        "weight_bytes": data_bytes(context),
        "code_bytes": sum(n.get("code_bytes", 0) for n in nodes),
        "tensor_bytes": sum(t["bytes"] or 0 for t in tensors),
        "nodes": nodes,
        "tensors": tensors,
    }


def _fmt_xyz(v: list[int] | None) -> str:
    return "-" if v is None else "x".join(str(i) for i in v)


def _fmt_size(n: int) -> str:
    for unit in ("B", "KiB", "MiB"):
        if n < 1024 or unit == "MiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = ["  " + "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return lines


#: what a stored precision runs as where the device decides (run reports the one it got)
_AS_RUN = {"F16": " (runs as F32_F16 on a device without cl_khr_fp16, such as PoCL)"}


def format_summary(summary: dict[str, Any], source: str) -> str:
    """The summary as readable text."""
    s = summary
    yes = {True: "yes", False: "no"}
    lines = [
        f"{source}: InferenceContext, {s['file_bytes']} bytes" if s["file_bytes"] is not None else source,
        f"precision {s['precision']}{_AS_RUN.get(str(s['precision']), '')}, storage {s['storage_type']},"
        f" flush {yes[s['need_flush']]}"
        f" (periodic {yes[s['flush_periodically']]}, period {s['flush_period']}),"
        f" manual release {yes[s['need_manual_release']]}",
        f"inputs {s['input_ids']}  outputs {s['output_ids']}  variables {s['variable_ids_and_refs'] or 'none'}",
        f"weights {_fmt_size(s['weight_bytes'])}, kernel source {_fmt_size(s['code_bytes'])},"
        f" tensors {_fmt_size(s['tensor_bytes'])} (unshared)",
        "",
        f"nodes ({len(s['nodes'])}):",
    ]
    rows = [
        [
            str(n["index"]),
            n["name"] or "-",
            n.get("kernel") or "-",
            _fmt_xyz(n.get("grid_size")),
            _fmt_xyz(n.get("work_group_size")),
            _fmt_xyz(n.get("work_groups_count")),
            ",".join(map(str, n.get("work_group_launch_order") or [])) or "-",
            str(n.get("grid_dimension", "-")),
            ",".join(map(str, n["inputs"])) + " -> " + ",".join(map(str, n["outputs"])),
            _fmt_size(n.get("weight_bytes", 0)),
        ]
        for n in s["nodes"]
    ]
    lines += _table(["#", "name", "kernel", "grid", "work group", "groups", "order", "dim", "tensors", "weights"], rows)
    lines += ["", f"tensors ({len(s['tensors'])}):"]
    rows = [
        [
            str(t["id"]),
            "-" if t["shape"] is None else "x".join(str(t["shape"][k]) for k in "bhwdc"),
            t["data_type"],
            t["storage_type"],
            t["layout"],
            "-" if t["bytes"] is None else _fmt_size(t["bytes"]),
        ]
        for t in s["tensors"]
    ]
    lines += _table(["id", "shape (BxHxWxDxC)", "type", "storage", "layout", "size"], rows)
    return "\n".join(lines)
