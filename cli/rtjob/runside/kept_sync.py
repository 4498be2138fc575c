"""``python -m rtjob.runside.kept_sync RUN_ID``: the sync job a Ray cluster runs on the node that keeps a run's
outputs (backends/ray/kept_jobs.py; `rtjob sync` from a machine that is not that node): this node's kept folders of
the run stored (storage/kept.py), one ``rtjob sync:`` line each, which the client reads back from the job's log."""

from __future__ import annotations

import os


def main(argv: list[str] | None = None) -> int:
    """Store this node's kept folders of the run (the sync job a cluster runs
    on that node); one line each, exit 0 when all are stored (or none is kept here), 3 while storage refuses."""
    import sys

    from ..core.errors import RtjobError
    from ..storage import node_dirs
    from ..storage.kept import store_kept

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m rtjob.runside.kept_sync RUN_ID", file=sys.stderr)
        return 2
    run_id = args[0]
    from .secret_env import unseal

    unseal(os.environ)  # the attempt's forwarded credentials travel sealed (its py_modules)
    folders = node_dirs.kept_folders(run_id)
    if not folders:
        print(f"rtjob sync: nothing of run {run_id} is kept on {os.uname().nodename}", flush=True)
        return 0
    for n, (folder, marker) in enumerate(folders, 1):
        try:
            stored = store_kept(folder, marker, lambda line: print(f"rtjob sync: {line}", flush=True),
                                last=n == len(folders))
        except RtjobError as exc:
            print(f"rtjob sync: {folder} not stored: {exc.message}", flush=True)
            return exc.exit_code
        print(f"rtjob sync: stored {stored.files} file(s)" + (" and the log" if stored.log else "")
              + f" from {os.uname().nodename}:{folder}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
