"""`python -m inr_client fit PATH...`: fit a collection of photos, unattended (docs/client.md).

Each photo is read and hashed (sha256 of its bytes) and looked up (`GET /v1/fits?sha256=`): when a job queued,
running or succeeded has its bytes, it is skipped without uploading. The others are uploaded with
`skip_existing`, so the service checks again in the transaction that queues the job: an upload raced by another
client, or sent again after a lost answer, is never fitted twice. `--refit` uploads every photo as a new job.

Retry rules (`Fitter.call`):
- 429, the fit queue is full: wait its Retry-After (the bar says so, counting down) and send again, for as long
  as it takes; a full queue is not an error.
- a connection error, a timeout or a 5xx: sent again up to `retries` times, after 1, 2, 4 … s (at most 30 s, or
  a longer Retry-After), then that photo is reported failed and the others go on.
- any other 4xx is about the photo (400 not an image or damaged, 413 too large, 409): reported for it. Those
  that would refuse every photo alike (403 the `fit` group is restricted, 422 an option out of range, 404/405 no
  fit routes, 415) stop the command: one line, exit 2.
With `--wait`, each job is followed (`GET /v1/fits/ID`, every second, also while a full queue is waited out)
until it ends; a job that cannot be read for as long as the retries last is reported for its photo.
"""

from __future__ import annotations

import hashlib
import math
import sys
import time
from typing import Callable, Sequence

import httpx

from .calls import ServiceError
from .photos import COUNTS, FINISHED, Photo, one_line

FATAL = frozenset({401, 403, 404, 405, 415, 422})  # statuses that would refuse every photo alike
BACKOFF_S = 1.0
BACKOFF_CAP_S = 30.0
QUEUE_FULL_WAIT_S = 5.0  # a 429 without Retry-After
POLL_S = 1.0


class GaveUp(Exception):
    """A connection error or a 5xx outlasted the retries."""


