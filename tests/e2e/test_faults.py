"""Faults while following, on the real embedded cluster: a fault-injecting HTTP proxy between rtjob and the
real dashboard (502/503/504s, an HTML page, connection resets, stalls), the dashboard gone for a while, many
followers at once, and a job that prints its own secrets. The run still ends with the right exit code, no
line is lost or repeated, and no secret is printed."""

from __future__ import annotations

import json
import re
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from support.cli import new_id, plant, popen_rtjob, record, rtjob
from support.http_faults import FaultProxy

COUNT = "tests/support/jobs/count.yaml"
FAIL = "tests/support/jobs/fail.yaml"


def _cluster(env: dict[str, str]) -> tuple[tuple[str, int], str]:
    state = json.loads((Path(env["RTJOB_HOME"]) / "local" / "cluster.json").read_text())
    host, port = state["address"].removeprefix("http://").split(":")
    return (host, int(port)), Path(state["token_path"]).read_text().strip()


def _status_polls(path: str, agent: str) -> bool:
    """The follower's status polls and its full-log reads (rtjob's REST client: requests), where a fault would
    decide the outcome; the log stream's own reconnects (aiohttp) are the dropped-stream test's subject."""
    return agent.startswith("python-requests") and re.fullmatch(r"/api/jobs/[^/]+(/logs)?",
                                                                path.split("?", 1)[0]) is not None


def _lines(stdout: str, total: int) -> None:
    got = [ln for ln in stdout.splitlines() if ln.startswith("line ")]
    assert got == [f"line {i} of {total}" for i in range(1, total + 1)], got


@pytest.fixture
def via_proxy(cluster_env: dict[str, str]):
    """(env for a `--backend ray` follower through the proxy, the proxy, its address); stopped after the test."""
    target, token = _cluster(cluster_env)
    proxies: list[FaultProxy] = []

    def make(plan: list[str]) -> tuple[dict[str, str], FaultProxy, list[str]]:
        proxy = FaultProxy(target, plan, _status_polls)
        proxies.append(proxy)
        env = {**cluster_env, "RAY_AUTH_TOKEN": token}
        return env, proxy, ["--backend", "ray", "--address", proxy.address]

    yield make
    for proxy in proxies:
        proxy.stop()


def test_injected_faults_while_following_change_nothing(via_proxy) -> None:
    env, proxy, where = via_proxy(["ok", "502", "ok", "html", "503", "ok", "reset", "504", "ok", "stall"])
    proc = rtjob("submit", COUNT, *where, "--set", "args.lines=40", "--set", "args.interval=0.15",
                 "--submission-id", new_id("faults"), env=env, timeout=240)
    assert proc.returncode == 0, proc.stderr
    _lines(proc.stdout, 40)
    assert {"502", "503", "504", "html", "reset"} <= set(proxy.injected), proxy.injected
    assert "lost contact" in proc.stderr and "Traceback" not in proc.stderr


def test_answers_cut_mid_body_while_following_change_nothing(via_proxy) -> None:
    """A proxy that cuts connections while answering: the follow goes on (exit 0, every line once), it is not
    "cannot talk to" (exit 3) while the job runs on."""
    env, proxy, where = via_proxy(["ok", "cut", "ok", "cut", "cut", "ok"])
    proc = rtjob("submit", COUNT, *where, "--set", "args.lines=20", "--set", "args.interval=0.15",
                 "--submission-id", new_id("cut"), env=env, timeout=240)
    assert proc.returncode == 0, proc.stderr
    _lines(proc.stdout, 20)
    assert proxy.injected.get("cut", 0) >= 3, proxy.injected
    assert "Traceback" not in proc.stderr and "cannot talk to" not in proc.stderr


def test_a_failing_run_is_still_exit_1_through_faults(via_proxy) -> None:
    env, proxy, where = via_proxy(["502", "ok", "ok", "reset", "ok", "html", "ok", "ok"])
    proc = rtjob("submit", FAIL, *where, "--set", "args.interval=0.5", env=env, timeout=240)
    assert proc.returncode == 1, proc.stderr
    _lines(proc.stdout, 3)
    assert "failing on purpose with exit code 3" in proc.stdout and proxy.injected


