"""The local run ledger: every run this machine submitted or saw, in SQLite under $RTJOB_HOME (ledger.py)."""

from .ledger import Ledger, ledger_path

__all__ = ["Ledger", "ledger_path"]
