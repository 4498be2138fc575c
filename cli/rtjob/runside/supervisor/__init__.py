"""A run's (or a pipeline's) supervisor on the cluster, its process: ``python -m rtjob.runside.supervisor RUN_ID
BACKEND`` (__main__.py), a Ray job of its own (``<run id>-supervisor``) that the submitting client starts when the run
allows retries, or that carries a pipeline's steps. Its loop (loop.py: a run, and a pipeline as a sequence of runs)
decides; the backend's primitives act (``Backend.cluster_jobs``, reached through the registry: BACKEND is the
backend's declared ``supervisor_backend``; on Ray, backends/ray/in_cluster.py); what it writes goes through the
run's folder, each write the lifecycle kernel's transition of the same name: run_folder.py (a run: beat, retrying,
gave_up, its own log) and pipeline_folder.py (a pipeline: submitted, beat, ended, gave_up; each step's a run's).

Imports at module level, here and in every module of this package: the stdlib, rtjob_contract and the lifecycle
kernel only (the cluster runs it)."""
