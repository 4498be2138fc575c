"""``rtjob results``: a run's metrics history as a table, a plot, or several runs side by side.

The training entrypoints write the history into every checkpoint (``checkpoint_*/metrics.json``: one object
per finished epoch, the whole run so far); ``rtjob pull`` also puts the newest one at ``DIR/metrics.json``.
This module reads either a local folder (a pulled run, or a run folder in local storage) or a storage
location (``s3://...``), never a cluster. matplotlib is imported only for a plot; the tables are drawn by
commands/results_tables.py.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import rtjob_contract as contract
from rtjob_contract import METRICS_FILE

from ..core.errors import BadInput
from .known import NO_HISTORY, holds_results
from .layout import (
    NothingStored,
    find_history,
    load_history,
    natural_key,
    nothing_but_rtjobs_own,
    unreadable,
)
from .location import Location
from .opening import open_store
from .raytrain import CHECKPOINT_KEY, SNAPSHOT_FILE, parse_snapshot_rows
from .retrying import reading
from .samples import Sample
from .stores import open_regular, read_capped

# (key in metrics.json, column title, format)
COLUMNS: list[tuple[str, str, str]] = [
    (contract.METRIC_EPOCH, "epoch", "{:d}"),
    (contract.METRIC_TRAIN_LOSS, "train loss", "{:.4f}"),
    (contract.METRIC_VAL_LOSS, "val loss", "{:.4f}"),
    (contract.METRIC_VAL_ACCURACY, "accuracy", "{:.4f}"),
    (contract.METRIC_SAMPLES_PER_S, "samples/s", "{:.1f}"),
    (contract.METRIC_EPOCH_TIME, "time", "{:.1f}s"),
]
PLOT_SUFFIXES = (".png", ".svg", ".pdf")


class NoHistory(BadInput):
    """A run folder with files but no metrics history (a run that reports none)."""


@dataclass
class RunHistory:
    label: str
    source: str
    rows: list[dict[str, Any]]
    samples: list[Sample] = field(default_factory=list)  # what the run generated (storage/samples.py)

    def column(self, key: str) -> list[float | None]:
        return [number(row.get(key)) for row in self.rows]

    def epochs(self) -> list[int]:
        return [int(epoch) if epoch is not None else i + 1 for i, epoch in enumerate(self.column("epoch"))]

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "source": self.source, "history": self.rows,
                "samples": [s.to_json() for s in self.samples]}


def number(value: Any) -> float | None:
    """A metric's value as a finite float (None: not a number, or NaN/inf)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _rows(read: Callable[[int], bytes], where: str) -> list[dict[str, Any]]:
    return sorted(load_history(read, where), key=lambda r: number(r.get("epoch")) or 0.0)


def _snapshot_rows(read: Callable[[int], bytes], where: str) -> list[dict[str, Any]]:
    return load_history(read, where, parse=parse_snapshot_rows)  # in the order they were reported


def _read_file(root: Path, rel: str, limit: int) -> bytes:
    try:
        with open_regular(rel, root=str(root)) as f:  # through no link inside the folder; a FIFO never is a history
            return read_capped(f, limit, str(root / rel))
    except OSError as exc:
        raise unreadable(str(root / rel), exc.strerror or str(exc)) from None


def _plain_file(path: Path) -> bool:
    """A regular file in a folder that is no link (a link to a file or a folder is never followed, wherever it
    points: it reads as absent)."""
    return not path.is_symlink() and not path.parent.is_symlink() and path.is_file()


def history_from_dir(path: Path) -> tuple[list[dict[str, Any]], str]:
    """DIR/metrics.json (a pulled run), else the newest checkpoint_*/metrics.json in DIR, else Ray Train's own
    snapshot (a plain Ray Train script's run folder)."""
    ckpts = sorted((p for p in path.glob("checkpoint_*/" + METRICS_FILE) if _plain_file(p)),
                   key=lambda p: natural_key(p.parent.name), reverse=True)
    for candidate in [path / METRICS_FILE, *ckpts]:
        if _plain_file(candidate):
            rel = candidate.relative_to(path).as_posix()
            return _rows(partial(_read_file, path, rel), str(candidate)), str(candidate)
    snapshot = path / SNAPSHOT_FILE
    if _plain_file(snapshot):
        return _snapshot_rows(partial(_read_file, path, SNAPSHOT_FILE), str(snapshot)), str(snapshot)
    if nothing_but_rtjobs_own(p.name for p in path.iterdir()):
        raise NothingStored(str(path), f"{path}: {NO_HISTORY}")
    raise NoHistory(f"{path}: {NO_HISTORY}")


