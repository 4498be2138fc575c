"""The client's part in a run's lifecycle: submit it (submission.py), then its follow loop, one module (follow.py;
beside it logtail.py prints the log, patience.py waits out passing faults, stuck_watch.py stops a run that can never
fit, diagnosis.py names what a failed log says), a retry's notice (retry_notice.py), stop it (stopping.py), archive
its end (archive.py), and see who carries it on the cluster (supervisor_state.py). Each record write is one of
core/lifecycle's named transitions, through runs/memory.write."""
