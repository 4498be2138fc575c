"""What a run generated to look at or listen to (``<run>/samples/``: image grids per epoch, decoded audio), for
``rtjob results``: pulled next to where ``rtjob pull`` puts the run, through pull itself (every safety rule: keys
checked before a byte is written, partial files renamed when whole, unchanged files skipped), then listed.

A run folder in local storage is read where it is: nothing is copied, and no symbolic link inside it (to a file or a
folder, wherever it points) is followed: each is skipped and named in one line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from rtjob_contract import SAMPLES_DIR

from .layout import CheckpointChoice, NothingStored, natural_key
from .location import Location
from .stores import is_bookkeeping

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
_EPOCH = re.compile(r"^epoch_(\d+)\.")


@dataclass
class Sample:
    path: Path  # a local file
    epoch: int | None  # from its name (samples/epoch_NNNN.png), None for others

    @property
    def is_image(self) -> bool:
        return self.path.suffix.lower() in IMAGE_SUFFIXES

    def to_json(self) -> dict[str, object]:
        return {"path": str(self.path), "epoch": self.epoch, "image": self.is_image}


def _listed(paths: list[Path], folder: Path) -> list[Sample]:
    files = sorted((p for p in paths if not any(is_bookkeeping(part) for part in p.relative_to(folder).parts)),
                   key=lambda p: natural_key(str(p.relative_to(folder))))
    out = []
    for path in files:
        match = _EPOCH.match(path.name)
        out.append(Sample(path, int(match.group(1)) if match else None))
    return out


def _pulled(folder: Path) -> list[Sample]:
    """The samples pull wrote into ``folder`` (pull writes no link: one found there is not taken either)."""
    return _listed([p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()], folder)


def _in_place(location: Location) -> tuple[list[Sample], list[str]]:
    """A local run folder's samples, listed as pull lists a folder: every link below the run's folder refused."""
    from .stores import LocalStore

    store = LocalStore(location)
    below = f"{SAMPLES_DIR}/"
    files = [Path(f.key) for f in store.list_files() if f.rel.startswith(below)]
    skipped = [f"sample {key} skipped: {reason} (not followed)" for key, reason in store.refused
               if key.startswith(below)]
    return _listed(files, Path(location.path) / SAMPLES_DIR), skipped


def chosen(samples: list[Sample], which: str) -> list[Sample]:
    """``latest``: the newest epoch's files and every file not named by an epoch; ``all``: every file."""
    if which == "all":
        return samples
    epochs = [s.epoch for s in samples if s.epoch is not None]
    newest = max(epochs) if epochs else None
    return [s for s in samples if s.epoch is None or s.epoch == newest]


def fetch(location: Location, endpoint: str | None, dest: Path) -> tuple[list[Sample], list[str]]:
    """The run's samples as local files (pulled into ``dest``/samples for a storage URI; [] if it has none), and a
    line for each stored file that was refused or failed (the others are shown all the same)."""
    if location.scheme == "file":
        return _in_place(location)
    from .location import parse_location
    from .pull import pull

    target = dest / SAMPLES_DIR
    try:
        report = pull(parse_location(f"{location.uri}/{SAMPLES_DIR}"), target, CheckpointChoice("all"),
                      endpoint=endpoint, concurrency=8, run_folder=False)
    except NothingStored:
        return [], []
    problems = [f"sample {item['key']} refused: {item['reason']}" for item in report.refused]
    problems += [f"sample {item['key']} failed: {item['error']}" for item in report.failed]
    return _pulled(target), problems
