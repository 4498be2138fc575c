"""`rtjob ui`'s app without a browser: its ASGI app called directly (no server, no socket) over runs written with
rtjob's own writers. The Host check, the token off loopback, the redaction boundary on pages and JSON, escaping,
paths that cannot leave a run's folder, a damaged record kept to its card, bad input, and the light client
(no starlette/uvicorn/jinja2 imported by other commands)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rtjob.core.redact import REDACTOR
from rtjob.ui.app import Config, create_app
from support.cli import RTJOB, base_env, plant, rtjob
from support.ui_runs import UI_PORT, call, png, write_run

SECRET = plant("planted-unit-ui-secret-93b1c")
HF_TOKEN = plant("hf_" + "UiUnitHubTokenNeverToldToRtjobAbCd")  # the shape of a Hugging Face token (hf_ + 34 letters)
PORT = UI_PORT


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ui-storage")
    write_run(root, "u-good", "train", samples={"epoch_0001.png": png(4, 4, 1)}, log_lines=[
        "Running entrypoint for job u-good: python -m rtjob.runside.companion 'python train.py'",  # not the script's
        f"key {SECRET}", f"HF_TOKEN={HF_TOKEN} hf_sft shelf_life rtjob_training.hf", "rtjob-event: first_step", "done"])
    write_run(root, "u-bad", "train", status="FAILED", user="bob", raw_metrics=b"[1, 2")
    write_run(root, "u-evil", '<script>alert(1)</script>"onload=x\u202e', epochs=1, start="2026-11-22T00:00:00+00:00")
    return root


@pytest.fixture(autouse=True)
def ui_knows_the_secret() -> None:
    """As `rtjob ui` learns it from its environment (after the redactor is emptied for each test)."""
    REDACTOR.add([SECRET])


@pytest.fixture(scope="module")
def app(root: Path) -> Any:
    return create_app(Config(storage=str(root), lookup_root=str(root), endpoint=None, host="127.0.0.1", port=PORT,
                             token=None))


def test_host_header_is_checked_on_every_request(app: Any) -> None:
    for host in ("evil.example", f"evil.example:{PORT}", "127.0.0.1:1", ""):
        status, _, _ = call(app, "/", host=host)
        assert status == 421, host
    for host in (f"127.0.0.1:{PORT}", f"localhost:{PORT}", f"[::1]:{PORT}"):
        assert call(app, "/api/runs", host=host)[0] == 200, host
    on_80 = create_app(Config(storage=None, lookup_root=None, endpoint=None, host="127.0.0.1", port=80, token=None))
    assert call(on_80, "/api/runs", host="localhost")[0] == 200  # a browser leaves the default port out
    assert call(on_80, "/api/runs", host=f"localhost:{PORT}")[0] == 421


def test_off_loopback_a_token_in_a_header_or_cookie(root: Path) -> None:
    token = "t0ken-for-the-unit-test-1234"
    guarded = create_app(Config(storage=str(root), lookup_root=str(root), endpoint=None, host="10.1.2.3", port=PORT,
                                token=token))
    host = f"10.1.2.3:{PORT}"
    assert call(guarded, "/api/runs", host=host)[0] == 401
    assert call(guarded, "/", host=host, headers={"accept": "text/html"})[0] == 303  # to /login
    assert call(guarded, "/api/runs", host=host, headers={"x-rtjob-token": "wrong"})[0] == 401
    assert call(guarded, "/api/runs", host=host, headers={"x-rtjob-token": token})[0] == 200
    assert call(guarded, "/api/runs", host=host, headers={"cookie": f"rtjob_ui_token={token}"})[0] == 200
    status, headers, _ = call(guarded, "/login", method="POST", host=host, body=f"token={token}".encode(),
                              headers={"content-type": "application/x-www-form-urlencoded"})
    assert status == 303 and "httponly" in headers["set-cookie"].lower() and "samesite=strict" in headers["set-cookie"].lower()
    assert call(guarded, "/login", method="POST", host=host, body=b"token=nope")[0] == 401
    assert call(guarded, "/api/runs", host=f"127.0.0.1:{PORT}", headers={"x-rtjob-token": token})[0] == 421


def test_runs_json_filters_and_redacts(app: Any) -> None:
    status, headers, text = call(app, "/api/runs?user=bob")
    assert status == 200 and headers["content-type"] == "application/json"
    assert [r["id"] for r in json.loads(text)["runs"]] == ["u-bad"]
    assert json.loads(text)["runs"][0]["start_time"] == "2026-11-20T10:00:00Z"  # UTC to the second, with a Z
    assert [r["id"] for r in json.loads(call(app, "/api/runs?q=alert")[2])["runs"]] == ["u-evil"]
    # (other tests of this module add runs of their own to the shared folder, in any order: the fixture's three sort)
    ids = [r["id"] for r in json.loads(call(app, "/api/runs?sort=id&order=asc")[2])["runs"]]
    assert [i for i in ids if i in {"u-bad", "u-evil", "u-good"}] == ["u-bad", "u-evil", "u-good"] and ids == sorted(ids)
    status, _, text = call(app, "/api/runs?status=bogus")
    assert status == 400 and "status 'BOGUS'" in json.loads(text)["error"]
    assert call(app, "/api/runs?since=soon")[0] == 400
    for since in ("1000000d", "9" * 400, "99999999999999h"):  # overflow is bad input, never a 500
        assert call(app, f"/api/runs?since={since}")[0] == 400
        assert call(app, f"/?since={since}")[0] == 400
    assert call(app, "/?sort=nothing")[0] == 400


def test_pages_escape_names_and_make_bidi_visible(app: Any) -> None:
    status, headers, html = call(app, "/")
    assert status == 200 and "default-src 'self'" in headers["content-security-policy"]
    assert "<script>alert(1)" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;&#34;onload=x" in html
    assert "\u202e" not in html and "&lt;U+202E&gt;" in html
    _, _, run = call(app, "/runs/u-evil")
    assert "<script>alert(1)" not in run and "\u202e" not in run


def test_log_is_redacted_and_searched(app: Any) -> None:
    status, headers, text = call(app, "/runs/u-good/log")
    assert status == 200 and headers["content-type"].startswith("text/plain") and headers["x-content-type-options"] == "nosniff"
    assert SECRET not in text and "key ****" in text and text.endswith("done\n")
    # a token rtjob never learned, masked by its shape; the words beside it are not
    assert HF_TOKEN not in text and "HF_TOKEN=**** hf_sft shelf_life rtjob_training.hf\n" in text
    assert "Running entrypoint" not in text and "rtjob-event" not in text  # the user's view (runs/logview.py)
    assert call(app, "/runs/u-good/log/search?q=DONE")[2] == "3: done\n"
    assert SECRET not in call(app, f"/runs/u-good/log/search?q={SECRET[:12]}")[2]


def test_paths_cannot_leave_the_run_folder(app: Any) -> None:
    assert call(app, "/runs/u-good/samples/epoch_0001.png")[0] == 200
    for name in ("../rtjob-run.json", "..%2Frtjob-run.json", "/etc/passwd", "a/../../x"):
        assert call(app, f"/runs/u-good/samples/{name}")[0] == 404, name
    for run_id in ("..%2Fu-good", "..", ".", "a%5Cb", "u-good%00"):
        assert call(app, f"/runs/{run_id}")[0] == 404, run_id
        assert call(app, f"/runs/{run_id}/log")[0] == 404, run_id
    assert call(app, "/static/../app.py")[0] == 404


def test_a_damaged_metrics_file_stays_on_its_card(app: Any) -> None:
    status, _, html = call(app, "/runs/u-bad")
    assert status == 200 and 'class="error card-error"' in html and "metrics.json" in html
    assert call(app, "/")[0] == 200


def test_a_damaged_record_is_a_problem_line_not_a_500(tmp_path: Path) -> None:
    write_run(tmp_path, "d-ok", "train")
    bad = tmp_path / "train" / "d-broken"
    bad.mkdir(parents=True)
    (bad / "rtjob-run.json").write_text("{broken")
    broken = create_app(Config(storage=str(tmp_path), lookup_root=str(tmp_path), endpoint=None, host="127.0.0.1",
                               port=PORT, token=None))
    (tmp_path / "rtjob-index").rename(tmp_path / "no-index")  # listed by the records: the broken one is read too
    status, _, html = call(broken, "/")
    assert status == 200 and "d-ok" in html and 'class="error problem"' in html


def test_compare_bounds_and_diff(app: Any) -> None:
    # u-evil's job name holds a "/": its folder is not <root>/<job>/<id>, so it is found once a listing of the
    # runs page remembered it (as a user arrives from there); listed here, the test passes in any order
    assert call(app, "/api/runs")[0] == 200
    assert call(app, "/compare?run=u-good")[0] == 400
    assert call(app, "/compare?" + "&".join(f"run=r{i}" for i in range(6)))[0] == 400
    status, _, html = call(app, "/compare?run=u-good&run=u-evil")
    assert status == 200 and 'class="differs"' in html


def test_rtjob_help_imports_no_web_stack() -> None:
    code = ("import sys; from rtjob.commands import cli; import click; "
            "assert not {'starlette', 'uvicorn', 'jinja2'} & set(sys.modules), sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_bad_flags_are_one_line_exit_2(tmp_path: Path) -> None:
    env = base_env(tmp_path)
    got = rtjob("ui", "--port", "70000", env=env, timeout=60)
    assert got.returncode == 2 and "Traceback" not in got.stderr
    got = rtjob("ui", "--host", "203.0.113.9", "--port", "0", env=env, timeout=60)  # not an address of this machine
    assert got.returncode == 2 and got.stderr.count("\n") == 1 and "cannot listen there" in got.stderr


def test_command_help_lists_the_flags() -> None:
    out = subprocess.run([*RTJOB, "ui", "--help"], capture_output=True, text=True, timeout=60).stdout
    for flag in ("--storage", "--context", "--port", "--host", "--open"):
        assert flag in out


def test_ledger_pages_newest_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rtjob.core.record import RunRecord
    from rtjob.runs.memory import ledger

    monkeypatch.setenv("RTJOB_HOME", str(tmp_path))
    ledger().save_many(RunRecord(id=f"p-{n:03d}", job="train" if n % 2 else "eval", backend="local",
                                 status="SUCCEEDED", start_time=f"2026-11-01T00:{n // 60:02d}:{n % 60:02d}+00:00")
                       for n in range(120))
    here = create_app(Config(storage=None, lookup_root=None, endpoint=None, host="127.0.0.1", port=PORT, token=None))
    first = json.loads(call(here, "/api/runs")[2])
    assert (first["total"], first["pages"], first["runs"][0]["id"], len(first["runs"])) == (120, 3, "p-119", 50)
    last = json.loads(call(here, "/api/runs?page=3")[2])
    assert [r["id"] for r in last["runs"]][-1] == "p-000" and len(last["runs"]) == 20
    evals = json.loads(call(here, "/api/runs?job=eval&page=2")[2])
    assert evals["total"] == 60 and evals["runs"][0]["id"] == "p-018"
    _, _, html = call(here, "/?page=2")
    assert "page 2 of 3" in html and "older →" in html and "← newer" in html


def test_on_every_interface_the_printed_token_is_the_key(tmp_path: Path) -> None:
    """`rtjob ui --host 0.0.0.0`: a token generated and printed once (stderr), required on every request whatever
    Host name reached the machine; the server stopped by its pid."""
    import http.client
    import re
    import time

    log = tmp_path / "ui.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([*RTJOB, "ui", "--host", "0.0.0.0", "--port", "0"], env=base_env(tmp_path),
                                stdout=out, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 30
        while not re.search(r"token .*: (\S+)\n", log.read_text()):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        text = log.read_text()
        port = re.search(r"http://0\.0\.0\.0:(\d+)/", text).group(1)  # type: ignore[union-attr]
        token = re.search(r"token .*: (\S+)\n", text).group(1)  # type: ignore[union-attr]
        assert text.count(token) == 1

        def get(headers: dict[str, str]) -> int:
            conn = http.client.HTTPConnection("127.0.0.1", int(port), timeout=30)
            conn.request("GET", "/api/runs", headers={"Host": f"build-box.lan:{port}", **headers})
            status = conn.getresponse().status
            conn.close()
            return status

        assert get({}) == 401 and get({"X-Rtjob-Token": "nope"}) == 401 and get({"X-Rtjob-Token": token}) == 200
    finally:
        proc.terminate()
        proc.wait(10)


def test_without_its_chart_library_ui_says_what_it_lacks_in_one_line(tmp_path: Path, monkeypatch, capsys) -> None:
    """A wheel built without npm holds no chart library (the vendor folder is git-ignored): `rtjob ui` exits 2 with
    one line naming the missing files and how to add them, before it listens anywhere."""
    import rtjob.ui
    from support.cli import in_process

    monkeypatch.setattr(rtjob.ui, "VENDOR", tmp_path / "vendor")  # where a clean clone's build has nothing
    proc = in_process(capsys, "ui", "--port", "0")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and not proc.stdout, proc
    assert "uPlot.iife.min.js, uPlot.min.css" in proc.stderr and "make ui-assets" in proc.stderr, proc.stderr
    assert "serving" not in proc.stderr


def test_live_rows_summary_and_bad_queries(root: Path, app: Any) -> None:
    """The run page's poll: status, the last step, the step and system rows after those already shown (a row still
    being written left for the next poll); every bad query a 400, never a 500."""
    from rtjob.storage.opening import objects_for
    from support.ui_runs import jsonl, step_rows, system_rows

    import rtjob_contract as contract

    live = write_run(root, "u-live", "train", status="RUNNING", epochs=1, step_rows=step_rows(0, 40),
                     system_rows=system_rows(2))
    status, _, text = call(app, "/api/runs/u-live/live")
    got = json.loads(text)
    assert status == 200 and got["status"] == "RUNNING" and not got["ended"] and got["step"] == 40
    assert got["steps_n"] == 5 and len(got["steps"]) == 5 and got["system_n"] == 2 and got["epoch_charts"]
    assert live.storage_uri is not None
    with objects_for(live.storage_uri) as objects:  # one more row, and half of the next one
        objects.put(contract.STEP_METRICS_FILE, jsonl(step_rows(0, 50)) + b'{"step": 60, "lo')
    got = json.loads(call(app, "/api/runs/u-live/live?steps=5&system=2")[2])
    assert [r["step"] for r in got["steps"]] == [50] and got["steps_n"] == 6 and got["system"] == []
    got = json.loads(call(app, "/api/runs/u-live/live?steps=6&system=2")[2])  # nothing new: still the last step
    assert got["steps"] == [] and got["step"] == 50 and got["start_time"] == "2026-11-20T10:00:00Z", got
    assert json.loads(call(app, "/api/runs/u-good/live")[2])["ended"] is True
    for path in ("/api/runs/u-live/live?steps=-1", "/api/runs/u-live/live?system=%C2%B2", "/runs/u-good/log/find",
                 "/runs/u-good/log/find?q=a&context=99", "/?cols=nothing", "/?page=%C2%B2", "/api/runs?page=x",
                 "/compare?run=u-good"):
        assert call(app, path)[0] == 400, path
    assert call(app, "/runs/u-good/log?lines=%C2%B2")[0] == 200  # a line count that is no number: the default
    assert call(app, "/runs/nope/log/find?q=a")[0] == 404
    status, headers, _ = call(app, "/favicon.ico")
    assert status == 200 and headers["content-type"] == "image/svg+xml"


def test_log_search_page_and_download(app: Any) -> None:
    status, _, html = call(app, "/runs/u-good/log/find?q=DONE&context=1")
    assert status == 200 and "<mark>done</mark>" in html and SECRET not in html and "1 matching line(s)" in html
    status, headers, text = call(app, "/runs/u-good/log?all=1&download=1")
    assert status == 200 and headers["content-disposition"] == 'attachment; filename="u-good.log"' and "done" in text
    status, headers, _ = call(app, "/?colsform=1&c=args.epochs&c=metric.val_loss&user=bob")
    assert status == 303 and headers["location"] == "/?user=bob&cols=args.epochs%2Cmetric.val_loss"


def test_log_lines_as_a_terminal_leaves_them_and_search_context(root: Path) -> None:
    from rtjob.runs.logview import terminal_line
    from rtjob.ui import logs

    assert terminal_line("\x1b[36m(RayTrainWorker pid=1)\x1b[0m ok\r") == "(RayTrainWorker pid=1) ok"
    assert terminal_line("  0%|  | 0/9\r 50%|# | 4/9\r100%|##| 9/9") == "100%|##| 9/9"
    assert logs.marked("a Bad bad", "bad") == [("a ", False), ("Bad", True), (" ", False), ("bad", True)]
    lines = [f"line {n}" + (" hit" if n in (3, 5, 12) else "") for n in range(1, 16)]
    record = write_run(root, "u-search", "train", log_lines=lines)
    groups = logs.log_matches(record, "HIT", context=1)
    # 3 and 5 share their context (2..6), 12 stands alone (11..13)
    assert [[line["n"] for line in group] for group in groups] == [[2, 3, 4, 5, 6], [11, 12, 13]]
    assert [line["n"] for group in groups for line in group if line["match"]] == [3, 5, 12]


def test_search_matches_tags_and_description_of_index_rows() -> None:
    from rtjob.storage.run_filter import matches as _matches

    row = {"id": "r1", "job": "train", "tags": {"team": "ויז'ן", "goal": "🚀 faster"}, "description": "baseline run"}
    assert _matches(row, "ויז") and _matches(row, "🚀") and _matches(row, "BASELINE") and _matches(row, "team=")
    assert not _matches(row, "nowhere") and not _matches({"id": "r2", "tags": None}, "team")


def test_a_retried_run_and_a_pipeline_tell_the_story_rtjob_status_and_show_tell(
        root: Path, app: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """The run page, its card, its live poll and its JSON answer from runs/view (its read-only variant): a retried
    run whose record was written before its retry's end was seen is the retry's SUCCEEDED, with both attempts, as
    `rtjob status` says; a pipeline's steps are their runs' stories, as `rtjob show` lists them."""
    from rtjob.runs.memory import remember
    from support.cli import main_captured
    from support.planted import plant_record

    retried = write_run(root, "u-retried", "train", status="FAILED")
    retried.exit_code, retried.message = 137, "killed"
    retried.attempts = [{"id": "u-retried", "attempt": 1, "status": "FAILED", "exit_code": 137,
                         "retry_reason": "the driver was killed"},
                        {"id": "u-retried-retry1", "attempt": 2, "status": "SUCCEEDED", "exit_code": 0}]
    assert retried.storage_uri is not None
    plant_record(retried.storage_uri, retried, None)
    remember(retried)  # as `rtjob runs --storage` leaves it: `rtjob status` finds it with the cluster down
    code, out, err = main_captured(capsys, "status", "u-retried", "--backend", "local", "-o", "json")
    assert code == 0, err
    told = json.loads(out)
    assert told["status"] == "SUCCEEDED" and len(told["attempts"]) == 2, told
    code, out, err = main_captured(capsys, "runs")
    row = next(line for line in out.splitlines() if line.startswith("u-retried"))
    assert code == 0 and "(2 attempts)" in row, out + err  # as `list` and the UI's list say it (the status: verdict's)
    live = json.loads(call(app, "/api/runs/u-retried/live")[2])
    assert (live["status"], live["ended"], live["attempts"], live["exit_code"]) == ("SUCCEEDED", True, 2, 0)
    assert live["message"] == told["message"]
    as_json = json.loads(call(app, "/api/runs/u-retried")[2])
    assert (as_json["status"], as_json["exit_code"], len(as_json["attempts"])) == ("SUCCEEDED", 0, 2)
    _, headers, card = call(app, "/runs/u-retried/card")
    assert headers["x-run-ended"] == "1" and ">SUCCEEDED<" in card and "2 attempt(s)" in card
    assert "(exit 0)" in card and "(exit 137)" not in card.split('id="attempts"')[0]  # the verdict's, not the record's
    assert ">SUCCEEDED<" in call(app, "/runs/u-retried")[2]
    compared = call(app, "/compare?run=u-retried&run=u-retried")[2]
    assert 'status-succeeded">SUCCEEDED</span>' in compared and ">FAILED<" not in compared  # the verdict's status

    write_run(root, "u-step-a", "prep", log_lines=["the prep step says hi"])
    write_run(root, "u-pipe", "flow", steps=[{"name": "prep", "run_id": "u-step-a"},
                                             {"name": "train", "run_id": "u-retried",
                                              "storage_uri": retried.storage_uri}])
    code, out, err = main_captured(capsys, "show", "u-pipe", "--storage", str(root), "-o", "json")
    assert code == 0, err
    shown = {step["name"]: step["status"] for step in json.loads(out)["steps"]}
    assert shown == {"prep": "SUCCEEDED", "train": "SUCCEEDED"}, shown
    code, out, err = main_captured(capsys, "show", "u-pipe", "--storage", str(root))
    assert code == 0, err
    assert "run dir:" not in out and "timeline:" not in out, out  # a pipeline runs no script: neither is its
    assert "started:     2026-11-20T10:00:00Z" in out and "duration:    5m00s" in out, out
    status, _, log = call(app, "/runs/u-pipe/log")
    assert status == 200 and "== step prep: u-step-a ==\nthe prep step says hi" in log, log
    assert "== step train: u-retried ==" in log, log  # its steps' logs, as `rtjob logs PIPE` prints them
    pipe_card = call(app, "/runs/u-pipe/card")[2]
    assert '<span id="duration">after 5 min 00 s</span>' in pipe_card, pipe_card  # as `show` says it
    page = call(app, "/runs/u-pipe")[2]
    for name, status in shown.items():
        assert f"<b>{name}</b><br><span class=\"status\">{status}</span>" in page, page


def test_outputs_not_stored_read_the_same_in_the_ui_and_in_rtjob_status(
        root: Path, app: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """A run whose node kept its outputs: the card says "not stored" with the folder and `rtjob sync`, the live poll
    and the JSON carry the record's outputs, as `rtjob status -o json` does."""
    from rtjob.runs.memory import remember
    from support.cli import main_captured
    from support.planted import plant_record

    kept = write_run(root, "u-kept", "train")
    kept.outputs = {"complete": False, "not_stored": 3, "kept_at": "node-a:/tmp/rtjob-run-dirs-0/u-kept"}
    assert kept.storage_uri is not None
    plant_record(kept.storage_uri, kept, None)
    remember(kept)
    code, out, err = main_captured(capsys, "status", "u-kept", "--backend", "local", "-o", "json")
    assert code == 0, err
    assert json.loads(out)["outputs"] == kept.outputs
    card = call(app, "/runs/u-kept/card")[2]
    assert "not stored" in card and "3 file(s)" in card and "node-a:/tmp/rtjob-run-dirs-0/u-kept" in card
    assert "rtjob sync u-kept" in card
    assert json.loads(call(app, "/api/runs/u-kept/live")[2])["outputs"] == kept.outputs


