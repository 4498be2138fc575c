"""``python -m rtjob.runside.supervisor RUN_ID BACKEND``: the supervisor's process. Its environment is the run's (the
record's folder RTJOB_RUN_URI; its credentials unsealed) plus the dashboard's address (RTJOB_DASHBOARD_ADDRESS); with
RTJOB_PIPELINE_STEPS it carries a pipeline run. It runs the supervisor's loop (loop.py) on BACKEND's primitives
(``Backend.cluster_jobs``, reached through the registry) writing through the run's folder, then archives its own log
beside the run's (``logs/<supervisor id>.log``, listed in the record)."""

from __future__ import annotations

import os
import sys

import rtjob_contract as contract

from ...core.errors import one_line
from .loop import Supervisor
from .run_folder import RunFolder, say


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        say("usage: python -m rtjob.runside.supervisor RUN_ID BACKEND")
        sys.exit(2)
    run_id, backend = args
    from ...backends import backend_class
    from ..secret_env import unseal

    unseal(os.environ)  # the run's forwarded credentials and notify URLs travel sealed (its py_modules), not env_vars

    run_uri = os.environ.get(contract.ENV_RUN_URI) or None
    try:
        if os.environ.get(contract.ENV_PIPELINE_STEPS):  # a pipeline's supervisor: its steps in order
            from .pipeline_folder import PipelineFolder, take_run_id

            run_uri = take_run_id(os.environ, run_id)
            supervisor = Supervisor(backend_class(backend).cluster_jobs())
            code = supervisor.carry_pipeline(run_id, PipelineFolder(run_id, run_uri).supervised_pipeline())
        else:
            supervisor = Supervisor(backend_class(backend).cluster_jobs())
            code = supervisor.carry_run(run_id, RunFolder(run_id, run_uri).supervised())
    except Exception as exc:  # noqa: BLE001 - one line in its log, not a traceback
        say(f"stopped carrying {run_id}: {one_line(exc)}")
        code = 1
    RunFolder(run_id, run_uri).archive_own_log()  # its own log beside the run's, once it is done
    sys.exit(code)


if __name__ == "__main__":
    main()
