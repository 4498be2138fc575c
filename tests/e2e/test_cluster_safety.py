"""The embedded cluster with concurrent rtjob processes and damaged state (hardening issue, part 4).

Real `ray start`, real processes, each test in its own RTJOB_HOME (except three that look at one start: the
concurrent ups, the token's file, then the damaged state, which stops it). A test's cluster is found by the
RTJOB_HOME in its processes' environment (Ray's daemons inherit it from `ray start`), so a regression that
leaks a second cluster is still stopped at the end, and nothing of another session's is ever touched.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from support.cli import base_env, new_id, popen_rtjob, rtjob

pytestmark = pytest.mark.cluster


def _home_processes(home: Path) -> list[psutil.Process]:
    """Every process started for this test's RTJOB_HOME (rtjob itself excluded: it has exited by then)."""
    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if proc.environ().get("RTJOB_HOME") == str(home) and proc.pid != os.getpid():
                found.append(proc)
        except psutil.Error:
            continue
    return found


def _gcs(home: Path) -> list[psutil.Process]:
    found = []
    for proc in _home_processes(home):
        try:
            if os.path.basename(proc.cmdline()[0]) == "gcs_server":
                found.append(proc)
        except (psutil.Error, IndexError):
            continue
    return found


def _ray_process(home: Path, needle: str) -> psutil.Process:
    for proc in _home_processes(home):
        try:
            if needle in " ".join(proc.cmdline()):
                return proc
        except psutil.Error:
            continue
    raise AssertionError(f"no {needle} process for {home}")


def _state(home: Path) -> dict:
    return json.loads((home / "local" / "cluster.json").read_text())


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


@contextlib.contextmanager
def _private_home() -> Iterator[Path]:
    """A private RTJOB_HOME; at the end `rtjob local down`, then a safety net for anything it left."""
    path = Path(tempfile.mkdtemp(prefix="rtjob-t-", dir="/tmp"))
    try:
        yield path
    finally:
        good = path / "good-cluster.json"
        if good.exists():  # a test that damaged the state file puts the real one back first
            (path / "local" / "cluster.json").write_text(good.read_text())
        rtjob("local", "down", env=base_env(path), timeout=180)
        leftovers = _home_processes(path)
        for proc in leftovers:
            proc.kill()
        psutil.wait_procs(leftovers, timeout=10)
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def home() -> Iterator[Path]:
    with _private_home() as path:
        yield path


@dataclass
class ConcurrentUps:
    """Two `rtjob local up --nodes 2` started together in a fresh home whose token path was a link to a
    world-readable decoy file before the first start."""

    home: Path
    decoy: Path
    codes: list[int | None]
    outs: list[tuple[str, str]]


@pytest.fixture(scope="module")
def concurrent_ups() -> Iterator[ConcurrentUps]:
    """One cluster start shared by the tests that look at how it started (the concurrent ups, the token's file),
    then by the damaged-state test, which stops it (it comes last of them: pytest runs a file's tests in order)."""
    with _private_home() as home:
        local = home / "local"
        local.mkdir()
        decoy = home / "decoy.txt"
        decoy.write_text("decoy\n")
        decoy.chmod(0o644)
        (local / "auth_token").symlink_to(decoy)
        env = base_env(home)
        first = popen_rtjob("local", "up", "--nodes", "2", env=env)
        second = popen_rtjob("local", "up", "--nodes", "2", env=env)
        outs = [proc.communicate(timeout=300) for proc in (first, second)]
        yield ConcurrentUps(home, decoy, [first.returncode, second.returncode], outs)


def test_two_concurrent_ups_share_one_cluster(concurrent_ups: ConcurrentUps) -> None:
    """Two `rtjob local up --nodes 2` started together: the second waits on the lock, then reuses."""
    home, outs = concurrent_ups.home, concurrent_ups.outs
    env = base_env(home)
    assert concurrent_ups.codes == [0, 0], outs
    stderr = "\n".join(err for _, err in outs)
    assert stderr.count("starting the embedded Ray cluster") == 1, stderr
    assert "waiting for it" in stderr, stderr

    state = _state(home)
    gcs = _gcs(home)
    assert len(gcs) == 1, [p.cmdline()[:2] for p in gcs]
    assert any(f"={state['temp_dir']}/" in arg for arg in gcs[0].cmdline()), gcs[0].cmdline()[:2]
    token = Path(state["token_path"]).read_text()
    status = rtjob("local", "status", "--output", "json", env=env, timeout=60)
    assert status.returncode == 0 and json.loads(status.stdout)["nodes"] == 2, status.stderr  # the token works

    again = rtjob("local", "up", "--nodes", "2", env=env, timeout=120)
    assert again.returncode == 0, again.stderr
    assert "starting" not in again.stderr
    assert Path(state["token_path"]).read_text() == token
    assert [p.pid for p in _gcs(home)] == [gcs[0].pid]