def test_the_card_and_the_api_say_an_end_in_rtjobs_words_and_every_time_in_one_format(root: Path, app: Any) -> None:
    """A failed run's card, list row and API: its one line in rtjob's words (no Ray sentence, no wrapper line, no log
    tail); a running run's card keeps no PENDING text of Ray's; every time UTC to the second with a Z."""
    from support.planted import plant_record

    failed = write_run(root, "u-words", "train", status="FAILED", start="2026-11-20T10:00:00.737+00:00")
    failed.message = ("Job entrypoint command failed with exit code 3, last available logs (truncated to 20,000 "
                      "chars):\nRunning entrypoint for job u-words: python -m rtjob.runside.companion x\nboom\n")
    failed.last_seen = "2026-11-20T10:04:59.123+00:00"
    failed.timelines = {"u-words": {"submitted": "2026-11-20T10:00:00.737+00:00"}}  # each attempt's, kept to the ms
    assert failed.storage_uri is not None
    plant_record(failed.storage_uri, failed, None)
    card = call(app, "/runs/u-words/card")[2]
    assert '<span class="message">the entrypoint exited with code 3</span>' in card, card
    assert "rtjob.runside.companion" not in card and "boom" not in card and "+00:00<" not in card
    assert 'title="2026-11-20T10:00:00Z"' in card and "last seen <time" in card and ">2026-11-20T10:04:59Z<" in card
    as_json = json.loads(call(app, "/api/runs/u-words")[2])
    assert as_json["message"] == "the entrypoint exited with code 3"
    assert (as_json["start_time"], as_json["end_time"], as_json["last_seen"]) == (
        "2026-11-20T10:00:00Z", "2026-11-20T10:05:00Z", "2026-11-20T10:04:59Z"), as_json
    assert set(as_json["timeline"].values()) == {"2026-11-20T10:00:00Z"}
    assert as_json["timelines"]["u-words"]["submitted"] == "2026-11-20T10:00:00Z"
    assert all(when.endswith(":00Z") for when in as_json["timelines"]["u-words"].values()), as_json["timelines"]

    running = write_run(root, "u-pending-words", "train", status="RUNNING", epochs=1)
    running.message = "Job has not started yet. It may be waiting for the runtime environment to be set up."
    assert running.storage_uri is not None
    plant_record(running.storage_uri, running, None)
    assert "not started" not in call(app, "/runs/u-pending-words/card")[2]
    assert json.loads(call(app, "/api/runs/u-pending-words/live")[2])["message"] is None


