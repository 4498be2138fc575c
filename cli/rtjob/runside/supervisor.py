"""``python -m rtjob.runside.supervisor RUN_ID BACKEND``: a run's (or, with RTJOB_PIPELINE_STEPS, a pipeline
run's: pipeline_side.py) supervisor, a Ray job of its own (``<run id>-supervisor``)
that the submitting client starts when the run allows retries. It carries the run's retries with no rtjob client
alive (the backend's rule: backends/ray/supervisor.py), and keeps its state in the run's record in storage: who
carries the run (``carried_by: supervisor``) and when it was last seen (``last_seen``, every ~30 s and at each
change). The run's stop marker (``rtjob stop`` writes it first) is read before and after each submit. Once done, its
own log is archived beside the run's (``logs/<supervisor id>.log``, listed in the record).

Its environment is the run's (the record's folder RTJOB_RUN_URI and its credentials) plus the dashboard's address
(RTJOB_DASHBOARD_ADDRESS). Imports at module level: the stdlib, rtjob_contract and requests only."""

from __future__ import annotations

import os
import sys

import rtjob_contract as contract

from .carrier_side import RunSide, say


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        say("usage: python -m rtjob.runside.supervisor RUN_ID BACKEND")
        sys.exit(2)
    run_id, backend = args
    from ..backends import backend_class
    from ..backends.base import CarryHooks

    run_uri = os.environ.get(contract.ENV_RUN_URI) or None
    try:
        if os.environ.get(contract.ENV_PIPELINE_STEPS):  # a pipeline's supervisor: its steps in order
            from .pipeline_side import PipelineSide, take_run_id

            run_uri = take_run_id(os.environ, run_id)
            code = backend_class(backend).carry_pipeline(run_id, PipelineSide(run_id, run_uri).hooks())
        else:
            side = RunSide(run_id, run_uri)
            code = backend_class(backend).carry(run_id, CarryHooks(
                stop_requested=side.stop_requested, beat=side.beat, say=say, gave_up=side.gave_up,
                retried=side.retried))
    except Exception as exc:  # noqa: BLE001 - one line in its log, not a traceback
        say(f"stopped carrying {run_id}: {getattr(exc, 'message', None) or f'{type(exc).__name__}: {exc}'}")
        code = 1
    RunSide(run_id, run_uri).archive_own_log()  # its own log beside the run's, once it is done
    sys.exit(code)


if __name__ == "__main__":
    main()
