"""A thin client for Ray's Jobs REST API (the dashboard's /api/jobs), with Ray token auth.

Status, list, stop and logs go straight over HTTP, so those commands never import Ray itself
(`ray job status` spends most of its time importing Ray). Submission uses Ray's own client for its
working-dir packaging.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import requests

from ...core.errors import BadInput, Unreachable

# Every request has both: a dead host fails in seconds, a slow dashboard gets its time.
CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 30.0
TRANSIENT_STATUS = frozenset({502, 503, 504})
READONLY_NODE_TYPE = re.compile(r"node_[0-9a-f]+")  # a node's type on a cluster without an autoscaler


def quiet_ray_client() -> None:
    """Ray's client, as rtjob's submit and uploads use it, says nothing below an error (core/verbosity.py)."""
    from ...core.verbosity import quiet_loggers

    quiet_loggers("ray", "ray.dashboard.modules.dashboard_sdk", "ray._private.runtime_env.packaging")


def normalize_address(address: str) -> str:
    """``head:8265`` → ``http://head:8265``; anything that is not an http(s) URL with a host and a valid port is
    one line of bad input (before any request is made)."""
    from urllib.parse import urlsplit

    address = address.strip().rstrip("/")
    expected = "expected http://host:port or https://host:port, e.g. http://head:8265"
    if address.startswith(("ray://", "auto")):
        raise BadInput(f"address {address!r}: rtjob talks to the Ray dashboard (Jobs API), e.g. http://head:8265")
    if any(ord(c) < 33 or ord(c) == 127 for c in address):
        raise BadInput(f"the address holds a space or a control character; {expected}")
    if "://" not in address:
        address = f"http://{address}"
    if not address.startswith(("http://", "https://")):
        raise BadInput(f"address {address!r}: {expected}")
    try:
        parts = urlsplit(address)
        port = parts.port  # ValueError when out of range or not a number
    except ValueError:
        raise BadInput(f"address {address!r}: not a valid URL (a port outside 1-65535, or an unclosed [IPv6]); "
                       f"{expected}") from None
    if not parts.hostname or (port is not None and not 0 < port < 65536):
        raise BadInput(f"address {address!r}: {expected}")
    return address


def split_credentials(address: str) -> tuple[str, str | None]:
    """``http://user:pass@host:8265`` → (``http://host:8265``, an ``Authorization: Basic`` value).

    A dashboard behind a proxy with basic auth: the credentials travel as a header, so the address that
    rtjob prints (in errors, render, the equivalent command) never holds them."""
    import base64
    from urllib.parse import unquote

    scheme, sep, rest = address.strip().partition("://")
    if not sep:
        scheme, rest = "http", address.strip()
    if "@" not in rest:
        return address, None
    # The password may hold '/', '#' or '@' unescaped: the credentials end at the last '@' of the address.
    userinfo, host = rest.rsplit("@", 1)
    user, _, password = userinfo.partition(":")
    basic = base64.b64encode(f"{unquote(user)}:{unquote(password)}".encode()).decode("ascii")
    return f"{scheme}://{host}", f"Basic {basic}"


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


class NotADashboard(Unreachable):
    """The address answered, but not as Ray's dashboard does (an HTML page, a wrong shape)."""

    retriable = True  # while following: a proxy's hiccup; a one-shot command reports it (exit 3)


class Transient(Unreachable):
    """A fault that may pass: connection refused or reset, a time-out, HTTP 502/503/504."""

    retriable = True


