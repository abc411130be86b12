"""The session runs of this process, counted: a load's memory is measured only while none runs
(service/engine/measure.py)."""

from __future__ import annotations

import itertools


class RunCounter:
    """Session runs started and finished in this process (every model, every thread): a context manager around each
    run. `next` on itertools.count is atomic under the GIL."""

    def __init__(self):
        self._started, self._ended = itertools.count(), itertools.count()
        self.started = self.ended = 0

    def __enter__(self):
        self.started = next(self._started) + 1

    def __exit__(self, *exc):
        self.ended = next(self._ended) + 1

    def mark(self) -> tuple[int, int]:
        return self.started, self.ended

    def quiet_since(self, mark: tuple[int, int]) -> bool:
        """No run was in flight at `mark`, and none started or ended since."""
        started, ended = mark
        return started == ended and self.mark() == mark


RUNS = RunCounter()
