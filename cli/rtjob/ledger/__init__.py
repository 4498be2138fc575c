"""The local run ledger: every run this machine submitted or saw, in SQLite under $RTJOB_HOME (ledger.py)."""