@reading
def location_holds_results(location: Location, endpoint: str | None = None) -> bool:
    """``holds_results`` of what is stored at ``location`` (a folder that does not exist holds nothing)."""
    if location.scheme == "file":
        root = Path(location.path)
        return root.is_dir() and holds_results(p.relative_to(root).as_posix() for p in root.rglob("*")
                                               if not p.is_symlink() and p.is_file())
    store = open_store(location, endpoint, concurrency=4)
    try:
        return holds_results(f.rel for f in store.list_files())
    finally:
        store.close()


@reading
def history_from_location(location: Location, endpoint: str | None = None) -> tuple[list[dict[str, Any]], str]:
    """The history stored with a run: reads one small file from storage."""
    if location.scheme == "file":
        if not os.path.isdir(location.path):
            raise BadInput(f"{location.path}: no such folder")
        return history_from_dir(Path(location.path))
    store = open_store(location, endpoint, concurrency=4)
    try:
        files = store.list_files()
        item = find_history(files)
        snapshot = next((f for f in files if f.rel == SNAPSHOT_FILE), None)
        if item is None and snapshot is None:
            if nothing_but_rtjobs_own(f.rel for f in files):
                raise NothingStored(store.describe())
            raise NoHistory(f"{store.describe()}: {NO_HISTORY}")
        found = item or snapshot
        assert found is not None
        where = f"{location.uri}/{found.rel}"
        read = partial(store.read, found)
        return (_rows(read, where), where) if item is not None else (_snapshot_rows(read, where), where)
    finally:
        store.close()


def unique_labels(runs: list[RunHistory]) -> None:
    seen: dict[str, int] = {}
    for run in runs:
        count = seen.get(run.label, 0)
        seen[run.label] = count + 1
        if count:
            run.label = f"{run.label} ({count + 1})"


# ---------------------------------------------------------------------------------------------
# Columns and summaries (commands/results_tables.py draws the tables)


