"""Ray settings for the embedded cluster: what a local training run does not need, turned off or slowed down.

On a 2-core machine every Ray daemon's periodic work competes with the training workers. These are given to
every `ray start` rtjob runs (and so to Ray's daemons, the job's driver and its workers, which inherit them);
a value already in the user's environment wins, so any of them can be turned back on. What rtjob needs stays:
the Jobs API, the State API (nodes, the log stream, the pending tasks and actors that stuck.py reads: task
events stay on), fault tolerance (health checks, job and Train retries) and the log monitors.
Names checked against Ray 2.60 (the C++ ones: RAY_CONFIG entries in src/ray/common/ray_config_def.h, read as
RAY_<name>, their strings are in the raylet binary; the dashboard's in dashboard/consts.py and
modules/reporter/reporter_consts.py; Ray Train's in train/v2/_internal/constants.py).
"""

from __future__ import annotations

RAY_SETTINGS: dict[str, str] = {
    # Prometheus metrics in GCS, raylets and every worker (recorded, aggregated, exported to each node's
    # metrics agent): only the dashboard's Grafana panels read them, and rtjob reads none.
    "RAY_enable_metrics_collection": "0",
    # Per-handler timing of every event-loop callback in GCS, raylets and workers: it feeds only
    # debug_state*.txt and those metrics.
    "RAY_event_stats": "0",
    # The dashboard agent's sweep of every worker with psutil (CPU, memory, disk, GPUs) on each node, by
    # default every 5 s: it feeds the dashboard UI's node and worker graphs, which rtjob does not use.
    "REPORTER_UPDATE_INTERVAL_MS": "60000",
    # The dashboard head's own metrics record (default every 5 s), for the same Grafana panels.
    "METRICS_RECORD_INTERVAL_S": "60",
    # Ray Train's controller and per-worker metrics callbacks (the workers' run inside the training loop):
    # with metrics collection off they would record into nothing.
    "RAY_TRAIN_METRICS_ENABLED": "0",
    # Ray Train's preemption watcher, one more actor process per run polling Ray Core's drain state every
    # 5 s: nodes are drained by a cloud autoscaler reclaiming spot machines, never on this machine.
    # Failed workers are still detected by Train's health checks and retried.
    "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0",
}
