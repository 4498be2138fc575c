"""Anyscale: the SDK client and its errors, the JobConfig request, the backend, and schedules."""