class RayJobsAPI:
    def __init__(self, address: str, headers: dict[str, str], verify: bool = True) -> None:
        self.address = normalize_address(address)
        self.headers = headers
        self.verify = verify
        self._session = requests.Session()
        self._session.headers.update(headers)
        self.answered = False  # has the address ever answered? (a wrong address fails at once, a lost one waits)

    def _lost(self, message: str) -> Transient:
        """No answer at all: a fault that may pass once the cluster has answered; before that, most likely a
        wrong address or a cluster that is not there, reported at once (exit 3)."""
        error = Transient(message)
        error.retriable = self.answered
        return error

    def request(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        url = f"{self.address}{path}"
        try:
            resp = self._session.request(method, url, timeout=(CONNECT_TIMEOUT_S, READ_TIMEOUT_S), verify=self.verify,
                                         **kwargs)
        except requests.exceptions.SSLError as exc:
            raise Unreachable(f"TLS error talking to {self.address}: {_short(exc)} (--no-verify-tls skips the check)") from None
        except requests.exceptions.ConnectionError:
            raise self._lost(f"cannot reach the Ray cluster at {self.address}: connection refused, reset or no "
                             "route") from None
        except requests.exceptions.Timeout:
            raise self._lost(f"the Ray cluster at {self.address} did not answer within {READ_TIMEOUT_S:.0f}s") from None
        except (requests.exceptions.ChunkedEncodingError, requests.exceptions.ContentDecodingError) as exc:
            # It answered, and the answer broke off (a proxy cutting connections, a body shorter than its
            # Content-Length): a fault that may pass, like a reset.
            self.answered = True
            raise Transient(f"the answer from {self.address} broke off mid-body ({type(exc).__name__})") from None
        except requests.exceptions.RequestException as exc:
            raise Unreachable(f"cannot talk to {self.address}: {type(exc).__name__}") from None
        self.answered = True
        if resp.status_code == 401:
            raise Unreachable(
                f"authentication failed at {self.address}: the cluster wants a token; set RAY_AUTH_TOKEN or "
                "RAY_AUTH_TOKEN_PATH, or put it in ~/.ray/auth_token"
            )
        if resp.status_code == 403:
            raise Unreachable(f"authentication failed at {self.address}: the token was rejected")
        if resp.status_code in TRANSIENT_STATUS:
            raise Transient(f"{self.address}: HTTP {resp.status_code} (the dashboard or a proxy in front of it is "
                            "restarting or overloaded)")
        return resp

    def _json(self, resp: requests.Response, path: str, shape: type) -> Any:
        """The answer's JSON if it has the expected shape; else one line (exit 3) naming what came back."""
        if resp.status_code == 404:
            raise Unreachable(f"{self.address}{path}: HTTP 404: not a Ray dashboard (is this the dashboard port, "
                              "8265?)")
        if resp.status_code >= 400:
            raise Unreachable(f"{self.address}{path}: HTTP {resp.status_code}")
        try:
            data = resp.json()
        except ValueError:
            kind = (resp.headers.get("content-type") or "no content type").split(";")[0]
            raise NotADashboard(f"{self.address}{path}: not a Ray dashboard (the answer is {kind}, not JSON); "
                                "check the address, or sign in to the proxy in front of it") from None
        if not isinstance(data, shape):
            raise NotADashboard(f"{self.address}{path}: not a Ray dashboard (unexpected answer: a JSON "
                                f"{type(data).__name__}, expected a {shape.__name__})")
        return data

    def get_json(self, path: str, **kwargs: Any) -> Any:
        return self._json(self.request("GET", path, **kwargs), path, object)

    def job(self, submission_id: str) -> dict[str, Any] | None:
        path = f"/api/jobs/{submission_id}"
        resp = self.request("GET", path)
        if resp.status_code == 404:
            return None
        data: dict[str, Any] = self._json(resp, path, dict)
        return data

    def jobs(self) -> list[dict[str, Any]]:
        data = self._json(self.request("GET", "/api/jobs/"), "/api/jobs/", list)
        return [d for d in data if isinstance(d, dict)]

    def stop(self, submission_id: str) -> bool:
        path = f"/api/jobs/{submission_id}/stop"
        resp = self.request("POST", path)
        if resp.status_code == 404:
            raise BadInput(f"no run {submission_id!r} at {self.address}")
        return bool(self._json(resp, path, dict).get("stopped"))

    def delete(self, submission_id: str) -> None:
        """DELETE /api/jobs/{id} (Ray's delete_job): Ray deletes only a run that has ended."""
        path = f"/api/jobs/{submission_id}"
        resp = self.request("DELETE", path)
        if resp.status_code == 404:
            raise BadInput(f"no run {submission_id!r} at {self.address}")
        # Not ended (a race with the caller's own status check): the job agent refuses, the dashboard
        # passes its RuntimeError on as a 500 (or a 400) with a traceback.
        if resp.status_code in (400, 500) and "non-terminal state" in resp.text:
            raise BadInput(f"run {submission_id!r} has not ended: stop it first: rtjob stop {submission_id}")
        if not self._json(resp, path, dict).get("deleted"):
            raise BadInput(f"{self.address} did not delete run {submission_id!r}")

    def logs(self, submission_id: str) -> str:
        path = f"/api/jobs/{submission_id}/logs"
        resp = self.request("GET", path)
        if resp.status_code == 404:
            raise BadInput(f"no run {submission_id!r} at {self.address}")
        logs = self._json(resp, path, dict).get("logs", "")
        return logs if isinstance(logs, str) else ""

    def nodes(self) -> list[dict[str, Any]]:
        path = "/api/v0/nodes"
        data = self._json(self.request("GET", path, params={"detail": "1", "limit": "10000"}), path, dict)
        try:
            found = data["data"]["result"]["result"]
        except (KeyError, TypeError):
            raise NotADashboard(f"{self.address}{path}: not a Ray dashboard (no node list in the answer)") from None
        return [n for n in found if isinstance(n, dict) and n.get("state") == "ALIVE"]

    def train_runs(self) -> list[dict[str, Any]]:
        """Ray Train's runs on this cluster, with their job and storage (Train's state API, kept only where the
        driver ran with RAY_TRAIN_ENABLE_STATE_TRACKING=1); empty where the cluster keeps no Train state."""
        path = "/api/train/v2/runs/v1"
        resp = self.request("GET", path)
        if resp.status_code in (404, 500):  # 500: "Train state data is not available" (tracking off)
            return []
        runs = self._json(resp, path, dict).get("train_runs")
        return [run for run in runs if isinstance(run, dict)] if isinstance(runs, list) else []

    def has_autoscaler(self) -> bool | None:
        """True if the cluster can add worker nodes, False if not, None if it cannot tell. Ray's monitor types each
        node (its autoscaler report's nodeTypeMapping): by the autoscaling config's node types where it has one, as
        ``node_<id>`` where it runs read-only without one (ray.autoscaler._private.util.format_readonly_node_type).
        The worker nodes it counts are no sign: an autoscaling cluster at min_workers 0 has none."""
        try:
            report = self.get_json("/api/cluster_status")["data"]["clusterStatus"]["autoscalerReport"]
            types = {str(t) for t in (report.get("nodeTypeMapping") or {}).values()}
        except (Unreachable, KeyError, TypeError, AttributeError):
            return None
        if not types:
            return None
        return any(not READONLY_NODE_TYPE.fullmatch(t) for t in types)

    def ws_url(self, path: str) -> str:
        return "ws" + self.address[len("http"):] + path


def _short(exc: Exception) -> str:
    return str(exc).splitlines()[0][:200]
