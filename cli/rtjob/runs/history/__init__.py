"""A team's past runs: `list`/`runs`/`show` queries (listing.py), `rerun` (rerun.py), and where a run's results are
(sources.py)."""
