"""Tell people how a run ended: one message per outcome to each target of the run's `notify:`.

Runs where the outcome is seen (the run's companion, the supervisor), so every module here imports at module
level only the standard library, ``rtjob_contract``, ``rtjob.core`` and ``requests``
(tests/unit/test_cluster_side_imports.py), and none imports runs/lifecycle (its retry_notice imports this).

* config.py: the client puts the job's notify config into its environment (``RTJOB_NOTIFY``: outcomes and
  targets, each target naming the variable that holds its URL) and forwards each URL under that variable as a
  secret; ``config_from_env`` reads both back from an environment.
* message.py: what a message says (``Message``: its text and JSON body) and the error line a log shows.
* delivery.py: ``send`` posts one message to every target, only for an outcome the config lists and only when
  ``claim(outcome)`` says this process is the first (one sender per outcome); what the targets answered goes to
  ``settle`` after the tries, never before. A webhook gets the message's fields as JSON, Slack ``{"text": ...}``,
  an apprise URL apprise's own request, a ``github`` target a repository_dispatch. At most ``TRIES`` tries in
  ``DEADLINE_S`` per target; a failure is one line naming the target by its type and variable, never its URL.
* markers.py: the markers in the run's folder: ``claim_in`` (``rtjob-notifying-<outcome>`` created if absent),
  ``settle_in`` (``rtjob-notified-`` or ``rtjob-undelivered-<outcome>``), ``notices_in`` reading them back, and
  ``held_for_resend``, the claim marker as the lock of `rtjob notify`'s resend (runs/notices.py).
"""

from .config import NotifyConfig, Target, config_from_env, run_end_notifies
from .delivery import DEADLINE_S, EXTRA_HINT, REQUEST_TIMEOUT_S, RETRY_DELAY_S, TRIES, Settle, deliver, send
from .markers import RESEND_STALE_S, claim_in, held_for_resend, notice_in, notices_in, settle_in
from .message import Message, error_line_of, human_duration, masked, message_from

__all__ = ["DEADLINE_S", "EXTRA_HINT", "REQUEST_TIMEOUT_S", "RESEND_STALE_S", "RETRY_DELAY_S", "TRIES", "Message",
           "NotifyConfig", "Settle", "Target", "claim_in", "config_from_env", "deliver", "error_line_of",
           "held_for_resend", "human_duration", "masked", "message_from", "notice_in", "notices_in", "run_end_notifies",
           "send", "settle_in"]
