"""What runs beside a run on the cluster: the companion (companion.py) that runs the entrypoint and writes the
run's story to its storage from where the run is, and its pieces (the child process and its time limit, the log
as parts, the script's folder synced, the record's start, heartbeat and end).

Every module here imports at module level only the stdlib, rtjob_contract, ``requests`` and rtjob modules that
obey the same rule (tests/unit/test_cluster_side_imports.py): a stock Ray image has nothing else."""