class Bar:
    """One tqdm bar over the photos on stderr, shown from the first photo done or the first wait (so that an
    error before any progress is still the only line on stderr); `status` is its text after the counts."""

    def __init__(self, total: int, enabled: bool):
        self.total, self.enabled, self.bar, self.counts, self.status = total, enabled, None, "", ""

    def _bar(self):
        if self.bar is None and self.enabled:
            from tqdm import tqdm

            self.bar = tqdm(total=self.total, unit="photo", desc="fit", file=sys.stderr, dynamic_ncols=True)
        return self.bar

    def show(self, counts: str | None = None, status: str | None = None, done: int = 0) -> None:
        self.counts = self.counts if counts is None else counts
        self.status = self.status if status is None else status
        bar = self._bar() if (done or self.status or self.bar) else None
        if bar is not None:
            bar.set_postfix_str(" · ".join(t for t in (self.counts, self.status) if t), refresh=not done)
            if done:
                bar.update(done)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class Fitter:
    """Submit each photo, follow the jobs (`wait`), and keep going through full queues and flaky connections."""

    def __init__(
        self,
        client,
        photos: Sequence[Photo],
        options: dict,
        *,
        wait: bool = False,
        refit: bool = False,
        retries: int = 4,
        progress: bool = True,
    ):
        self.client, self.photos, self.options = client, list(photos), options
        self.wait, self.refit, self.retries = wait, refit, retries
        self.bar = Bar(len(self.photos), progress)
        self.waits, self.waited_s = 0, 0.0
        self._polled, self._polling = -math.inf, False

    # -- the run ---------------------------------------------------------------------------------------
    def run(self) -> list[Photo]:
        try:
            for photo in self.photos:
                self.send(photo)
                self.poll()
            while any(p.follow and not p.done for p in self.photos):
                self.sleep(POLL_S)
        finally:
            self.bar.close()
        return self.photos

    def send(self, photo: Photo) -> None:
        try:
            data = photo.path.read_bytes()
        except OSError as e:
            return self.end(photo, "failed", f"cannot read it: {e.strerror or e}")
        photo.sha256 = hashlib.sha256(data).hexdigest()
        try:
            if not self.refit:
                found = self.call(lambda: self.client.fits_with_sha256(photo.sha256))
                same = [r for r in found if r["state"] in COUNTS and r.get("source", {}).get("sha256") == photo.sha256]
                if same:
                    return self.skipped(photo, same[0])
            got = self.call(
                lambda: self.client.submit_fit(data, photo.path.name, skip_existing=not self.refit, **self.options)
            )
        except GaveUp as e:
            return self.end(photo, "failed", str(e))
        except ServiceError as e:
            if e.status in FATAL:
                raise
            return self.end(photo, "failed", f"{e.status}: {one_line(e.message)}")
        if got.existing:
            return self.skipped(photo, got.record)
        photo.update(got.record)
        if self.wait and photo.state not in FINISHED:
            photo.follow = True
            self.tally()
        else:
            self.end(photo)

    def skipped(self, photo: Photo, record: dict) -> None:
        photo.state = "skipped"
        photo.update(record)
        if self.wait and record["state"] not in FINISHED:
            photo.follow = True  # queued or running: its end is this photo's
            self.tally()
        else:
            self.end(photo)

    def end(self, photo: Photo, state: str | None = None, note: str = "") -> None:
        if state is not None:
            photo.state, photo.note = state, one_line(note)
        photo.done = True
        self.bar.show(self.counts(), done=1)

    def tally(self) -> None:
        self.bar.show(self.counts())

    def counts(self) -> str:
        done = [p for p in self.photos if p.done]
        parts = {
            "fitted": sum(p.state == "succeeded" for p in done),
            "queued": sum(p.state in ("queued", "running") or (p.follow and not p.done) for p in self.photos),
            "skipped": sum(p.state == "skipped" for p in done),
            "failed": sum(p.failed for p in done),
        }
        return ", ".join(f"{n} {k}" for k, n in parts.items() if n)

    # -- following jobs ----------------------------------------------------------------------------------
    def poll(self, force: bool = False) -> None:
        """Read each followed job that has not ended (at most every POLL_S); an ended one ends its photo."""
        if not self.wait or self._polling or (not force and time.monotonic() - self._polled < POLL_S):
            return
        self._polling = True
        try:
            for photo in [p for p in self.photos if p.follow and not p.done]:
                try:
                    record = self.call(lambda job=photo.job: self.client.fit_record(job))
                except (GaveUp, ServiceError) as e:
                    status = f"{e.status}: {one_line(e.message)}" if isinstance(e, ServiceError) else str(e)
                    self.end(photo, "failed", f"lost track of job {photo.job}: {status}")
                    continue
                photo.update(record)
                if record.get("state") in FINISHED:
                    self.end(photo)
        finally:
            self._polled, self._polling = time.monotonic(), False

    # -- waiting and retrying ----------------------------------------------------------------------------
    def sleep(self, seconds: float, status: str = "") -> None:
        """Wait `seconds`, the bar showing `status` (its `{}` the seconds left); jobs are followed meanwhile."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            if status:
                self.bar.show(status=status.format(math.ceil(left)))
            self.poll()
            time.sleep(min(0.5, max(0.0, end - time.monotonic())))
        if status:
            self.bar.show(status="")

    def call(self, fn: Callable):
        """fn() by the retry rules (module docstring): a 429 waits Retry-After for as long as it takes; a
        connection error or a 5xx is tried again `retries` times with backoff, then GaveUp; other errors raise."""
        tries = 0
        while True:
            try:
                return fn()
            except ServiceError as e:
                if e.status == 429:
                    wait = e.retry_after or QUEUE_FULL_WAIT_S
                    self.waits += 1
                    self.waited_s += wait
                    self.sleep(wait, "fit queue full: sending again in {} s")
                    continue
                if e.status < 500:
                    raise
                problem, wait = f"service answered {e.status}: {one_line(e.message, 200)}", e.retry_after or 0
            except httpx.TransportError as e:
                problem, wait = f"cannot talk to the service: {one_line(str(e) or type(e).__name__, 200)}", 0
            if tries >= self.retries:
                raise GaveUp(problem + (f" (tried {tries + 1} times)" if tries else ""))
            wait = max(wait, min(BACKOFF_CAP_S, BACKOFF_S * 2**tries))
            tries += 1
            shown = problem[:60].replace("{", "{{").replace("}", "}}")
            self.sleep(wait, f"{shown}: try {tries + 1} of {self.retries + 1} in {{}} s")