def columns_for(rows: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """rtjob's columns for a history that has rtjob's metrics; else the run's own: every metric that is a number
    somewhere (epoch first), then the checkpoint folder (a Ray Train snapshot's rows). An evaluation's rows (one
    per model compared, named by ``model``) get the model first and only the columns they fill."""
    if compares_models(rows):
        return [(contract.METRIC_MODEL, "model", "{}")] + [
            column for column in COLUMNS[1:] if any(number(row.get(column[0])) is not None for row in rows)]
    if any(row.get(key) is not None for row in rows for key, _, _ in COLUMNS[1:]):
        return COLUMNS
    keys = [key for key in dict.fromkeys(k for row in rows for k in row)
            if key != CHECKPOINT_KEY and any(number(row.get(key)) is not None for row in rows)]
    own = [(key, key.replace("_", " "), "{:d}" if key == contract.METRIC_EPOCH else "{:.6g}")
           for key in sorted(keys, key=lambda k: k != contract.METRIC_EPOCH)]
    if any(isinstance(row.get(CHECKPOINT_KEY), str) for row in rows):
        own.append((CHECKPOINT_KEY, CHECKPOINT_KEY, "{}"))
    return own


def compares_models(rows: list[dict[str, Any]]) -> bool:
    """An evaluation's table (rows named by model, no epochs), not a training history."""
    return bool(rows) and all(isinstance(row.get(contract.METRIC_MODEL), str) for row in rows)


def summary(run: RunHistory) -> dict[str, Any]:
    """Final and best values of one run (for the side-by-side comparison and JSON). An evaluation's best is a model
    (``best_model``), not an epoch."""
    last = run.rows[-1] if run.rows else {}
    if compares_models(run.rows):
        scored = [(v, str(row[contract.METRIC_MODEL]))
                  for v, row in zip(run.column(contract.METRIC_VAL_LOSS), run.rows, strict=True) if v is not None]
        best_val, best_model = min(scored) if scored else (None, None)
        return {"run": run.label, "models": len(run.rows), "best_val_loss": best_val, "best_model": best_model}
    val = [(v, e) for v, e in zip(run.column("val_loss"), run.epochs(), strict=False) if v is not None]
    best_val, best_epoch = min(val) if val else (None, None)
    speeds = [v for v in run.column("train_samples_per_s") if v is not None]
    times = [v for v in run.column("epoch_time_s") if v is not None]
    return {
        "run": run.label,
        "epochs": len(run.rows),
        "train_loss": number(last.get("train_loss")),
        "val_loss": number(last.get("val_loss")),
        "best_val_loss": best_val,
        "best_epoch": best_epoch,
        "accuracy": number(last.get("val_accuracy")),
        "samples_per_s": sum(speeds) / len(speeds) if speeds else None,
        "time_s": sum(times) if times else None,
    }


# ---------------------------------------------------------------------------------------------
# Plot


def check_plot_path(path: str) -> Path:
    target = Path(path)
    if target.suffix.lower() not in PLOT_SUFFIXES:
        raise BadInput(f"--plot {path}: the file name must end in {', '.join(PLOT_SUFFIXES)}")
    if not target.parent.is_dir():
        raise BadInput(f"--plot {path}: the folder {target.parent} does not exist")
    return target


def plot(runs: list[RunHistory], path: Path, images: list[tuple[str, Path]] | None = None) -> None:
    """Loss (train dashed, validation solid) and accuracy curves per epoch, one colour per run; ``images``
    ((title, PNG file): a run's sample grids) beside them in the same figure."""
    os.environ.setdefault("MPLBACKEND", "Agg")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise BadInput("--plot needs matplotlib: pip install 'rtjob[plot]'") from None
    images = images or []
    fig, axes = plt.subplots(1, 2 + len(images), figsize=(5.5 * (2 + len(images)), 4.2), squeeze=False)
    loss_ax, acc_ax = axes[0][0], axes[0][1]
    for ax, (title, image) in zip(axes[0][2:], images, strict=True):
        ax.imshow(plt.imread(str(image)))
        ax.set_title(title, fontsize="medium")
        ax.axis("off")
    colours = plt.rcParams["axes.prop_cycle"].by_key().get("color", ["C0"])
    by_epoch = not all(compares_models(run.rows) for run in runs)
    for i, run in enumerate(runs):
        colour = colours[i % len(colours)]
        if compares_models(run.rows) and by_epoch:  # an evaluation has no epochs: left out beside training runs
            continue
        if compares_models(run.rows):  # an evaluation: one point per model on a named axis, no curve
            names = [str(row[contract.METRIC_MODEL]) for row in run.rows]
            for ax, key in ((loss_ax, contract.METRIC_VAL_LOSS), (acc_ax, contract.METRIC_VAL_ACCURACY)):
                xs, ys = _points(names, run.column(key))
                if ys:
                    ax.plot(xs, ys, "o", color=colour, label=f"{run.label} val")
            continue
        epochs = run.epochs()
        for key, style, what in (("train_loss", "--", "train"), ("val_loss", "-", "val")):
            xs, ys = _points(epochs, run.column(key))
            if ys:
                loss_ax.plot(xs, ys, style, marker="o", color=colour, label=f"{run.label} {what}")
        for key, style, what in (("train_accuracy", "--", "train"), ("val_accuracy", "-", "val")):
            xs, ys = _points(epochs, run.column(key))
            if ys:
                acc_ax.plot(xs, ys, style, marker="o", color=colour, label=f"{run.label} {what}")
    for ax, title in ((loss_ax, "loss"), (acc_ax, "accuracy")):
        ax.set_title(title)
        ax.set_xlabel("epoch" if by_epoch else "model")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="small")
        if by_epoch:
            ax.xaxis.get_major_locator().set_params(integer=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _points(epochs: list[Any], values: list[float | None]) -> tuple[list[Any], list[float]]:
    pairs = [(e, v) for e, v in zip(epochs, values, strict=False) if v is not None]
    return [e for e, _ in pairs], [v for _, v in pairs]
