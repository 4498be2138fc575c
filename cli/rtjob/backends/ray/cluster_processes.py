"""Finding and stopping exactly the embedded cluster's processes: those whose command line carries its temp dir as
a path component (or Ray's client server on its GCS port), and their children; never `ray stop`, which would end
every Ray process on the machine, other people's clusters included (cluster.py's safety rules)."""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable
from typing import Any


def _carries(args: list[str], temp_dir: str) -> bool:
    """Whether a command line names ``temp_dir`` as a whole path component (``--log-dir=/tmp/rtjob-ray-x/s``
    yes; ``/tmp/rtjob-ray-xy`` or a bare ``/tmp`` no)."""
    pattern = re.compile(r"(?:^|[=:,\s])" + re.escape(temp_dir) + r"(?:/|$|[:,\s])")
    return any(pattern.search(arg) for arg in args)


def _is_client_server(args: list[str], gcs_port: int) -> bool:
    """Ray's client server is daemonised and names only the GCS address (with the host's IP, not
    127.0.0.1), not the temp dir: it must be `-m ray.util.client.server` AND on the recorded GCS port."""
    module = any(a == "-m" and b == "ray.util.client.server" for a, b in zip(args, args[1:], strict=False))
    on_port = any(re.fullmatch(rf"--address=[^:\s]+:{gcs_port}", arg) for arg in args)
    return module and on_port


def _select(match: Callable[[list[str]], bool]) -> list[Any]:
    """This user's processes whose command line ``match``es, and their children."""
    import psutil

    found: dict[int, Any] = {}
    for proc in psutil.process_iter(["pid", "cmdline", "uids"]):
        try:
            if proc.info["uids"].real == os.getuid() and match(list(proc.info["cmdline"] or [])):
                found[proc.pid] = proc
        except (psutil.Error, AttributeError, TypeError):
            continue
    for proc in list(found.values()):
        with contextlib.suppress(psutil.Error):
            for child in proc.children(recursive=True):
                found[child.pid] = child
    found.pop(os.getpid(), None)
    return list(found.values())


def processes_in(temp_dir: str, gcs_port: int | None = None) -> list[Any]:
    return _select(lambda args: _carries(args, temp_dir)
                   or (gcs_port is not None and _is_client_server(args, gcs_port)))


def gcs_runs_in(temp_dir: str) -> bool:
    """Whether the head's GCS server of the cluster in ``temp_dir`` still runs: then the cluster lives, whatever
    its dashboard says."""
    return bool(_select(lambda args: bool(args) and os.path.basename(args[0]) == "gcs_server"
                        and _carries(args, temp_dir)))


def _is_gcs(proc: Any) -> bool:
    import psutil

    with contextlib.suppress(psutil.Error, IndexError):
        return os.path.basename(proc.cmdline()[0]) == "gcs_server"
    return False


def stop(procs: list[Any], grace: float = 10.0) -> int:
    """SIGTERM, the GCS last; SIGKILL what is left ``grace`` seconds after the first SIGTERM. Raylets, their
    runtime-env agents and the log monitors end by themselves within a few seconds while the GCS still answers
    them, but not once it is gone: stopped all at once they were still there after 10 s and had to be killed."""
    import psutil

    deadline = time.monotonic() + grace
    gcs = [proc for proc in procs if _is_gcs(proc)]
    alive: list[Any] = []
    for group in ([proc for proc in procs if proc not in gcs], gcs):
        for proc in group:
            with contextlib.suppress(psutil.Error):
                proc.terminate()
        for proc in procs:  # a stopped (SIGSTOP) process handles SIGTERM, or answers, only once it runs again
            with contextlib.suppress(psutil.Error):
                proc.resume()
        alive += psutil.wait_procs(group, timeout=max(0.0, deadline - time.monotonic()))[1]
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(alive, timeout=5)
    return len(procs)


def process_name(proc: Any) -> str:
    """A process's program name ("" once it is gone)."""
    import psutil

    try:
        return str(proc.name())
    except psutil.Error:
        return ""
