"""What to run, decided without touching a cluster: project discovery and settings, YAML with file:line,
the job schema, overrides, the resolved shape (nodes × workers), the run's environment, prices."""