def test_the_dashboard_gone_for_a_while_mid_follow(via_proxy) -> None:
    """Every request is reset for 8 s while the job prints (Ray does not respawn a dashboard; here the proxy
    takes it away): the follower waits it out and loses no line."""
    env, proxy, where = via_proxy(["ok"])
    follower = popen_rtjob("submit", COUNT, *where, "--set", "args.lines=40", "--set", "args.interval=0.25",
                           env=env)
    seen: list[str] = []

    def read() -> None:
        assert follower.stdout is not None
        for line in follower.stdout:
            seen.append(line.rstrip("\n"))
            if line.startswith("line 8 "):
                proxy.down_for(8.0)

    reader = threading.Thread(target=read)
    reader.start()
    reader.join(timeout=180)
    follower.wait(timeout=60)
    err = follower.stderr.read() if follower.stderr else ""
    record("\n".join(seen), err)
    assert follower.returncode == 0, err
    _lines("\n".join(seen), 40)
    assert proxy.injected.get("reset", 0) > 0, "\n".join(proxy.seen)
    assert "lost contact" in err and "contact restored" in err, err


def test_twelve_followers_at_once_all_complete_with_every_line(cluster_env: dict[str, str]) -> None:
    def one(i: int) -> subprocess.CompletedProcess[str]:
        return rtjob("submit", COUNT, "--submission-id", new_id(f"many{i}"), "--set", "args.lines=6",
                     "--set", "args.interval=0.2", env=cluster_env, timeout=400)

    with ThreadPoolExecutor(max_workers=12) as pool:
        procs = list(pool.map(one, range(12)))
    for proc in procs:
        assert proc.returncode == 0, proc.stderr
        _lines(proc.stdout, 6)


def test_a_job_that_prints_its_secrets_shows_them_masked(cluster_env: dict[str, str], tmp_path: Path) -> None:
    """The job echoes its secret env value, its secret arg and a token-shaped string: the followed log, `logs`
    and `status` mask all three; an ordinary word that shares letters with them stays."""
    token = plant("hf-token-canary-a1b2c3d4e5")
    api_key = plant("apikey-canary-99887766")
    shaped = plant("ghp_" + "Z" * 36)
    hub = plant("hf_" + "JobOwnHubTokenRtjobNeverSawXyZaBcD")  # a Hugging Face token the job has from elsewhere
    job = tmp_path / "leaky.yaml"
    wd = tmp_path / "wd"
    wd.mkdir()
    (wd / "leak.py").write_text(
        "import os, sys\n"
        "print('token is', os.environ['HF_TOKEN'], flush=True)\n"
        "print('args are', ' '.join(sys.argv[1:]), flush=True)\n"
        f"print('shaped {shaped} and hf-token-canary-ordinary', flush=True)\n"
        f"print('HF_TOKEN={hub} for hf_sft', flush=True)\n")
    job.write_text(f"name: leaky\nentrypoint: python leak.py\nworking_dir: {wd}\nargs:\n  api_key: {api_key}\n")
    run_id = new_id("leaky")
    proc = rtjob("submit", str(job), "--submission-id", run_id, "--env", f"HF_TOKEN={token}", env=cluster_env,
                 timeout=240)
    assert proc.returncode == 0, proc.stderr
    logs = rtjob("logs", run_id, env=cluster_env)
    status = rtjob("status", run_id, "-o", "json", env=cluster_env)
    for out in (proc, logs, status):
        text = out.stdout + out.stderr
        for secret in (token, api_key, shaped, hub):
            assert secret not in text, (secret, text)
    assert "token is ****" in proc.stdout and "--api-key ****" in proc.stdout
    assert "hf-token-canary-ordinary" in proc.stdout and "token is ****" in logs.stdout
    assert "HF_TOKEN=**** for hf_sft" in proc.stdout and "HF_TOKEN=**** for hf_sft" in logs.stdout