def test_token_and_state_are_private_from_the_start(concurrent_ups: ConcurrentUps) -> None:
    """The token is written into a new 0600 file, never into whatever lay at its path (here a link to a
    world-readable file), and cluster.json is 0600 too."""
    assert concurrent_ups.codes == [0, 0], concurrent_ups.outs
    local, decoy = concurrent_ups.home / "local", concurrent_ups.decoy
    assert decoy.read_text() == "decoy\n" and stat.S_IMODE(decoy.stat().st_mode) == 0o644
    token = local / "auth_token"
    assert not token.is_symlink() and len(token.read_text()) == 64
    for path in (token, local / "cluster.json"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


def test_submits_to_a_running_cluster_do_not_wait_on_its_lock(concurrent_ups: ConcurrentUps) -> None:
    """Submits to a cluster that runs as asked reuse it without the lock (the start-up issue, part 3): with the
    lock held here, as a long start or stop would hold it, four `submit --no-wait` at once each return with
    their own run, and the runs succeed. While `local down`'s marker is there, a reuse still waits on the lock
    (the race against a stop: it never reuses a cluster being stopped)."""
    from filelock import FileLock

    home = concurrent_ups.home
    env = base_env(home)
    ids = [new_id("parallel") for _ in range(4)]
    with FileLock(str(home / "local" / "cluster.lock")):
        subs = [popen_rtjob("submit", "tests/support/jobs/count.yaml", "--nodes", "2", "--submission-id", run_id,
                            "--no-wait", "--set", "args.lines=2", "--set", "args.interval=0", env=env)
                for run_id in ids]
        outs = [proc.communicate(timeout=300) for proc in subs]
        assert [proc.returncode for proc in subs] == [0] * 4, outs
        assert not any("waiting for it" in err for _, err in outs), outs
        (home / "local" / "stopping").touch()
        up = popen_rtjob("local", "up", "--nodes", "2", env=env)
        said = _StderrLines(up)
        said.wait_for("waiting for it", timeout=120)
        assert up.poll() is None
        (home / "local" / "stopping").unlink()
    assert up.wait(timeout=120) == 0, said.text()
    for run_id in ids:
        waited = rtjob("wait", run_id, env=env, timeout=300)
        assert waited.returncode == 0, (run_id, waited.stdout, waited.stderr)
    assert len(_gcs(home)) == 1


def test_damaged_state_kills_nothing_and_down_still_cleans_up(concurrent_ups: ConcurrentUps) -> None:
    """A damaged cluster.json: `up` and `status` exit 3 with one line and stop nothing (a decoy whose
    command line carries /tmp survives); `down` reports it and still stops this home's own cluster (the one the
    concurrent ups started: this test is their cluster's last user)."""
    home = concurrent_ups.home
    env = base_env(home)
    assert rtjob("local", "up", env=env, timeout=180).returncode == 0  # reuses it (or starts one, run alone)
    state_file = home / "local" / "cluster.json"
    good = _state(home)
    (home / "good-cluster.json").write_text(json.dumps(good))
    gcs_pid = _gcs(home)[0].pid

    # A harmless decoy whose command line carries /tmp, a folder of its own and a client server's
    # module on another port, and folders that look like
    # rtjob's but are not: another user's, and a link to the real temp dir.
    decoy_dir = Path(tempfile.mkdtemp(prefix="rtjob-decoy-", dir="/tmp"))
    other = Path(tempfile.mkdtemp(prefix="rtjob-ray-other", dir="/tmp"))
    link = Path(f"/tmp/rtjob-ray-link{os.getpid()}")
    link.symlink_to(good["temp_dir"])
    decoy = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "/tmp", str(decoy_dir),
                              "-m", "ray.util.client.server", "--address=192.0.2.1:1"])  # another port
    try:
        damaged = {"a decoy's folder": str(decoy_dir), "/tmp": "/tmp", "no temp_dir": "", "a link": str(link)}
        if os.getuid() == 0:  # only root can make a folder that belongs to another user
            os.chown(other, 65534, 65534)
            damaged["another user's folder"] = str(other)
        texts = {what: json.dumps({**good, "temp_dir": value}) for what, value in damaged.items()}
        texts.update({"empty": "", "not JSON": "{not json"})
        for what, text in texts.items():
            state_file.write_text(text)
            for args in (("local", "up"), ("local", "status")):
                proc = rtjob(*args, env=env, timeout=120)
                assert proc.returncode == 3, (what, args, proc.stderr)
                assert len(_lines(proc.stderr)) == 1 and "cluster.json is damaged" in proc.stderr, (what, proc.stderr)
            assert decoy.poll() is None and psutil.pid_exists(gcs_pid), what
            assert decoy_dir.exists() and other.exists() and Path(good["temp_dir"]).exists(), what

        state_file.write_text(json.dumps({**good, "temp_dir": "/tmp"}))
        down = rtjob("local", "down", env=env, timeout=180)
        assert down.returncode == 0, down.stderr
        assert "is damaged" in down.stderr and "processes ended" in down.stderr, down.stderr
        assert _home_processes(home) == [] and not Path(good["temp_dir"]).exists()
        assert not state_file.exists()
        assert decoy.poll() is None and decoy_dir.exists() and other.exists()
    finally:  # good-cluster.json stays: the fixture puts it back before its own `local down`
        decoy.kill()
        decoy.wait(timeout=10)
        link.unlink(missing_ok=True)
        shutil.rmtree(decoy_dir, ignore_errors=True)
        shutil.rmtree(other, ignore_errors=True)


