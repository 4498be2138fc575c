"""A run's lifecycle: its states, its writers, the legal transitions (frozen dataclasses, values a writer hands to
``write``), whose end stands when two writers disagree, and each attempt's timeline. Every writer of a run's
record goes through here; docs/ARCHITECTURE.md has the same as one table (states × writers), generated from
``TABLE`` (``table_markdown``).

A record has several writers at once (the submitting client, a client that carries it, the run's companion, its
supervisor, a pipeline's supervisor, the client's archive), each writing with If-Match (storage/records.py): each
transition is applied to the record as stored (``apply``: the one place a transition changes a record), so it is
written over the latest version, and each is idempotent (applied twice, the record is the same), so a writer that
crashed after the record and before the index entry or the notification calls ``write`` again and repairs. An
illegal transition raises ``IllegalTransition`` (an internal error: a writer's bug, never the run's end).

Modules: rules.py (writers, precedence, the table, ``apply``), transitions.py (a run's start, the run side's
transitions), ends.py (the ends other writers record), queued.py (a queued run's), timelines.py (per attempt), kernel.py (``write``,
``blank``, ``merge``, the readers' verdicts), table.py (the generated table). Stdlib, rtjob.core and
rtjob_contract only: the cluster imports it (the companion and the supervisor).
"""

from __future__ import annotations

from .ends import Archive, Archived, Ended, GaveUp, PipelineEnded, Progressed
from .kernel import IndexPort, RecordPort, RunPorts, blank, forgotten, merge, write
from .queued import ADMITTED, Admitted, Cancelled, Queued, was_admitted
from .rules import (
    END_FIELDS,
    ENDS,
    LATEST_LOG,
    PRECEDENCE,
    TABLE,
    IllegalTransition,
    Rule,
    Writer,
    apply,
    ended_by_run_side,
    rank,
)
from .table import table_markdown
from .timelines import EarlierAttempt, earlier, last_attempt
from .transitions import (
    AttemptEnded,
    Beat,
    KeptEnd,
    Outputs,
    Retrying,
    Saved,
    Stages,
    Started,
    Submitted,
    Tracked,
)

__all__ = ["ADMITTED", "END_FIELDS", "ENDS", "LATEST_LOG", "PRECEDENCE", "TABLE", "Admitted", "Archive", "Archived", "AttemptEnded", "Beat",
           "Cancelled", "EarlierAttempt", "Ended", "GaveUp", "IllegalTransition", "IndexPort", "KeptEnd", "Outputs", "PipelineEnded",
           "Progressed", "Queued", "RecordPort", "Retrying", "Rule", "RunPorts", "Saved", "Stages", "Started", "Submitted", "Tracked",
           "Writer", "apply", "blank", "earlier", "ended_by_run_side", "forgotten", "last_attempt", "merge", "rank",
           "table_markdown", "was_admitted", "write"]
