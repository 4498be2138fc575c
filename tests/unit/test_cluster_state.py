"""The embedded cluster's state file and process selection, offline: what rtjob trusts before it stops
anything. No Ray, no processes started; real files in a private RTJOB_HOME and a real temp dir."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from rtjob.backends.ray import cluster, cluster_processes


@pytest.fixture
def good(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict]:
    """A valid record in a private RTJOB_HOME, with a real rtjob-ray-* temp dir that names this home."""
    monkeypatch.setenv("RTJOB_HOME", str(tmp_path))
    (tmp_path / "local").mkdir()
    temp_dir = tempfile.mkdtemp(prefix=cluster.TEMP_PREFIX, dir=cluster.TEMP_ROOT)
    Path(temp_dir, cluster.OWNER_FILE).write_text(json.dumps({"home": str((tmp_path / "local").resolve())}))
    try:
        yield {"address": "http://127.0.0.1:8265", "gcs_address": "127.0.0.1:6379", "temp_dir": temp_dir,
               "token_path": str(tmp_path / "local" / "auth_token"), "cpus_per_node": 1, "started_at": 1.0}
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)


def _load(text: str) -> cluster.LocalCluster | None:
    cluster._state_file().write_text(text)
    return cluster.load_state()


def test_a_valid_record_loads(good: dict) -> None:
    loaded = _load(json.dumps(good))
    assert loaded is not None and loaded.temp_dir == good["temp_dir"] and loaded.gcs_port == 6379


@pytest.mark.parametrize("change, problem", [
    ({"temp_dir": "/tmp"}, "not a folder directly under /tmp"),
    ({"temp_dir": "/tmp/rtjob-ray-"}, "not named rtjob-ray-"),
    ({"temp_dir": "/tmp/other"}, "not named rtjob-ray-"),
    ({"temp_dir": ""}, "records no temp_dir"),
    ({"temp_dir": "/tmp/../tmp/rtjob-ray-x"}, "not a folder directly under /tmp"),
    ({"temp_dir": "/var/tmp/rtjob-ray-x"}, "not a folder directly under /tmp"),
    ({"temp_dir": "/tmp/rtjob-ray-a b"}, "not named rtjob-ray-"),
    ({"address": "http://example.com:8265"}, "not a local dashboard URL"),
    ({"gcs_address": "127.0.0.1:99999"}, "not a local GCS address"),
    ({"token_path": "/etc/shadow"}, "token_path"),
    ({"cpus_per_node": "1"}, "not a number"),
    ({"extra": 1}, "does not hold exactly"),
])
def test_a_damaged_record_is_refused(good: dict, change: dict, problem: str) -> None:
    with pytest.raises(cluster.DamagedState, match=problem) as caught:
        _load(json.dumps({**good, **change}))
    assert caught.value.exit_code == 3 and "nothing was stopped" in caught.value.message


@pytest.mark.parametrize("text, problem", [("", "empty"), ("{oops", "not JSON"), ("null", "does not hold"),
                                           ("[]", "does not hold")])
def test_an_unparsable_record_is_refused(good: dict, text: str, problem: str) -> None:
    with pytest.raises(cluster.DamagedState, match=problem):
        _load(text)


def test_temp_dirs_that_are_not_ours_are_refused(good: dict, tmp_path: Path) -> None:
    link = Path(f"{cluster.TEMP_ROOT}/{cluster.TEMP_PREFIX}link{os.getpid()}")
    link.symlink_to(good["temp_dir"])
    try:
        with pytest.raises(cluster.DamagedState, match="a link"):
            _load(json.dumps({**good, "temp_dir": str(link)}))
    finally:
        link.unlink()
    Path(good["temp_dir"], cluster.OWNER_FILE).write_text(json.dumps({"home": "/somewhere/else/local"}))
    with pytest.raises(cluster.DamagedState, match="another rtjob home"):
        _load(json.dumps(good))
    if os.getuid() == 0:
        os.chown(good["temp_dir"], 65534, 65534)
        with pytest.raises(cluster.DamagedState, match="another user"):
            _load(json.dumps(good))


def test_only_whole_path_components_match() -> None:
    temp = "/tmp/rtjob-ray-abc"
    for args in (["raylet", f"--log_dir={temp}/session_1/logs"], ["x", "--temp-dir", temp],
                 ["python", f"--temp-dir={temp}"], ["x", f"--dirs={temp}:/other"]):
        assert cluster_processes._carries(args, temp), args
    for args in (["sleep", "/tmp"], ["x", f"{temp}d/logs"], ["x", f"/home{temp}"], ["x", "--temp-dir=/tmp/rtjob-ray-ab"]):
        assert not cluster_processes._carries(args, temp), args


def test_client_server_needs_the_module_and_the_gcs_port() -> None:
    server = ["python", "-m", "ray.util.client.server", "--address=192.0.2.2:37859", "--port=50425"]
    assert cluster_processes._is_client_server(server, 37859)
    assert not cluster_processes._is_client_server(server, 3785)
    assert not cluster_processes._is_client_server(["python", "-m", "other", "--address=192.0.2.2:37859"], 37859)
    assert not cluster_processes._is_client_server(["python", "ray.util.client.server", "--port=37859"], 37859)


def test_down_says_what_it_stops_before_it_waits(good: dict) -> None:
    """`rtjob local down` names what it stops before the seconds Ray's daemons take to end: here a real process
    whose command line carries the cluster's temp dir (as each Ray daemon's does)."""
    import subprocess
    import sys

    cluster._state_file().write_text(json.dumps(good))
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", f"--temp-dir={good['temp_dir']}"])
    lines: list[str] = []

    def say(line: str) -> None:
        lines.append(line)
        if line.startswith("stopping"):
            assert proc.poll() is None, "said after it stopped"

    try:
        assert cluster.down(log=say) == 1
        assert proc.wait(timeout=30) is not None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert lines == ["stopping 1 process(es) of the embedded cluster"], lines
    assert not cluster._state_file().exists() and not Path(good["temp_dir"]).exists()