def test_a_pipeline_without_times_of_its_own_has_its_steps_start_end_and_duration() -> None:
    import datetime as dt

    from rtjob.core.model import RunInfo, RunStatus
    from rtjob.core.pipeline_verdict import pipeline_verdict
    from rtjob.core.record import RunRecord

    def run(status: RunStatus, start: str | None, end: str | None) -> RunInfo:
        return RunInfo(id="s", job="flow", backend="local", status=status, start_time=start, end_time=end)

    now = dt.datetime(2026, 11, 20, 10, 5, tzinfo=dt.timezone.utc)
    steps = [("a", run(RunStatus.SUCCEEDED, "2026-11-20T10:00:00+00:00", "2026-11-20T10:01:00+00:00")),
             ("b", run(RunStatus.SUCCEEDED, "2026-11-20T10:01:05+00:00", "2026-11-20T10:03:00+00:00"))]
    pipeline = RunRecord(id="p", job="flow", backend="local", status="SUCCEEDED", steps=[{"name": "a"}, {"name": "b"}])
    ended = pipeline_verdict(pipeline, steps, now)
    assert (ended.started, ended.ended, ended.duration_s) == ("2026-11-20T10:00:00+00:00",
                                                              "2026-11-20T10:03:00+00:00", 180.0)
    pipeline.status = "RUNNING"
    running = pipeline_verdict(pipeline, [steps[0], ("b", run(RunStatus.RUNNING, steps[1][1].start_time, None))], now)
    assert (running.status, running.started, running.ended, running.duration_s) == (
        RunStatus.RUNNING, "2026-11-20T10:00:00+00:00", None, 300.0)  # not ended: no end yet, counting up


