"""What the runtime reads from a kernel's text in a context file, declared where both sides see it.

The schema has no field for these, so the compiler writes them into the code and the runtime
finds them there: ``reqd_work_group_size`` (OpenCL's own attribute), and ``SERIAL_MARKER``, a
comment saying the kernel shares its work-group's items over GROUP_SIZE_0 work-items
(runtime/persistent.py runs such a kernel as one work-item per work-group).
"""

from __future__ import annotations

SERIAL_MARKER = "WORK_GROUP_SERIAL"
