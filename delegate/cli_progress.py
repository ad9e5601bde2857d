"""The CLI's live progress line: renders ``delegate.progress`` records on a terminal's stderr.

While the line is shown, whatever else reaches stderr (TFLite's own ``INFO:`` lines from C++,
warnings) is caught at file descriptor 2 and printed above the line, so it never lands in the
middle of it; the elapsed time ticks each second even while one long step runs.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import TextIO

from .progress import LOGGER, Progress

#: how often the elapsed time is redrawn while nothing else changes
TICK_S = 1.0


class ProgressLine(logging.Handler):
    """One line, rewritten in place: what is being done, how many of how many, time elapsed.

    Steps nest (a partition's compile builds programs): every unfinished step is shown, outer first.
    Records, ticks and text printed above come from different threads: one lock orders them.
    """

    def __init__(self, stream: TextIO) -> None:
        super().__init__(logging.DEBUG)
        self.stream = stream
        self.start = time.perf_counter()
        self.width = 0
        self.active: dict[str, Progress] = {}
        self.drawing = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        progress = getattr(record, "progress", None)
        if not isinstance(progress, Progress):
            return
        with self.drawing:
            if progress.done >= progress.total:
                self.active.pop(progress.step, None)
            else:
                self.active[progress.step] = progress
            self._draw()

    def tick(self) -> None:
        """Redraw with the time now, when a step is under way."""
        with self.drawing:
            if self.active:
                self._draw()

    def write_above(self, text: str) -> None:
        """Print ``text`` (whole lines) where the line is, then draw the line again below it."""
        with self.drawing:
            self._erase()
            self.stream.write(text)
            if self.active:
                self._draw()
            else:
                self.stream.flush()

    def clear(self) -> None:
        with self.drawing:
            self._erase()

    def _draw(self) -> None:
        elapsed = time.perf_counter() - self.start
        parts = [
            f"{p.step} {p.done + 1}/{p.total}" + (f" ({p.detail})" if p.detail else "") for p in self.active.values()
        ]
        columns = shutil.get_terminal_size().columns - 1  # a wrapped line could not be rewritten in place
        text = f"[{elapsed:4.0f} s] {' > '.join(parts) if parts else 'done'}"[:columns]
        self.stream.write("\r" + text.ljust(self.width))
        self.stream.flush()
        self.width = len(text)

    def _erase(self) -> None:
        if self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()
            self.width = 0


def _ticking(handler: ProgressLine, stop: threading.Event) -> None:
    while not stop.wait(TICK_S):
        handler.tick()


def _relay(source: int, handler: ProgressLine) -> None:
    """Whole lines read from ``source`` go above the progress line; a last partial line at the end."""
    pending = b""
    while chunk := os.read(source, 65536):
        pending += chunk
        if b"\n" in pending:
            lines, _, pending = pending.rpartition(b"\n")
            handler.write_above((lines + b"\n").decode(errors="replace"))
    if pending:
        handler.write_above(pending.decode(errors="replace") + "\n")


@contextmanager
def _stderr_above(handler: ProgressLine) -> Iterator[None]:
    """Descriptor 2 goes through a pipe whose lines ``handler`` prints above its line."""
    sys.stderr.flush()
    saved = os.dup(2)
    source, sink = os.pipe()
    os.dup2(sink, 2)
    os.close(sink)
    relay = threading.Thread(target=_relay, args=(source, handler), name="delegate-stderr-relay", daemon=True)
    relay.start()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)  # closes the pipe's last writer: the relay reads to its end and stops
        os.close(saved)
        relay.join(timeout=5)
        os.close(source)


@contextmanager
def progress_line(enabled: bool, stream: TextIO | None = None) -> Iterator[None]:
    """Shows progress on ``stream`` (stderr) while the block runs, when ``enabled`` and a terminal."""
    out = stream if stream is not None else sys.stderr
    if not enabled or not out.isatty():
        yield
        return
    # the line is drawn on its own copy of the terminal's descriptor: descriptor 2 is the relay's
    terminal = os.fdopen(os.dup(out.fileno()), "w", encoding=getattr(out, "encoding", None) or "utf-8")
    handler = ProgressLine(terminal)
    previous = LOGGER.level
    stop = threading.Event()
    ticker = threading.Thread(target=_ticking, args=(handler, stop), name="delegate-progress-tick", daemon=True)
    LOGGER.addHandler(handler)
    LOGGER.setLevel(logging.DEBUG)
    ticker.start()
    try:
        with _stderr_above(handler) if out.fileno() == 2 else nullcontext():
            yield
    finally:
        stop.set()
        ticker.join(timeout=5)
        LOGGER.removeHandler(handler)
        LOGGER.setLevel(previous)
        handler.clear()
        terminal.close()
