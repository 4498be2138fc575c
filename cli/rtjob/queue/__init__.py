"""A team's queue on a shared Ray cluster, with no server: clients write intents, one keeper per queue folds them.

The queue lives in its storage (a folder or s3://bucket/prefix: the ``storage`` of ``[queues.NAME]``, by default
the project's) under ``queues/<NAME>/`` (format.py):

- ``intents/<kind>-<at ns>-<run id or random>.json``: one object per intent, written by clients only with
  ``If-None-Match: *`` (never overwritten, so nothing is lost or doubled): enqueue (the exact planned Jobs API
  request, the run's declared shape, user, job, priority, first enqueue time), cancel, priority, hold, release.
- ``queue-state.json``: the queue as the keeper folded it (entries queued or admitted, their order, skips, reasons, the
  intents folded), rewritten only by the keeper with ``If-Match`` (a second keeper's write loses).
- ``lease.json``: the keeper's lease (holder, heartbeat, time to live); a replaced keeper takes over once it
  expires, and the next command that carries (submit, wait; a queued pipeline's supervisor) starts one when none is
  alive (client.py).
- ``code/<package>.zip``: a queued run's uploaded packages (Ray's own zip and name), so the keeper can put them
  back in the cluster's GCS at admission after Ray collected them (Ray deletes an unreferenced package after ~10
  minutes).

Modules: format.py (names and JSON, stdlib only), admission.py (the pure admission rule), fold.py (intents into
the state), lease.py, client.py (what commands call), keeper.py (the loop on the cluster).
What the cluster runs (keeper.py and what it imports) imports at module level only the stdlib, rtjob_contract and
rtjob's cluster-safe modules (storage objects, core); ``ray`` inside functions."""
