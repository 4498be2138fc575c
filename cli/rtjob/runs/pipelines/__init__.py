"""Pipelines as a client sees them: every step planned up front (pipeline.py), the step loop and a pipeline's
`wait` (steps.py), and the supervisor that carries the steps on the cluster (supervised.py)."""
