#!/usr/bin/env python3
"""Where a model's partitions fail on a device: one launch at a time, then a full run, then the release.

For a crash or a device error seen only on one driver. The model is compiled by the CLI into a
temporary serialization folder; each partition's context is then loaded and:

1. every launch of the plan (conversions and nodes) is enqueued alone and waited for: the first
   that fails is named;
2. the whole plan runs once through the C loop (``Runtime.run``);
3. the memory objects are released one at a time, each printed first (so the last line before a
   crash names the object).

The process ends with ``os._exit`` (no further clean-up), and prints as it goes (flushed).

    python scripts/device_diag.py MODEL.tflite
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyopencl as cl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from delegate._integrity import unseal
from delegate.runtime import Runtime
from delegate.runtime.driver import MemObject


def say(*parts: object) -> None:
    print(*parts, flush=True)


def check_partition(context: Path) -> None:
    rt = Runtime.load(bytes(unseal(context.read_bytes(), str(context))), persistent=False)  # launch by launch
    say(f"{context.name}: {len(rt.node_names)} nodes on {rt.device_info.name}")
    names = rt.node_names
    launches = rt.launches()
    offset = len(launches) - len(names)  # the input conversions come first
    for i, (kernel, global_size, local_size) in enumerate(launches):
        cl.enqueue_nd_range_kernel(rt.queue, kernel, global_size, local_size)
        try:
            rt.queue.finish()
        except cl.Error as exc:
            node = names[i - offset] if 0 <= i - offset < len(names) else "a conversion"
            say(f"  launch {i} ({node}, {kernel.function_name}, global {global_size}, local {local_size}): {exc}")
            return
    say(f"  {len(launches)} launches, one at a time: ok")
    try:
        inputs = [np.random.default_rng(0).random(s, dtype=np.float32) for s in rt.input_shapes]
        outputs = rt.run(inputs)
        say(f"  run: ok, outputs {[o.shape for o in outputs]}, finite {[bool(np.isfinite(o).all()) for o in outputs]}")
    except Exception as exc:
        say(f"  run: {type(exc).__name__}: {exc}")
        return
    seen: set[int] = set()
    for obj in rt._release_order():
        if isinstance(obj, MemObject) and id(obj) not in seen:
            seen.add(id(obj))
            view = cl.Buffer.from_int_ptr(obj.int_ptr, retain=True)  # pyopencl's view of the driver's object
            parent = view.get_info(cl.mem_info.ASSOCIATED_MEMOBJECT)
            count = view.get_info(cl.mem_info.REFERENCE_COUNT) - 1  # less the view's own reference
            kind = cl.mem_object_type.to_string(view.get_info(cl.mem_info.TYPE))
            say(f"  release {kind} {obj.int_ptr:#x} size {view.size} flags {view.flags} refs {count}"
                f"{' parent ' + hex(parent.int_ptr) if parent is not None else ''}")  # fmt: skip
            del parent, view
            obj.release()
    say("  release: ok")


def main() -> int:
    model = Path(sys.argv[1])
    folder = tempfile.mkdtemp()
    compiled = subprocess.run(
        # every partition compiled, in the foreground: the point is to run the device's kernels
        [
            sys.executable,
            "-m",
            "delegate",
            "run",
            str(model),
            "--serialization-dir",
            folder,
            "--json",
            "--option",
            "cpu_when_faster=false",
            "--option",
            "background_compile=off",
        ],
        capture_output=True,
        text=True,
    )
    say(f"{model.name}: compile exit {compiled.returncode}")
    if compiled.returncode != 0:
        say(compiled.stderr[-1500:])
    contexts = sorted(Path(folder).glob("*.ctx"))
    if not contexts:
        say(f"{model.name}: no partition was compiled (nothing the delegate claims?)")
    for context in contexts:
        check_partition(context)
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
