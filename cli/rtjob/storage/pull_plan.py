"""What ``rtjob pull`` takes from a location: its files listed, unsafe names refused (keys.py), the checkpoint(s)
chosen (latest, all, or the best by a metric) and the metrics history found."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from rtjob_contract import METRICS_FILE, RUN_RECORD_FILE

from ..core.errors import BadInput
from .keys import case_collisions, fold, printable, unsafe_reason
from .known import NO_HISTORY, NothingKnown, is_run_folder
from .layout import (
    CheckpointChoice,
    NothingStored,
    checkpoint_of,
    find_history,
    load_history,
    natural_key,
    nothing_but_rtjobs_own,
    read_histories,
)
from .raytrain import CHECKPOINT_KEY, SNAPSHOT_FILE, parse_snapshot_rows
from .stores import RemoteFile, Store


@dataclass(frozen=True)
class PullItem:
    file: RemoteFile
    rel: str  # where it lands under the destination


@dataclass
class PullPlan:
    store: Store
    items: list[PullItem]
    checkpoints: list[str]
    all_checkpoints: list[str]
    history_rel: str | None
    refused: list[tuple[str, str]]
    markers: int
    choice: CheckpointChoice
    best: dict[str, Any] | None = None
    special: list[tuple[str, str]] = field(default_factory=list)


def plan_pull(store: Store, choice: CheckpointChoice, run_folder: bool = True) -> PullPlan:
    """List the location and decide what to pull (pure but for the listing and, for best, metrics reads).
    ``run_folder``: NothingKnown when the files hold nothing rtjob reads (as `rtjob results` of it)."""
    files = store.list_files()
    refused: list[tuple[str, str]] = list(store.refused)
    if nothing_but_rtjobs_own(f.rel for f in files) and not refused and not store.special:
        raise NothingStored(store.describe())
    if run_folder and not is_run_folder(f.rel for f in files):
        raise NothingKnown(f"{store.describe()}: nothing rtjob knows to pull: no checkpoint_* folders, "
                           f"{NO_HISTORY}, and no {RUN_RECORD_FILE} (not a run's folder)")
    good: list[RemoteFile] = []
    markers = 0
    for item in files:
        if item.size == 0 and (item.rel == "" or item.rel.endswith("/")):
            markers += 1  # a zero-byte "folder" key: nothing to write
            continue
        reason = unsafe_reason(item.rel)
        if reason:
            refused.append((item.key, reason))
        else:
            good.append(item)
    # A name that is both a file and a folder ("a" and "a/b", or "A/b" on macOS) cannot be written as both.
    folders = {fold(item.rel.rsplit("/", i)[0]) for item in good for i in range(1, item.rel.count("/") + 1)}
    conflicts = {item.rel for item in good if fold(item.rel) in folders}
    for item in good:
        if item.rel in conflicts:
            refused.append((item.key, "both a file and a folder"))
    good = [item for item in good if item.rel not in conflicts]

    by_ckpt: dict[str, list[RemoteFile]] = {}
    run_files: list[RemoteFile] = []
    for item in good:
        ckpt = checkpoint_of(item.rel)
        if ckpt:
            by_ckpt.setdefault(ckpt, []).append(item)
        else:
            run_files.append(item)
    names = sorted(by_ckpt, key=natural_key)
    snapshot = next((item for item in run_files if item.rel == SNAPSHOT_FILE), None)
    best: dict[str, Any] | None = None
    if choice.kind == "all":
        chosen = names
    elif choice.kind == "latest":
        chosen = names[-1:]
    elif choice.kind == "name":
        if choice.name not in by_ckpt:
            shown = ", ".join(names[-5:]) if names else "none"
            raise BadInput(f"--checkpoint {choice.name}: no such checkpoint at {store.describe()} "
                           f"(there: {shown}{' ...' if len(names) > 5 else ''})")
        chosen = [choice.name]
    else:
        if not names:
            raise BadInput(f"--checkpoint {choice.text()}: no checkpoint_* folders at {store.describe()}")
        chosen, best = _best(store, by_ckpt, names, choice, snapshot)
    items = [PullItem(item, item.rel) for item in run_files]
    for name in chosen:
        items += [PullItem(item, item.rel) for item in by_ckpt[name]]
    history = find_history(good)
    history_rel: str | None = None
    if history is not None:
        history_rel = METRICS_FILE
        if history.rel != METRICS_FILE:  # the newest checkpoint's history, also as DIR/metrics.json
            items.append(PullItem(history, METRICS_FILE))
    elif snapshot is not None:  # a plain Ray Train run: its own record is the history (pulled as a run file)
        history_rel = SNAPSHOT_FILE
    collisions = case_collisions([item.rel for item in items])
    refused += [(item.file.key, f"same name as {printable(collisions[item.rel])!r} on a case-insensitive "
                                "filesystem (one would overwrite the other)")
                for item in items if item.rel in collisions]
    items = [item for item in items if item.rel not in collisions]
    return PullPlan(store, items, chosen, names, history_rel, refused, markers, choice, best, list(store.special))


def _best(store: Store, by_ckpt: dict[str, list[RemoteFile]], names: list[str], choice: CheckpointChoice,
          snapshot: RemoteFile | None) -> tuple[list[str], dict[str, Any]]:
    """The checkpoint with the best value of the metric: from each checkpoint's own metrics.json (rtjob's
    layout), else from Ray Train's snapshot (a plain Ray Train script). Ties go to the later checkpoint."""
    wanted = {f"{name}/{METRICS_FILE}": name for name in names}
    metric_files = [item for name in names for item in by_ckpt[name] if item.rel in wanted]
    reported: list[tuple[str, dict[str, Any]]]  # (checkpoint, its metrics), oldest first
    if metric_files or snapshot is None:
        values = read_histories(store, metric_files, numeric=[choice.metric])
        if not values:
            raise BadInput(f"--checkpoint {choice.text()}: no checkpoint has a {METRICS_FILE} to choose by")
        # The checkpoint's own epoch: the last row of its history.
        reported = sorted(((wanted[rel], rows[-1] if rows else {}) for rel, rows in values.items()),
                          key=lambda pair: names.index(pair[0]))
    else:
        where = f"{store.location.uri}/{snapshot.rel}"
        rows = load_history(partial(store.read, snapshot), where, [choice.metric], parse=parse_snapshot_rows)
        reported = [(row[CHECKPOINT_KEY], row) for row in rows if row[CHECKPOINT_KEY] in by_ckpt]
        if not reported:
            raise BadInput(f"--checkpoint {choice.text()}: none of the checkpoints in {where} is stored at "
                           f"{store.describe()}")
    scores: list[tuple[float, int, str]] = []
    seen: set[str] = set()
    for order, (name, metrics) in enumerate(reported):
        seen.update(metrics)
        value = metrics.get(choice.metric)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            scores.append((float(value), order, name))
    if not scores:
        known = ", ".join(sorted(k for k in seen if k not in ("epoch", CHECKPOINT_KEY))) or "none"
        raise BadInput(f"--checkpoint {choice.text()}: no checkpoint reports {choice.metric!r} (metrics: {known})")
    if choice.mode == "min":
        value, _, name = min(scores, key=lambda s: (s[0], -s[1]))
    else:
        value, _, name = max(scores, key=lambda s: (s[0], s[1]))
    return [name], {"metric": choice.metric, "mode": choice.mode, "value": value, "checkpoint": name}
