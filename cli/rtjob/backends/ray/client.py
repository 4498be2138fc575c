"""A thin client for Ray's Jobs REST API (the dashboard's /api/jobs), with Ray token auth.

Status, list, stop and logs go straight over HTTP, so those commands never import Ray itself
(`ray job status` spends most of its time importing Ray). Submission uses Ray's own client for its
working-dir packaging.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import requests

from ...core.errors import BadInput, Unreachable

TIMEOUT_S = 15.0


def normalize_address(address: str) -> str:
    address = address.strip().rstrip("/")
    if address.startswith(("ray://", "auto")):
        raise BadInput(
            f"address {address!r}: rtjob talks to the Ray dashboard (Jobs API), e.g. http://head:8265"
        )
    if "://" not in address:
        address = f"http://{address}"
    if not address.startswith(("http://", "https://")):
        raise BadInput(f"address {address!r}: expected http://host:port or https://host:port")
    return address


def split_credentials(address: str) -> tuple[str, str | None]:
    """``http://user:pass@host:8265`` → (``http://host:8265``, an ``Authorization: Basic`` value).

    A dashboard behind a proxy with basic auth: the credentials travel as a header, so the address that
    rtjob prints (in errors, render, the equivalent command) never holds them."""
    from urllib.parse import unquote, urlsplit, urlunsplit

    parts = urlsplit(address if "://" in address else f"http://{address}")
    if "@" not in parts.netloc:
        return address, None
    import base64

    userinfo, host = parts.netloc.rsplit("@", 1)
    user, _, password = userinfo.partition(":")
    basic = base64.b64encode(f"{unquote(user)}:{unquote(password)}".encode()).decode("ascii")
    return urlunsplit(parts._replace(netloc=host)), f"Basic {basic}"


def discover_token() -> str | None:
    """Ray's token sources, in Ray's order: RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH, ~/.ray/auth_token."""
    token = os.environ.get("RAY_AUTH_TOKEN")
    if token:
        return token.strip()
    path = os.environ.get("RAY_AUTH_TOKEN_PATH")
    candidates = [Path(path)] if path else [Path.home() / ".ray" / "auth_token"]
    for candidate in candidates:
        try:
            text = candidate.read_text().strip()
        except OSError:
            continue
        if text:
            return text
    return None


class RayJobsAPI:
    def __init__(self, address: str, headers: dict[str, str], verify: bool = True) -> None:
        self.address = normalize_address(address)
        self.headers = headers
        self.verify = verify
        self._session = requests.Session()
        self._session.headers.update(headers)

    def request(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        url = f"{self.address}{path}"
        try:
            resp = self._session.request(method, url, timeout=TIMEOUT_S, verify=self.verify, **kwargs)
        except requests.exceptions.SSLError as exc:
            raise Unreachable(f"TLS error talking to {self.address}: {_short(exc)} (--no-verify-tls skips the check)") from None
        except requests.exceptions.ConnectionError:
            raise Unreachable(f"cannot reach the Ray cluster at {self.address}: connection refused or no route") from None
        except requests.exceptions.Timeout:
            raise Unreachable(f"the Ray cluster at {self.address} did not answer within {TIMEOUT_S:.0f}s") from None
        if resp.status_code == 401:
            raise Unreachable(
                f"authentication failed at {self.address}: the cluster wants a token; set RAY_AUTH_TOKEN or "
                "RAY_AUTH_TOKEN_PATH, or put it in ~/.ray/auth_token"
            )
        if resp.status_code == 403:
            raise Unreachable(f"authentication failed at {self.address}: the token was rejected")
        return resp

    def get_json(self, path: str, **kwargs: Any) -> Any:
        resp = self.request("GET", path, **kwargs)
        if resp.status_code >= 400:
            raise Unreachable(f"{self.address}{path}: HTTP {resp.status_code}: {resp.text.strip()[:200]}")
        try:
            return resp.json()
        except ValueError:
            raise Unreachable(f"{self.address}{path}: not a Ray dashboard (the answer is not JSON)") from None

    def job(self, submission_id: str) -> dict[str, Any] | None:
        resp = self.request("GET", f"/api/jobs/{submission_id}")
        if resp.status_code == 404:
            return None
        if resp.status_code >= 400:
            raise Unreachable(f"{self.address}: HTTP {resp.status_code} for job {submission_id}: {resp.text[:200]}")
        return dict(resp.json())

    def jobs(self) -> list[dict[str, Any]]:
        return list(self.get_json("/api/jobs/"))

    def stop(self, submission_id: str) -> bool:
        resp = self.request("POST", f"/api/jobs/{submission_id}/stop")
        if resp.status_code == 404:
            raise BadInput(f"no run {submission_id!r} at {self.address}")
        if resp.status_code >= 400:
            raise Unreachable(f"{self.address}: HTTP {resp.status_code} stopping {submission_id}: {resp.text[:200]}")
        return bool(resp.json().get("stopped"))

    def logs(self, submission_id: str) -> str:
        resp = self.request("GET", f"/api/jobs/{submission_id}/logs")
        if resp.status_code == 404:
            raise BadInput(f"no run {submission_id!r} at {self.address}")
        if resp.status_code >= 400:
            raise Unreachable(f"{self.address}: HTTP {resp.status_code} reading logs: {resp.text[:200]}")
        return str(resp.json().get("logs", ""))

    def nodes(self) -> list[dict[str, Any]]:
        data = self.get_json("/api/v0/nodes", params={"detail": "1", "limit": "10000"})
        return [n for n in data["data"]["result"]["result"] if n.get("state") == "ALIVE"]

    def has_autoscaler(self) -> bool | None:
        """True if the cluster can add worker nodes, False if not, None if it cannot tell."""
        try:
            data = self.get_json("/api/cluster_status")["data"]
        except (Unreachable, KeyError, TypeError):
            return None
        text = data.get("autoscalingStatus") or ""
        if "Worker node types:" not in text:
            return None
        types = text.split("Worker node types:", 1)[1].strip()
        return bool(types)

    def ws_url(self, path: str) -> str:
        return "ws" + self.address[len("http"):] + path


def _short(exc: Exception) -> str:
    return str(exc).splitlines()[0][:200]
