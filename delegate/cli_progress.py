"""The CLI's live progress line: renders ``delegate.progress`` records on a terminal's stderr."""

from __future__ import annotations

import logging
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from .progress import LOGGER, Progress


class ProgressLine(logging.Handler):
    """One line, rewritten in place: what is being done, how many of how many, time elapsed.

    Steps nest (a partition's compile builds programs): every unfinished step is shown, outer first.
    """

    def __init__(self, stream: TextIO) -> None:
        super().__init__(logging.DEBUG)
        self.stream = stream
        self.start = time.perf_counter()
        self.width = 0
        self.active: dict[str, Progress] = {}

    def emit(self, record: logging.LogRecord) -> None:
        progress = getattr(record, "progress", None)
        if not isinstance(progress, Progress):
            return
        if progress.done >= progress.total:
            self.active.pop(progress.step, None)
        else:
            self.active[progress.step] = progress
        elapsed = time.perf_counter() - self.start
        parts = [
            f"{p.step} {p.done + 1}/{p.total}" + (f" ({p.detail})" if p.detail else "") for p in self.active.values()
        ]
        columns = shutil.get_terminal_size().columns - 1  # a wrapped line could not be rewritten in place
        text = f"[{elapsed:4.0f} s] {' > '.join(parts) if parts else 'done'}"[:columns]
        self.stream.write("\r" + text.ljust(self.width))
        self.stream.flush()
        self.width = len(text)

    def clear(self) -> None:
        if self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()
            self.width = 0


@contextmanager
def progress_line(enabled: bool, stream: TextIO | None = None) -> Iterator[None]:
    """Shows progress on ``stream`` (stderr) while the block runs, when ``enabled`` and a terminal."""
    out = stream if stream is not None else sys.stderr
    if not enabled or not out.isatty():
        yield
        return
    handler = ProgressLine(out)
    previous = LOGGER.level
    LOGGER.addHandler(handler)
    LOGGER.setLevel(logging.DEBUG)
    try:
        yield
    finally:
        LOGGER.removeHandler(handler)
        LOGGER.setLevel(previous)
        handler.clear()
