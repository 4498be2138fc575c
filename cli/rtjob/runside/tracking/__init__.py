"""The run mirrored to experiment trackers from the run side (the job's `tracking:`, jobspec/tracking.py):
mirrors.py is the companion's one stage (RTJOB_TRACKING read once, each tracker fed and ended on its own), feeds.py
reads the run's rows as they are written (steps, system rows, the epoch history in storage), mirror.py sends them
to MLflow over its REST API (trackers/mlflow_rest.py, stdlib: no `mlflow` package on the cluster or the client),
wandb_mirror.py to W&B with the job's environment's own `wandb`, in a thread of its own; never in the run's way."""
