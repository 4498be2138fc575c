"""The embedded cluster's Jobs API and processes as a test observes them, never through rtjob; and clients
(`rtjob status`) looking at a run at the same moment."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests

from .cli import popen_rtjob


class JobsAPI:
    """The embedded cluster's Jobs API read directly (its recorded address and token), never through rtjob."""

    def __init__(self, env: dict[str, str]) -> None:
        local = Path(env["RTJOB_HOME"]) / "local"
        self.address = json.loads((local / "cluster.json").read_text())["address"].rstrip("/")
        self.token = (local / "auth_token").read_text().strip()

    def get(self, path: str, auth: bool = True) -> requests.Response:
        headers = {"Authorization": f"Bearer {self.token}"} if auth else {}
        return requests.get(f"{self.address}{path}", headers=headers, timeout=10)

    def put_package(self, name: str, data: bytes) -> requests.Response:
        """Upload a runtime-env package (a zip) as Ray's SDK does: PUT /api/packages/gcs/<name>."""
        return requests.put(f"{self.address}/api/packages/gcs/{name}", data=data,
                            headers={"Authorization": f"Bearer {self.token}"}, timeout=30)

    def submit(self, run_id: str, entrypoint: str) -> None:
        """A plain Ray job of 0 CPUs (no rtjob in it)."""
        resp = requests.post(f"{self.address}/api/jobs/", json={"entrypoint": entrypoint, "submission_id": run_id},
                             headers={"Authorization": f"Bearer {self.token}"}, timeout=30)
        resp.raise_for_status()

    def job(self, run_id: str) -> dict[str, Any] | None:
        resp = self.get(f"/api/jobs/{run_id}")
        if resp.status_code == 404:
            return None
        resp.raise_for_status()
        data: dict[str, Any] = resp.json()
        return data

    def status(self, run_id: str) -> str | None:
        data = self.job(run_id)
        return None if data is None else str(data["status"])

    def stop(self, run_id: str) -> None:
        """Ray's own stop of the job (SIGTERM, then SIGKILL), waited for until Ray says it ended."""
        requests.post(f"{self.address}/api/jobs/{run_id}/stop", headers={"Authorization": f"Bearer {self.token}"},
                      timeout=10)
        wait_for(ended(self, run_id), 60, f"{run_id} to stop")

    def logs(self, run_id: str) -> str:
        resp = self.get(f"/api/jobs/{run_id}/logs")
        resp.raise_for_status()
        return str(resp.json()["logs"])


def wait_for(predicate: Callable[[], object], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def ended(api: JobsAPI, run_id: str) -> Callable[[], str | None]:
    def check() -> str | None:
        status = api.status(run_id)
        return status if status in ("SUCCEEDED", "FAILED", "STOPPED") else None
    return check


def supervisor_pids(run_id: str) -> list[int]:
    """The supervisor's own process (`python -m rtjob.runside.supervisor RUN_ID ...`), found in /proc."""
    wanted = f"-m rtjob.runside.supervisor {run_id} "
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if wanted in cmdline and "/bin/sh" not in cmdline.split(" ", 1)[0]:
            found.append(int(entry.name))
    return found


def concurrent_status(run_id: str, env: dict[str, str], *flags: str, lookers: int = 2,
                      timeout: float = 120) -> list[tuple[str, str]]:
    """``lookers`` `rtjob status RUN_ID FLAGS` started at once: their (stdout, stderr), each one asserted to exit 0.
    One still running after ``timeout`` seconds is killed and reaped."""
    procs = [popen_rtjob("status", run_id, *flags, env=env) for _ in range(lookers)]
    try:
        answers = [p.communicate(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    assert all(p.returncode == 0 for p in procs), answers
    return answers
