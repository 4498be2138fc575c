"""The run mirrored to an experiment tracker from the run side (the job's `tracking:`, jobspec/tracking.py):
mlflow_rest.py speaks MLflow's REST API with the standard library (no `mlflow` package on the cluster or the
client: both stay light), mirror.py follows the run's live rows and sends them, never in the run's way."""
