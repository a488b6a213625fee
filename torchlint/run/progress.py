"""A one-line progress counter on a terminal, for runs long enough to need one.

Shown on standard error only when it is a terminal (never in pipes, files, CI logs or editors), only
after the run has taken ``DELAY_S`` (a quick run prints nothing extra), at most ``RATE_HZ`` times a second,
and erased before the report is printed.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Optional, TextIO

DELAY_S = 1.0
RATE_HZ = 10


class Progress:
    def __init__(self, total: int, stream: TextIO, clock=time.monotonic) -> None:
        self.total = total
        self._stream = stream
        self._clock = clock
        self._started = clock()
        self._last_shown = float("-inf")
        self._width = 0  # characters on the line now, to erase

    @classmethod
    def for_terminal(cls, total: int, quiet: bool = False) -> Optional["Progress"]:
        """A counter on stderr where a person watches it, else None."""
        stream = sys.stderr
        if quiet or total < 2 or os.environ.get("TERM") == "dumb" or not _is_terminal(stream):
            return None
        return cls(total, stream)

    def update(self, done: int) -> None:
        now = self._clock()
        if now - self._started < DELAY_S or now - self._last_shown < 1 / RATE_HZ:
            return
        self._last_shown = now
        text = f"torchlint: {done:,}/{self.total:,} files checked ({done * 100 // self.total}%)"
        self._stream.write("\r" + text.ljust(self._width))
        self._stream.flush()
        self._width = len(text)

    def close(self) -> None:
        if self._width:
            self._stream.write("\r" + " " * self._width + "\r")
            self._stream.flush()
            self._width = 0


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # replaced or closed streams
        return False
