"""The photos of `python -m inr_client fit PATH...`: which files PATHs name, each photo's outcome, and the summary
table printed at the end."""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from .calls import ClientError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".webp", ".tif", ".tiff", ".bmp")
GLOB = re.compile(r"[*?[]")
COUNTS = ("queued", "running", "succeeded")  # a job in one of these has fitted (or will fit) its bytes
FINISHED = ("succeeded", "failed", "cancelled")
COLUMNS = ("PHOTO", "MODEL", "JOB", "STATE", "PSNR", "NOTE")


def is_image(path: Path) -> bool:
    """An image file by its name: one of IMAGE_SUFFIXES, not hidden (`.DS_Store`, `._IMG_1.jpg`)."""
    return path.suffix.lower() in IMAGE_SUFFIXES and not path.name.startswith(".")


def collect(args: Sequence[str]) -> list[Path]:
    """The files PATHs name, in order, each once: a file as it is (whatever its name), a folder's image files
    (not its subfolders'), a glob's image files (`**` recurses; quote it so that the shell leaves it). A
    missing path, a glob that matches no image and a folder with none are a ClientError naming it."""
    found: list[Path] = []
    seen: set[str] = set()
    for arg in args:
        path = Path(arg)
        if path.is_dir():
            files = sorted(p for p in path.iterdir() if p.is_file() and is_image(p))
            if not files:
                raise ClientError(f"folder '{arg}' has no image files ({', '.join(IMAGE_SUFFIXES)})")
        elif path.is_file():
            files = [path]
        elif GLOB.search(arg):
            files = [Path(m) for m in sorted(glob.glob(arg, recursive=True)) if os.path.isfile(m) and is_image(Path(m))]
            if not files:
                raise ClientError(f"no image files match '{arg}'")
        else:
            raise ClientError(f"no such file or folder '{arg}'")
        for f in files:
            key = os.path.realpath(f)
            if key not in seen:
                seen.add(key)
                found.append(f)
    return found


@dataclass
class Photo:
    """One photo and what became of it: `state` is its job's (queued, running, succeeded, failed, cancelled),
    `skipped` when its bytes were fitted already, or `failed` when it was not queued (`note` says why)."""

    path: Path
    sha256: str = ""
    job: str = ""
    name: str = ""
    state: str = "pending"
    psnr: float | None = None
    note: str = ""
    follow: bool = False  # --wait: its job is followed to its end
    done: bool = False  # its outcome for this command is known (the progress bar counted it)

    def update(self, record: dict) -> None:
        """Take the job's id, name, PSNR and, unless skipped, state from its record."""
        self.job, self.name = record.get("id") or self.job, record.get("name") or self.name
        metrics = record.get("metrics") or {}
        self.psnr = metrics.get("full_psnr", metrics.get("train_psnr", self.psnr))
        state = record.get("state") or self.state
        if self.state == "skipped":
            if state in ("failed", "cancelled"):
                self.state, self.note = "failed", f"same bytes as job {self.job}, which {state}: {why(record)}"
            else:
                self.note = f"same bytes as job {self.job} ({state})"
            return
        self.state = state
        if state in ("failed", "cancelled"):
            self.note = why(record)

    @property
    def failed(self) -> bool:
        return self.state in ("failed", "cancelled")


def why(record: dict) -> str:
    return one_line(record.get("error") or record.get("state") or "unknown")


def one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def table(photos: Sequence[Photo]) -> str:
    """The summary: one row per photo (PHOTO, MODEL, JOB, STATE, PSNR when known, NOTE: why skipped or failed)."""
    rows = [COLUMNS] + [
        (
            str(p.path),
            p.name or "-",
            p.job or "-",
            p.state,
            "-" if p.psnr is None else f"{p.psnr:.2f}",
            p.note,
        )
        for p in photos
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS) - 1)]
    return "\n".join("  ".join([*(c.ljust(w) for c, w in zip(r, widths)), r[-1]]).rstrip() for r in rows) + "\n"


def summary(photos: Sequence[Photo], waits: int, waited_s: float) -> str:
    """One line: how many photos fitted, queued or running, skipped, failed; how long a full queue was waited out."""

    def n(test) -> int:
        return sum(1 for p in photos if test(p))

    active = n(lambda p: p.state in ("queued", "running"))
    pending = n(lambda p: p.state == "pending")
    parts = [f"{n(lambda p: p.state == 'succeeded')} fitted"]
    parts += [f"{active} queued or running"] if active else []
    parts += [f"{n(lambda p: p.state == 'skipped')} skipped", f"{n(lambda p: p.failed)} failed"]
    parts += [f"{pending} not sent"] if pending else []
    line = f"{len(photos)} photo{'s' if len(photos) != 1 else ''}: " + ", ".join(parts)
    if waits:
        line += f"; waited {waited_s:.0f} s for a full fit queue ({waits} time{'s' if waits != 1 else ''})"
    return line + "\n"
