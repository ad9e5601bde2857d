"""What the runtime reads from a kernel's text in a context file, in one place both sides see.

The schema has no field for these, so the compiler writes them into the code and the runtime
finds them there:

- ``reqd_work_group_size(x, y, z)``, OpenCL's own kernel attribute: the one work-group size the
  kernel runs with (``required_work_group``), removed when the kernel is inlined into another
  (``without_required_work_group``);
- ``SERIAL_MARKER``, a comment saying the kernel shares its work-group's items over GROUP_SIZE_0
  work-items, so that it also runs as one work-item per work-group (runtime/persistent.py).

A context file is untrusted: a missing or malformed attribute reads as absent, never as an error
here; the runtime checks the sizes it launches against the built kernel.
"""

from __future__ import annotations

import re

SERIAL_MARKER = "WORK_GROUP_SERIAL"

_REQUIRED_SIZE = re.compile(r"reqd_work_group_size\s*\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\)")
_REQUIRED_ATTRIBUTE = re.compile(r"__attribute__\s*\(\(\s*reqd_work_group_size\s*\([^)]*\)\s*\)\)\s*")


def required_work_group(code: str) -> tuple[int, int, int] | None:
    """The ``reqd_work_group_size`` written in ``code``, or None when it leaves the size open."""
    if "reqd_work_group_size" not in code:
        return None
    match = _REQUIRED_SIZE.search(code)
    if match is None:
        return None
    x, y, z = (int(v) for v in match.groups())
    return x, y, z


def without_required_work_group(code: str) -> str:
    """``code`` with its ``__attribute__((reqd_work_group_size(...)))`` removed."""
    return _REQUIRED_ATTRIBUTE.sub("", code)


def is_serial(code: str) -> bool:
    """Does ``code`` say its work-group's items are shared over GROUP_SIZE_0 work-items?"""
    return SERIAL_MARKER in code
