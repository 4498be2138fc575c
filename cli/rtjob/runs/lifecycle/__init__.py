"""The client's part in a run's lifecycle: submit and follow it to its end (submission.py, follow.py, patience.py,
stuck_watch.py), a retry's notice (retry_notice.py), stop it (stopping.py), archive its end (archive.py), and see who
carries it on the cluster (supervisor_state.py). Each record write is one of core/lifecycle's named transitions."""
