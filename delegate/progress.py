"""Progress of long work (partition compiles, program builds, tuning) as ``logging`` records.

Records go to the ``delegate.progress`` logger at DEBUG level, each with a ``progress`` attribute
(a :class:`Progress`); the CLI renders them as a live line on stderr (``cli_progress.py``), and an
application can attach its own handler. Nothing is formatted unless someone listens.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

LOGGER = logging.getLogger("delegate.progress")


@dataclass(frozen=True)
class Progress:
    """``done`` of ``total`` units of ``step`` are finished; ``detail`` names the current one."""

    step: str
    done: int
    total: int
    detail: str = ""


def report_progress(step: str, done: int, total: int, detail: str = "") -> None:
    if LOGGER.isEnabledFor(logging.DEBUG):
        LOGGER.debug(
            "%s %d/%d%s",
            step,
            done,
            total,
            f" ({detail})" if detail else "",
            extra={"progress": Progress(step, done, total, detail)},
        )