def test_the_card_links_the_mlflow_and_wandb_runs_that_mirror_it(root: Path, app: Any) -> None:
    """The record's ``tracking`` (runside/tracking/) on the run's card: the MLflow run's address, and what did not
    reach it with the command that sends it (as `rtjob status` says: runs/tracking_view.py)."""
    from support.planted import plant_record

    url = "http://127.0.0.1:5000/#/experiments/1/runs/abc123"
    record = write_run(root, "u-mirrored", "train")
    record.tracking = {"mlflow": {"tracking_uri": "http://127.0.0.1:5000", "experiment": "team", "url": url,
                                  "unsent": 3, "resend": "rtjob track resend u-mirrored"}, "at": "2026-12-02T10:00:00Z",
                       "wandb": {"project": "p", "url": "javascript:alert(1)", "dir": "/n/wandb/offline-run-1",
                                 "fault": "W&B did not finish within 10s", "resend": "wandb sync /n/wandb/offline-run-1"}}
    assert record.storage_uri is not None
    plant_record(record.storage_uri, record, None)
    card = call(app, "/runs/u-mirrored/card")[2]
    assert f'<a href="{url}" rel="noreferrer">{url}</a>' in card, card
    assert "3 metric(s) not sent: <code>rtjob track resend u-mirrored</code>" in card, card
    assert "offline: <code>/n/wandb/offline-run-1</code> · W&amp;B did not finish within 10s: <code>wandb sync " in card
    assert "javascript:" not in card  # only an https address is a link
    assert 'id="mlflow"' not in call(app, "/runs/u-good/card")[2]  # a run not mirrored has no such line


