"""What runs beside a run on the cluster: the companion and its pieces.

Importable on the cluster: every module here imports at module level only the stdlib, ``rtjob_contract``,
``requests`` and rtjob modules of the same rule (tests/unit/test_cluster_side_imports.py checks each)."""
