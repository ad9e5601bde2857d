"""A mini-benchmark worker that fails on purpose at one stage (tests/test_minibenchmark.py).

``python tests/minibenchmark_fault_worker.py crash|hang STAGE``: runs delegate.minibenchmark.worker,
and at STAGE (INITIALIZATION or INFERENCE) kills itself with SIGKILL or sleeps for an hour. The
tests start it through ``delegate.minibenchmark.runner.WORKER``.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from delegate.minibenchmark import worker


def main(fault: str, at: str) -> int:
    if fault not in ("crash", "hang"):
        raise SystemExit(f"unknown fault {fault!r}: crash or hang")

    def stage(name: str) -> None:
        worker.report_stage(name)
        if name != at:
            return
        if fault == "crash":
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(3600)

    return worker.run(stage)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