UI_SEALED = plant("ui-sealed-env-value-5a4b3c2d")  # an env: secret the client seals
UI_ARG = plant("ui-secret-arg-value-8d7c6b5a")  # a secret arg (secret by its name)
UI_AWS_SECRET = plant("ui-forwarded-aws-secret-3f2e1d0c")  # --forward-aws-credentials: the client's AWS secret key
UI_HOOK = plant("https://hooks.example.com/services/ui-hook-token-9a8b7c")  # a notify target's URL (a secret)


def test_a_secrets_run_shows_no_value_on_any_page_or_in_the_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 45: a job with `secrets:` (an env: value the client seals, an aws-sm reference), a secret arg, the
    client's AWS credentials forwarded and a notify webhook, planned as submit plans it; its record as the client writes it, its log as the companion wrote it (through its
    redactor). `rtjob ui`, which never learned either value, shows neither on the runs page, the run's page and
    card, its log, the log's search and find, compare, or the API (the references are shown)."""
    from rtjob.core.model import RunInfo, RunStatus
    from rtjob.jobspec.project import load_settings
    from rtjob.jobspec.resolve import Overrides
    from rtjob.runs.records import new_record
    from rtjob.runs.runner import plan

    project = tmp_path / "project"
    (project / "jobs").mkdir(parents=True)
    (project / "jobs" / "tok.yaml").write_text(
        f"name: tok\nentrypoint: python tok.py\nargs:\n  api_token: {UI_ARG}\n"
        "secrets:\n  HF_TOKEN: env:UI_SEALED\n  DB_PASSWORD: aws-sm://team/db#password\n"
        "notify:\n  on: [failed]\n  targets:\n    - type: webhook\n      url: {env: UI_HOOK}\n")
    (project / "pyproject.toml").write_text("[tool.rtjob]\n")
    for name, value in {"RTJOB_HOME": tmp_path / "rtjob-home", "HOME": tmp_path / "home",
                        "XDG_CONFIG_HOME": tmp_path / "xdg", "UI_SEALED": UI_SEALED, "UI_HOOK": UI_HOOK,
                        "AWS_ACCESS_KEY_ID": "AKIAUIFORWARDED00001", "AWS_SECRET_ACCESS_KEY": UI_AWS_SECRET}.items():
        monkeypatch.setenv(name, str(value))
    monkeypatch.chdir(project)
    planned = plan("tok", load_settings({"backend": "ray", "address": "http://127.0.0.1:9"}, root=project),
                   Overrides(submission_id="u-secrets", forward_aws_credentials=True))
    assert getattr(planned.request, "sealed", None) == {"HF_TOKEN": UI_SEALED}
    sealed_env = getattr(planned.request, "sealed_env", {})
    assert UI_AWS_SECRET in sealed_env.values() and UI_HOOK in sealed_env.values(), sealed_env  # client-held
    made = new_record(planned, RunInfo(id="u-secrets", job="tok", backend="ray", status=RunStatus.SUCCEEDED))
    REDACTOR.add([UI_SEALED, UI_ARG])  # the companion's redactor, as it masked the run's log
    lines = [REDACTOR.text(f"printing {UI_SEALED} and {UI_ARG}"), "done"]
    REDACTOR.clear()  # the UI's own process never learned the values
    storage = tmp_path / "storage"
    write_run(storage, "u-secrets", "tok", log_lines=lines, request=made.request, document=made.spec.get("document"))
    write_run(storage, "u-other", "tok")
    app = create_app(Config(storage=str(storage), lookup_root=str(storage), endpoint=None, host="127.0.0.1",
                            port=PORT, token=None))
    shown = {}
    for path in ("/", "/?q=tok", "/api/runs", "/api/runs/u-secrets", "/runs/u-secrets", "/runs/u-secrets/card",
                 "/runs/u-secrets/log", "/runs/u-secrets/log/search?q=printing", "/runs/u-secrets/log/find?q=printing",
                 "/compare?run=u-secrets&run=u-other"):
        status, _, text = call(app, path)
        assert status == 200, (path, status, text[:300])
        shown[path] = text
    for path, text in shown.items():
        leaked = [value for value in (UI_SEALED, UI_ARG, UI_AWS_SECRET, UI_HOOK) if value in text]
        assert not leaked, (path, leaked)
    assert "printing **** and ****" in shown["/runs/u-secrets/log"]
    assert "aws-sm://team/db#password" in shown["/api/runs/u-secrets"]  # the reference, never its value


