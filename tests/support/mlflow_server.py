"""A real MLflow tracking server on loopback for the tracking tests: `mlflow server` from .venv-mlflow (built by
`make mlflow-server`: mlflow is heavy and stays out of the project's venv), a SQLite backend and an artifacts folder
in a temp dir, no job-execution helpers (MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false: they outlive the server).
Started and stopped by its own process handle; ``restart`` on the same port and database makes an outage. The tests
read what it holds through its REST API, as the mirror writes it."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

from .processes import stop
from .s3_server import free_port

REPO = Path(__file__).resolve().parents[2]
MLFLOW = REPO / ".venv-mlflow" / "bin" / "mlflow"


def available() -> bool:
    return MLFLOW.exists()


class MlflowServer:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, ready_s: float = 60) -> None:
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        log = open(self.folder / "mlflow-server.log", "ab")  # noqa: SIM115 - the child holds it
        self.proc = subprocess.Popen(
            [str(MLFLOW), "server", "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1",
             "--backend-store-uri", f"sqlite:///{self.folder / 'mlflow.db'}",
             "--default-artifact-root", str(self.folder / "artifacts")],
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.monotonic() + ready_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited: {(self.folder / 'mlflow-server.log').read_text()[-2000:]}")
            try:
                urllib.request.urlopen(f"{self.uri}/health", timeout=2).read()
                return
            except OSError:
                time.sleep(0.3)
        raise RuntimeError("mlflow server did not answer within {ready_s}s")

    def stop(self) -> None:
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, 15)  # its uvicorn worker with it (its own session)
            stop(self.proc)
            self.proc = None

    def api(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"{self.uri}/api/2.0/mlflow/{path}", data=data,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as response:
            return dict(json.loads(response.read()))

    def runs(self, experiment: str) -> list[dict[str, Any]]:
        got = self.api(f"experiments/get-by-name?experiment_name={experiment}")
        found = self.api("runs/search", {"experiment_ids": [got["experiment"]["experiment_id"]]})
        return list(found.get("runs") or [])

    def history(self, run_id: str, key: str) -> list[dict[str, Any]]:
        got = self.api(f"metrics/get-history?run_id={run_id}&metric_key={key}&max_results=10000")
        return list(got.get("metrics") or [])