def test_two_submits_racing_to_start_the_cluster_both_succeed_on_one(home: Path) -> None:
    """Two `rtjob submit` with no cluster yet: one starts it, the other waits on the lock and reuses it;
    both runs succeed and print every line."""
    env = base_env(home)
    runs = [popen_rtjob("submit", "tests/support/jobs/count.yaml", "--nodes", "2", "--set", "args.lines=5",
                        env=env) for _ in range(2)]
    outs = [proc.communicate(timeout=400) for proc in runs]
    assert [proc.returncode for proc in runs] == [0, 0], outs
    for out, _ in outs:
        assert [ln for ln in out.splitlines() if ln.startswith("line ")] == [f"line {i} of 5" for i in range(1, 6)]
    assert "\n".join(err for _, err in outs).count("starting the embedded Ray cluster") == 1, outs
    assert len(_gcs(home)) == 1


class _StderrLines:
    """A running rtjob's stderr, read line by line as it comes (a thread), so a test waits for what rtjob says
    instead of sleeping for as long as saying it might take."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self._lines: list[str] = []
        self._ended = False
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self._reader.start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            with self._changed:
                self._lines.append(line)
                self._changed.notify_all()
        with self._changed:
            self._ended = True
            self._changed.notify_all()

    def wait_for(self, text: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self._changed:
            while not any(text in line for line in self._lines):
                left = deadline - time.monotonic()
                assert not self._ended, f"rtjob ended without saying {text!r}:\n{''.join(self._lines)}"
                assert left > 0, f"rtjob did not say {text!r} within {timeout:g}s:\n{''.join(self._lines)}"
                self._changed.wait(left)

    def text(self) -> str:
        """Everything it wrote (call once the process has ended)."""
        self._reader.join(timeout=30)
        return "".join(self._lines)


def test_slow_dashboard_is_waited_for_never_killed(home: Path) -> None:
    """A stopped (SIGSTOP) dashboard: `up` waits and reuses once it answers, or exits 3 after its bound,
    and the cluster survives both; a cluster whose processes are all gone is replaced."""
    env = base_env(home)
    assert rtjob("local", "up", env=env, timeout=180).returncode == 0
    temp_dir = _state(home)["temp_dir"]
    gcs_pid = _gcs(home)[0].pid
    dashboard = _ray_process(home, "dashboard/dashboard.py")

    dashboard.send_signal(signal.SIGSTOP)
    try:
        waiting = popen_rtjob("local", "up", env=base_env(home, RTJOB_LOCAL_DASHBOARD_WAIT_S="90"))
        stderr = _StderrLines(waiting)
        # Said once a dashboard request has timed out, and rtjob waits instead of giving up: only then let it answer.
        stderr.wait_for("does not answer; waiting up to 90s", timeout=60)
        dashboard.send_signal(signal.SIGCONT)
        waiting.wait(timeout=120)
        err = stderr.text()
        assert waiting.stdout is not None
        waiting.stdout.close()
        assert waiting.returncode == 0, err

        dashboard.send_signal(signal.SIGSTOP)
        bounded = rtjob("local", "up", env=base_env(home, RTJOB_LOCAL_DASHBOARD_WAIT_S="3"), timeout=120)
        assert bounded.returncode == 3, bounded.stderr
        assert "did not answer within 3s while its processes run (nothing was stopped)" in bounded.stderr
        assert "Traceback" not in bounded.stderr
    finally:
        dashboard.send_signal(signal.SIGCONT)
    assert dashboard.is_running() and [p.pid for p in _gcs(home)] == [gcs_pid]
    assert _state(home)["temp_dir"] == temp_dir
    assert rtjob("local", "status", env=env, timeout=60).returncode == 0

    # Gone (every process of it killed): the next `up` starts a new cluster instead of waiting.
    procs = _home_processes(home)
    for proc in procs:
        proc.kill()
    psutil.wait_procs(procs, timeout=10)
    fresh = rtjob("local", "up", env=env, timeout=180)
    assert fresh.returncode == 0, fresh.stderr
    assert "is gone; starting a new one" in fresh.stderr
    assert _state(home)["temp_dir"] != temp_dir and not os.path.exists(temp_dir)


def test_ray_start_timeout_is_one_line_and_cleans_up(home: Path) -> None:
    """`ray start` that never finishes (its GCS is stopped with SIGSTOP as soon as it appears) is cut by
    its time-out: exit 3, one error line, no traceback, nothing of the half-started cluster left."""
    proc = popen_rtjob("local", "up", env=base_env(home, RTJOB_LOCAL_START_TIMEOUT_S="20"))
    stopped = []
    while proc.poll() is None:
        if not stopped:
            stopped = _gcs(home)
            for gcs in stopped:
                gcs.send_signal(signal.SIGSTOP)
        time.sleep(0.1)
    _, err = proc.communicate(timeout=60)
    assert stopped, "ray start finished before its GCS could be stopped"
    assert proc.returncode == 3, err
    errors = [line for line in _lines(err) if line.startswith("rtjob: error:")]
    assert errors == [_lines(err)[-1]] and "`ray start` did not finish within 20s" in errors[0], err
    assert "Traceback" not in err
    assert _home_processes(home) == []
    assert not (home / "local" / "cluster.json").exists()
    owners = [p / "rtjob-owner.json" for p in Path("/tmp").glob("rtjob-ray-*")]
    assert not [o for o in owners if o.exists() and str((home / "local").resolve()) in o.read_text()]


def test_three_nodes_start_in_parallel_each_in_its_own_folder_with_rtjobs_ray_settings(home: Path) -> None:
    """`rtjob local up --nodes 3`: the two extra nodes start together (one `ray start --address` each), all
    three are alive, each raylet has its own folder under the recorded temp dir and its own agent ports, the
    Ray settings of backends/ray/tuning.py reach Ray's daemons, and `rtjob local down` leaves nothing."""
    from rtjob.backends.ray.tuning import RAY_SETTINGS

    env = base_env(home)
    up = rtjob("local", "up", "--nodes", "3", env=env, timeout=300)
    assert up.returncode == 0, up.stderr
    for stage in ("starting the embedded Ray cluster", "adding nodes 2-3/3 to the embedded cluster, in parallel",
                  "head node started", "node 2 joined", "node 3 joined", "dashboard ready: http://127.0.0.1:",
                  "embedded cluster up: 3 node(s)"):
        assert stage in up.stderr, (stage, up.stderr)  # a line per stage, as it happens
    assert "\r" not in up.stderr  # no spinner
    status = rtjob("local", "status", "--output", "json", env=env, timeout=60)
    assert status.returncode == 0 and json.loads(status.stdout)["nodes"] == 3, status.stderr

    temp_dir = _state(home)["temp_dir"]
    raylets = [p for p in _home_processes(home) if os.path.basename(p.cmdline()[0]) == "raylet"]
    folders = sorted(next(a.split("=", 1)[1] for a in p.cmdline() if a.startswith("--temp_dir=")) for p in raylets)
    assert folders == [temp_dir, f"{temp_dir}/n2", f"{temp_dir}/n3"], folders
    ports = [next(a for a in p.cmdline() if a.startswith("--runtime_env_agent_port=")) for p in raylets]
    assert len(set(ports)) == 3, ports
    for proc in raylets:
        assert {k: proc.environ().get(k) for k in RAY_SETTINGS} == RAY_SETTINGS

    down = rtjob("local", "down", env=env, timeout=180)
    assert down.returncode == 0, down.stderr
    assert "stopping the embedded cluster: 3 node(s)" in down.stderr, down.stderr
    assert "embedded cluster stopped" in down.stderr, down.stderr
    assert _home_processes(home) == [] and not Path(temp_dir).exists()