def test_a_queued_run_shows_its_position_in_the_runs_table_and_its_queue_has_a_page(tmp_path: Path) -> None:
    """QUEUED with its position (#N) and its one line in the runs table, a link to the queue's page, which lists the
    queue in order as `rtjob queue` does (its storage the one the run's record names, never one from the URL)."""
    from rtjob.core.lifecycle import Queued, apply
    from rtjob.core.record import RunRecord
    from rtjob.jobspec.queues import QueueSettings
    from rtjob.queue import client, lease
    from rtjob.queue.format import STATE, Entry, Shape, State
    from rtjob.storage.index_entries import write_entry
    from support.planted import plant_record

    ref = client.QueueRef.of(QueueSettings(name="team"), str(tmp_path))
    state = State("team")
    for n, (run_id, priority) in enumerate([("q-first", 5), ("q-second", 0)]):
        record = apply(RunRecord(id=run_id, job="train", backend="ray", storage_uri=str(tmp_path / "train" / run_id),
                                 user="alice"), Queued({"name": "team", "priority": priority, "storage": str(tmp_path)}))
        assert record.storage_uri is not None
        plant_record(record.storage_uri, record, None)
        write_entry(str(tmp_path), None, record)
        client.enqueue(ref, run_id, {"submission_id": run_id}, Shape(), user="alice", job="train", priority=priority)
        state.entries.append(Entry(run_id=run_id, priority=priority, user="alice", job="train",
                                          enqueued_at=1.0 + n, arrival=n, shape=Shape(), intent=f"enqueue-{run_id}.json",
                                          reason="needs 2 × 1 GPU, 1 free"))
    with ref.objects() as objects:
        objects.put(STATE, state.to_bytes())
        assert lease.take(objects, "rtjob-keeper-team-1") is not None  # its keeper holds the lease: QUEUED, not lost
    app = create_app(Config(storage=str(tmp_path), lookup_root=str(tmp_path), endpoint=None, host="127.0.0.1",
                            port=PORT, token=None))
    status, _, page = call(app, "/?status=QUEUED")
    assert status == 200, page
    assert page.count("status badge\">QUEUED") == 2 and "#1" in page and "#2" in page
    assert "position 1 of 2 in team: needs 2 × 1 GPU, 1 free" in page
    assert 'href="/queues/team?run=q-first"' in page
    status, _, queue_page = call(app, "/queues/team?run=q-first")
    assert status == 200, queue_page
    assert queue_page.index("q-first") < queue_page.index("q-second") and "needs 2 × 1 GPU, 1 free" in queue_page
    assert call(app, "/queues/hold")[0] == 400  # a word of `rtjob queue`, not a queue's name
