"""A helper process that builds OpenCL programs from source for another process (build_processes.py).

Run as ``python -m delegate.runtime.build_worker``. The protocol on its stdin and stdout, each
message a JSON line, some followed by raw bytes:

- in: ``{"device": KEY}``; out: ``{"ready": true}`` once a device with that program key is open,
  else ``{"error": WHY}`` and the helper exits;
- in: ``{"options": OPTIONS, "size": N}`` and N bytes of program source; out: ``{"size": N}`` and
  the N bytes of the built program's binary, or ``{"error": WHY}`` (the requester builds that
  program itself, and reports a kernel's error by node).

It exits at the end of its stdin, and within ``WATCH_S`` of its requester's death.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import BinaryIO

#: how often the helper checks that its requester is alive
WATCH_S = 0.5


def message(header: dict[str, object], payload: bytes = b"") -> bytes:
    """One message of the protocol (the module docstring): a JSON line, then ``payload``."""
    return json.dumps(header).encode() + b"\n" + payload


def _send(out: BinaryIO, header: dict[str, object], payload: bytes = b"") -> None:
    out.write(message(header, payload))
    out.flush()


def _watch_parent(parent: int) -> None:
    """Exit once the requester is gone (its pipe may be held open by others it started)."""
    while os.getppid() == parent:
        time.sleep(WATCH_S)
    os._exit(0)


def serve(inp: BinaryIO, out: BinaryIO) -> int:
    from .device import describe, list_devices
    from .driver import Context, OpenCLError, Program

    setup = json.loads(inp.readline() or b"{}")
    key = setup.get("device")
    found = next((dev for _, _, dev in list_devices() if describe(dev).key == key), None)
    if found is None:
        _send(out, {"error": f"no device with program key {key!r} in this process"})
        return 1
    context = Context(found)
    _send(out, {"ready": True})
    while True:
        line = inp.readline()
        if not line:
            return 0
        request = json.loads(line)
        source = inp.read(int(request["size"])).decode()
        program = None
        try:
            program = Program(context, source=source)
            program.build(str(request["options"]))
            binary = program.binary()
        except OpenCLError as exc:
            _send(out, {"error": str(exc)})
            continue
        finally:
            if program is not None:
                program.release()
        _send(out, {"size": len(binary)}, binary)


def main() -> int:
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()
    try:
        return serve(sys.stdin.buffer, sys.stdout.buffer)
    except (BrokenPipeError, KeyboardInterrupt):
        return 0


if __name__ == "__main__":
    sys.exit(main())
