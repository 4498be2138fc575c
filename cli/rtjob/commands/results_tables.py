"""How ``rtjob results`` reads on a terminal: a table per run (its history) and, for several runs, their epochs
side by side and a summary row each. storage/results.py reads the histories; this draws them (rich)."""

from __future__ import annotations

from typing import Any

from ..storage import results as res


def tables(runs: list[res.RunHistory]) -> list[Any]:
    """What `rtjob results` prints, as rich renderables and lines (printed through the redactor). An evaluation
    (rows per model, no epochs) always gets its own table."""
    histories = [run for run in runs if not res.compares_models(run.rows)]
    out: list[Any] = []
    for run in runs:
        if run not in histories or len(histories) == 1:
            out += [*_run_table(run), ""]
    if len(histories) > 1:
        out += _comparison(histories)
    return out[:-1] if out and out[-1] == "" else out


def _run_table(run: res.RunHistory) -> list[Any]:
    from rich.table import Table

    # The run and its source on a line of their own: as the table's title, rich wrapped a long path
    # to the width of the table.
    out: list[Any] = [f"{run.label}  ({run.source})"]
    table = Table(box=None, header_style="bold")
    columns = [(key, title, fmt) for key, title, fmt in res.columns_for(run.rows)  # only columns with a value
               if any(_cell(row.get(key), fmt) != "-" for row in run.rows)]
    for _, title, fmt in columns:
        table.add_column(title.upper(), justify="left" if fmt == "{}" else "right")
    for row in run.rows:
        table.add_row(*(_cell(row.get(key), fmt) for key, _, fmt in columns))
    out.append(table)
    best = res.summary(run)
    if best["best_val_loss"] is not None and "best_model" in best:
        out.append(f"lowest val loss {best['best_val_loss']:.4f}: {best['best_model']}")
    elif best["best_val_loss"] is not None:
        out.append(f"best val loss {best['best_val_loss']:.4f} at epoch {best['best_epoch']}")
    return out


def _comparison(runs: list[res.RunHistory]) -> list[Any]:
    from rich.table import Table

    out: list[Any] = []
    # Several runs: per-epoch validation loss and accuracy side by side, then one summary row per run.
    table = Table(title="per epoch: val loss / accuracy", box=None, header_style="bold", title_justify="left")
    table.add_column("EPOCH", justify="right")
    for run in runs:
        table.add_column(run.label, justify="right", overflow="fold")
    epochs = sorted({e for run in runs for e in run.epochs()})
    rows = []
    for epoch in epochs:
        cells = [str(epoch)]
        for run in runs:
            hit: dict[str, Any] | None = next(
                (r for r, e in zip(run.rows, run.epochs(), strict=False) if e == epoch), None)
            cells.append(f"{_cell(hit.get('val_loss'), '{:.4f}')} / {_cell(hit.get('val_accuracy'), '{:.4f}')}"
                         if hit else "-")
        rows.append(cells)
    if any(cell not in ("-", "- / -") for cells in rows for cell in cells[1:]):  # else no run validated: no table
        for cells in rows:
            table.add_row(*cells)
        out += [table, ""]
    summaries = []
    for run in runs:
        s = res.summary(run)
        best = _cell(s["best_val_loss"], "{:.4f}")
        summaries.append([s["run"], str(s["epochs"]), _cell(s["train_loss"], "{:.4f}"), _cell(s["val_loss"], "{:.4f}"),
                     best if best == "-" else f"{best} ({s['best_epoch'] or '-'})", _cell(s["accuracy"], "{:.4f}"),
                     _cell(s["samples_per_s"], "{:.1f}"), _cell(s["time_s"], "{:.1f}s")])
    titles = ("RUN", "EPOCHS", "TRAIN LOSS", "VAL LOSS", "BEST VAL LOSS (EPOCH)", "ACCURACY", "SAMPLES/S", "TIME")
    shown = [i for i in range(len(titles)) if i < 2 or any(row[i] != "-" for row in summaries)]  # columns with a value
    table = Table(title="summary", box=None, header_style="bold", title_justify="left")
    for i in shown:
        table.add_column(titles[i], justify="left" if i == 0 else "right", overflow="fold")
    for row in summaries:
        table.add_row(*(row[i] for i in shown))
    out.append(table)
    return out


def _cell(value: Any, fmt: str) -> str:
    if fmt == "{}":  # a name (a checkpoint folder), not a number
        return str(value) if isinstance(value, str) else "-"
    number = res.number(value)
    if number is None:
        return "-"
    return fmt.format(int(number)) if fmt == "{:d}" else fmt.format(number)
