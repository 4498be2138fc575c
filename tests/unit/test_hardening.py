"""Hardening without a cluster: the redaction boundary (property-based), exit codes CI can trust (70 for
rtjob's own failures), and a dashboard address that answers wrongly (HTML, wrong shapes, 502s, every id).

The misbehaving servers are real HTTP servers on loopback (tests/support/http_faults.py): they stand in for
what really sits at a wrong address, an auth proxy's sign-in page or a broken gateway."""

from __future__ import annotations

import ast
import json
import string
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from rtjob.core.errors import BadInput, RtjobError
from rtjob.core.redact import MASK, Redactor, is_secret, is_secret_name, mask_command, secret_arg_values
from rtjob.jobspec.overrides import MAX_DURATION_DAYS, parse_duration, parse_env, parse_headers, parse_set
from rtjob.jobspec.schema import validate_job
from rtjob.jobspec.yamlsrc import parse_yaml
from support.cli import REPO, base_env, plant, record, run_in_process
from support.http_faults import HTML, StandIn, json_body

RTJOB = [sys.executable, "-m", "rtjob.main"]
# Derandomized: the same examples on every run (CI must be deterministic), still 100 of them per property.
FAST = settings(max_examples=100, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
SECRET_CHARS = string.ascii_letters + string.digits + "/+=#@!%-_.~"
secrets_st = st.text(SECRET_CHARS, min_size=6, max_size=40).filter(lambda s: s.strip() == s and s[0].isalnum()
                                                                  and s[-1].isalnum())
words_st = st.lists(st.text(string.ascii_letters + string.digits + ".,:;()[]'\"", min_size=0, max_size=12),
                    max_size=20)


# -- the redactor ----------------------------------------------------------------------------------------------

@FAST
@given(secret=secrets_st, before=words_st, after=words_st, glue=st.sampled_from([" ", "=", ": ", "'", '"', "\n",
                                                                                 "(", ", "]))
def test_a_known_secret_never_survives_as_a_token(secret: str, before: list[str], after: list[str], glue: str) -> None:
    redactor = Redactor()
    redactor.add([secret])
    text = " ".join(before) + glue + secret + glue + " ".join(after)
    out = redactor.text(text)
    assert secret not in out.replace(MASK, " ")


cells_st = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=30),
                     words_st.map(" ".join))


@FAST
@given(secret=secrets_st, rows=st.lists(st.dictionaries(st.text(max_size=8), st.one_of(
    cells_st, st.dictionaries(st.text(max_size=8), cells_st, max_size=4)), max_size=5), min_size=1, max_size=4),
    at=st.integers(0, 3))
def test_a_listing_is_redacted_row_by_row_as_any_data_is(secret: str, rows: list[dict], at: int) -> None:
    """rows() (the listing fast path: a row's verdict nested one level) gives what data() gives, a secret masked."""
    redactor = Redactor()
    redactor.add([secret])
    rows[at % len(rows)]["planted"] = {"line": f"token {secret} used"}
    assert redactor.rows(rows) == redactor.data(rows)
    assert secret not in json.dumps(redactor.rows(rows))


@FAST
@given(text=st.text(max_size=300), short=st.lists(st.text(min_size=1, max_size=5), max_size=5))
def test_short_values_are_never_hunted_in_free_text(text: str, short: list[str]) -> None:
    """`false`, `1`, `alice`: structured fields mask them, free text never does (no '****' out of a word)."""
    redactor = Redactor()
    redactor.add(short)
    assert redactor.text(text) == Redactor().text(text)


@FAST
@given(name=st.text(max_size=40), value=st.text(max_size=60), text=st.text(max_size=200))
def test_redaction_never_raises(name: str, value: str, text: str) -> None:
    is_secret(name, value)
    is_secret_name(name)
    mask_command(text)
    secret_arg_values(text)
    redactor = Redactor()
    redactor.add([value])
    redactor.data({"a": [text, {name: value}]})


def test_ordinary_words_are_not_masked_and_secret_words_are() -> None:
    redactor = Redactor()
    redactor.add_mapping({"TOKENIZERS_PARALLELISM": "false", "AUTHOR": "alice", "SORT_KEY": "created_at_desc",
                          "DB_PASSWORD": "false-but-long-pw", "MYSQL_PWD": "hunter22"})
    text = "--tag falsetto false alice created_at_desc TOKENIZERS_PARALLELISM=false pw=hunter22 x=false-but-long-pw"
    assert redactor.text(text) == (f"--tag falsetto false alice created_at_desc TOKENIZERS_PARALLELISM=false "
                                   f"pw={MASK} x={MASK}")


def test_hugging_face_words_and_identifiers_are_not_masked() -> None:
    text = ("hf_sft hf_token_path shelf_life rtjob_training.hf hf_ HF_HUB_OFFLINE=1 my_hf_tokenizer "
            "training/hf_sft.py --model hf-internal-testing/tiny-random-gpt2 load_hf_dataset_from_the_hub_cache_dir "
            "x_hf_abcdefghijklmnopqrstuvwxyzabcdefgh hf_abcdefghijklmnopqrstuvwxyz_path")
    assert Redactor().text(text) == text


@FAST
@given(words=st.lists(st.text(string.ascii_letters + string.digits, min_size=1, max_size=29), min_size=1, max_size=5),
       before=st.sampled_from(["", " ", "=", "'", "(", "/"]))
def test_hf_identifiers_are_never_masked(words: list[str], before: str) -> None:
    """`hf_` then words of under 30 characters joined by `_` (every identifier, module or flag name): kept."""
    text = f"x{before}hf_{'_'.join(words)} y"
    assert Redactor().text(text) == text


@pytest.mark.parametrize("text,hidden", [
    ("DATABASE_URL=postgres://app:p@ss/w#rd@db.internal:5432/prod", "p@ss/w#rd"),
    ("SENTRY_DSN=https://abcdef0123456789@o1.ingest.sentry.io/5", None),
    ("key sk-" + "A" * 30 + " end", "sk-" + "A" * 30),
    ("gh ghp_" + "b" * 36, "ghp_" + "b" * 36),
    ("gh github_pat_" + "c" * 40, "github_pat_" + "c" * 40),
    ("slack xoxb-1234567890-abcdef", "xoxb-1234567890-abcdef"),
    ("aws AKIAIOSFODNN7EXAMPLE and ASIAIOSFODNN7EXAMPLE", "IOSFODNN7EXAMPLE"),
    ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.sig", "eyJzdWIiOiIxMjM0NTY3ODkwIn0"),
    ("Authorization: Bearer abc.def-ghi_jkl", "abc.def-ghi_jkl"),
    ("HF_TOKEN=hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh printed", "AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh"),
    ("token: 'hf_" + "abcdefghijklmnopqrstuvwxyzabcdefgh'", "abcdefghijklmnopqrstuvwxyzabcdefgh"),
])
def test_secret_shapes_are_masked_in_free_text_whatever_their_name(text: str, hidden: str | None) -> None:
    out = Redactor().text(text)
    assert MASK in out
    if hidden:
        assert hidden not in out


def test_secret_args_are_masked_whole_however_short_quoted_or_listed() -> None:
    command = ("timeout -k 30 60 bash -c 'python train.py --api-key abc --tokens t0k1 t0k2 --password "
               "'\"'\"'it is:#@/'\"'\"' --epochs 5 --lr 0.1'")
    masked = mask_command(command)
    for value in ("abc", "t0k1", "t0k2", "it is:#@/"):
        assert value not in masked.replace("--api-key", "").replace("--tokens", "")
    assert "--epochs 5 --lr 0.1" in masked


# -- parsers: bad input is BadInput, never another exception, never the value ---------------------------------

@FAST
@given(items=st.lists(st.text(max_size=40), max_size=4))
def test_overrides_raise_bad_input_or_parse(items: list[str]) -> None:
    for parse in (parse_set, parse_env, parse_headers):
        try:
            parse(items)
        except BadInput as exc:
            assert "\n" not in exc.message


@FAST
@given(text=st.one_of(st.text(max_size=30), st.from_regex(r"\A\s?\d{1,400}(\.\d{1,30})?\s?(ms|s|sec|m|min|h|hr|d)?\Z")))
def test_durations_are_bounded_seconds_or_one_line_of_bad_input(text: str) -> None:
    """Every duration option (--since, --older-than, --timeout, the UI's since) parses here: what it accepts is
    a number of seconds every caller can add to a date or wait on; anything else is one line of bad input."""
    import datetime as dt
    import threading

    try:
        seconds = parse_duration(text, "--since")
    except BadInput as exc:
        assert "\n" not in exc.message and exc.message.startswith("--since ")
        return
    assert 0 < seconds <= MAX_DURATION_DAYS * 86400 < threading.TIMEOUT_MAX
    assert dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=seconds)


@FAST
@given(key=st.text(string.ascii_letters + "._", min_size=1, max_size=20), secret=secrets_st)
def test_override_errors_never_echo_the_value(key: str, secret: str) -> None:
    assume(secret not in key)
    # Hypothesis also draws string constants from the loaded modules (e.g. "expect"): a secret may be part of the
    # message's own words, so it must occur no more often than in the message for another value.
    neutral = "Qz7Qz7Qz7"
    for parse, item in ((parse_set, f"{key}..x={{}}"), (parse_env, f"{key} {{}}"), (parse_headers, f"{key} {{}}")):
        try:
            parse([item.format(secret)])
        except BadInput as exc:
            try:
                parse([item.format(neutral)])
                baseline = ""
            except BadInput as other:
                baseline = other.message
            assert exc.message.count(secret) <= baseline.count(secret)


@FAST
@given(text=st.text(max_size=400))
def test_spec_loading_raises_bad_input_or_validates(text: str) -> None:
    try:
        validate_job(parse_yaml(text, "j.yaml"))
    except BadInput as exc:
        assert "\n" not in exc.message and exc.message.startswith("j.yaml")


@FAST
@given(yaml_text=st.text(max_size=120), secret=secrets_st)
def test_schema_errors_never_echo_a_value(yaml_text: str, secret: str) -> None:
    for field in ("nodes", "max_retries", "strategy", "name", "timeout_s", "storage_endpoint"):
        try:
            validate_job(parse_yaml(f"name: x\nentrypoint: y\n{field}: {json.dumps(secret)}\n", "j.yaml"))
        except RtjobError as exc:
            assert secret not in exc.message


@FAST
@given(key=st.text(max_size=80))
def test_key_sanitizing_never_raises_and_keeps_every_accepted_key_inside_the_destination(key: str) -> None:
    """Any storage key: refused with a reason, or a relative path that stays inside DIR."""
    import posixpath

    from rtjob.storage.keys import unsafe_reason

    reason = unsafe_reason(key)
    if reason is None:
        assert key and not key.startswith("/") and "\\" not in key
        normal = posixpath.normpath(key)
        assert normal == key and not normal.startswith("..") and normal != "."


# -- one boundary: commands print only through printing.py ----------------------------------------------------

def test_commands_print_only_through_the_redacting_helpers() -> None:
    """click.echo, print, sys.stdout/stderr.write or a rich Console anywhere in commands/ but printing.py
    would bypass the redactor."""
    found = []
    for path in sorted((REPO / "cli" / "rtjob" / "commands").glob("*.py")):
        if path.name == "printing.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            name = ast.unparse(node.func)
            if name in ("print", "click.echo", "click.secho", "sys.stdout.write", "sys.stderr.write", "Console"):
                found.append(f"{path.name}:{node.lineno}: {name}")
    assert not found, "\n".join(found)


# -- exit codes CI can trust ----------------------------------------------------------------------------------

def _run(args: list[str], env: dict[str, str], cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    """A real process: for what only a process shows (its environment at start, a thread left hanging, a CLI
    changed before it starts); the rest runs the CLI in this process (run_in_process), a second faster each."""
    proc = subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=60)
    record(proc.stdout, proc.stderr)
    return proc


def test_an_internal_error_exits_70_with_one_line_and_a_saved_redacted_traceback(tmp_path: Path) -> None:
    """A bug in rtjob (here: a command that raises ValueError, added to the real CLI) is not "the job
    failed": exit 70, one line that says where the traceback went; the client's secrets are not in either."""
    secret = plant("aws-secret-canary-0123456789")
    script = ("import rtjob.commands as c\n"
              "@c.cli.command('boom')\n"
              "def boom():\n"
              f"    raise ValueError('went wrong near {secret}')\n"
              "c.main()\n")
    env = base_env(tmp_path / "home", AWS_SECRET_ACCESS_KEY=secret)
    proc = _run([sys.executable, "-c", script, "boom"], env)
    assert proc.returncode == 70, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rtjob: internal error") and "ValueError" in lines[0], lines
    assert "Traceback" not in proc.stderr and secret not in proc.stderr
    saved = list((tmp_path / "home" / "crash").glob("*.txt"))
    assert len(saved) == 1 and str(saved[0]) in lines[0]
    text = saved[0].read_text()
    assert "Traceback" in text and "ValueError" in text and secret not in text and MASK in text
    debug = _run([sys.executable, "-c", script, "boom"], {**env, "RTJOB_DEBUG": "1"})
    assert debug.returncode == 70 and "Traceback" in debug.stderr and secret not in debug.stderr


def test_exit_code_tables_list_70() -> None:
    help_text = run_in_process("status", "--help", env=base_env(REPO / ".rtjob-unused")).stdout
    assert "70  internal error in rtjob itself" in help_text
    table = (REPO / "docs" / "reference" / "exit-codes.md").read_text(encoding="utf-8")
    assert "| 70 |" in table


# -- a dashboard address that answers wrongly -----------------------------------------------------------------

def _job(run_id: str, **extra: object) -> dict[str, object]:
    return {"submission_id": run_id, "job_id": None, "type": "SUBMISSION", "status": "SUCCEEDED",
            "entrypoint": "python x.py", "message": "done", "start_time": 1_700_000_000_000,
            "end_time": 1_700_000_060_000, "metadata": {}, "runtime_env": {}, **extra}


ANSWERS = {
    "html-sign-in-page": ((200, "text/html; charset=utf-8", HTML), "not a Ray dashboard (the answer is text/html"),
    "json-list-not-object": ((200, "application/json", b"[1, 2]"), "unexpected answer: a JSON list"),
    "json-string": ((200, "application/json", b'"ok"'), "unexpected answer: a JSON str"),
    "bad-gateway": ((502, "text/plain", b"upstream down"), "HTTP 502"),
    "server-error": ((500, "text/plain", b"boom"), "HTTP 500"),
}


@pytest.mark.parametrize("command,name", [*(("status", name) for name in ANSWERS),
                                          ("logs", "html-sign-in-page"), ("wait", "bad-gateway"),
                                          ("stop", "json-list-not-object")])
def test_a_wrong_answer_is_one_line_exit_3(command: str, name: str, tmp_path: Path) -> None:
    answer, expect = ANSWERS[name]

    def respond(method: str, path: str) -> tuple[int, str, bytes]:
        return answer

    with StandIn(respond) as server:
        env = base_env(tmp_path / "home", RTJOB_FOLLOW_GRACE_S="2")
        proc = run_in_process(command, "some-run", "--backend", "ray", "--address", server.address, env=env)
    assert proc.returncode == 3, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert "Traceback" not in proc.stderr and lines[-1].startswith("rtjob: error: ") and expect in lines[-1], lines


def test_an_address_that_answers_404_asks_whether_it_is_the_dashboard_port(tmp_path: Path) -> None:
    with StandIn(lambda method, path: (404, "text/plain", b"404: Not Found")) as server:
        env = base_env(tmp_path / "home")
        proc = run_in_process("list", "--backend", "ray", "--address", server.address, env=env)
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].endswith(
        "HTTP 404: not a Ray dashboard (is this the dashboard port, 8265?)"), proc.stderr


@pytest.mark.parametrize("framing", [b"Content-Length: 100\r\n\r\n[1, 2", b"Transfer-Encoding: chunked\r\n\r\n4\r\n[1, ",
                                     b"Content-Encoding: gzip\r\nContent-Length: 8\r\n\r\nnot gzip"])
def test_an_answer_cut_mid_body_is_a_fault_that_may_pass(framing: bytes) -> None:
    """A proxy that cuts the connection while answering (or a body that cannot be decoded): retried while
    following (RTJOB_FOLLOW_GRACE_S), never "cannot talk to" at once."""
    import socket
    import threading

    from rtjob.backends.ray.client import RayJobsAPI, Transient

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def answer_once() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + framing)

    server = threading.Thread(target=answer_once, daemon=True)
    server.start()
    try:
        with pytest.raises(Transient, match="broke off mid-body") as caught:
            RayJobsAPI(f"http://127.0.0.1:{port}", {}).jobs()
        assert caught.value.retriable
    finally:
        server.join(timeout=10)
        listener.close()


def test_a_server_that_answers_every_id_cannot_make_status_probe_forever(tmp_path: Path) -> None:
    """Attempt ids are probed up to the run's own max_retries (+1), however many ids the server knows (each
    attempt's status; no log: `status` only reads, it never archives)."""
    def respond(method: str, path: str) -> tuple[int, str, bytes]:
        run_id = path.rsplit("/", 1)[-1]
        return 200, "application/json", json_body(_job(run_id, metadata={"rtjob.max_retries": "3"}))

    with StandIn(respond) as server:
        proc = run_in_process("status", "r1", "--backend", "ray", "--address", server.address, "-o", "json",
                              env=base_env(tmp_path / "home"))
        probes = [r for r in server.requests if "-retry" in r]
    assert proc.returncode == 0, proc.stderr
    status_probes = {p for p in probes if not p.endswith("/logs")}
    log_probes = [p for p in probes if p.endswith("/logs")]
    assert len(json.loads(proc.stdout)["attempts"]) == 4 and len(status_probes) <= 6, probes
    assert log_probes == [], probes


def test_status_of_a_run_seen_ended_asks_for_its_attempts_once(tmp_path: Path) -> None:
    """The ended run is archived with its attempts, and status prints the same attempts: one probe of each, and
    one more read of the latest attempt (its message and end are the run's: runs/view.py)."""
    def respond(method: str, path: str) -> tuple[int, str, bytes]:
        run_id = path.rsplit("/", 1)[-1]
        return 200, "application/json", json_body(_job(run_id, metadata={"rtjob.max_retries": "2"}))

    with StandIn(respond) as server:
        proc = run_in_process("status", "r1", "--backend", "ray", "--address", server.address,
                              env=base_env(tmp_path / "home"))
    assert proc.returncode == 0, proc.stderr
    assert "attempts:    3 (max_retries 2): r1 SUCCEEDED -> r1-retry1 SUCCEEDED -> r1-retry2 SUCCEEDED" in proc.stdout
    retry_probes = [r for r in server.requests if "-retry" in r and not r.endswith("/logs")]
    assert sorted(retry_probes) == ["GET /api/jobs/r1-retry1", "GET /api/jobs/r1-retry2", "GET /api/jobs/r1-retry2"], \
        server.requests


def test_the_client_environment_secrets_never_print(tmp_path: Path) -> None:
    """A server that echoes the request's Authorization header in an error body: the token stays masked."""
    token = plant("ray-token-canary-7f7f7f7f")

    def respond(method: str, path: str) -> tuple[int, str, bytes]:
        return 404, "text/plain", f"no such job; you sent Bearer {token}".encode()

    with StandIn(respond) as server:
        proc = _run([*RTJOB, "status", "r1", "--backend", "ray", "--address", server.address],
                    base_env(tmp_path / "home", RAY_AUTH_TOKEN=token))
    assert proc.returncode == 2 and token not in proc.stdout + proc.stderr, proc.stderr


def test_render_masks_tags_args_and_urls_the_same_on_ray_and_anyscale(tmp_path: Path) -> None:
    project = tmp_path / "p"
    (project / "jobs").mkdir(parents=True)
    (project / "jobs" / "j.yaml").write_text(
        "name: j\nentrypoint: python x.py\nargs:\n  api_key: k1\n  tokens: [tokA1, tokB2]\n  note: falsetto\n"
        "tags:\n  owner: alice\n  deploy_token: tagsecret9\n"
        "env_vars:\n  TOKENIZERS_PARALLELISM: 'false'\n  DATABASE_URL: postgres://u:dbpass/1@db:5432/x\n")
    env = base_env(tmp_path / "home", RTJOB_PROJECT=str(project), HOME=str(tmp_path / "user"))
    ray = ["--backend", "ray", "--address", "http://127.0.0.1:9"]
    calls = [["render", "j", *ray, "-o", "text"], ["render", "j", *ray, "-o", "json"],
             ["render", "j", "--backend", "anyscale", "-o", "json"],
             ["render", "j", "--backend", "anyscale", "-o", "yaml"],  # the file for `anyscale job submit -f`
             ["schedule", "render", "j", "--cron", "0 3 * * *"]]  # the file for `anyscale schedule apply -f`
    procs = [run_in_process(*args, env=env, cwd=project) for args in calls]
    outs = []
    for proc in procs:
        assert proc.returncode == 0, proc.stderr
        outs.append(proc.stdout + proc.stderr)
    for out in outs:
        for secret in ("--api-key k1", "tokA1", "tokB2", "tagsecret9", "dbpass/1"):
            assert secret not in out, (secret, out)
        assert "--api-key ****" in out and "--note falsetto" in out and "alice" in out and "false" in out


def _submit_stand_in(on_version: tuple[int, str, bytes], stall_s: float = 0.0) -> StandIn:
    """Answers like a Ray dashboard up to the submission (no such job yet, one node that fits), then answers
    Ray's own client (its version check) with ``on_version``, after ``stall_s``."""
    import time

    node = {"data": {"result": {"result": [{"state": "ALIVE", "resources_total": {"CPU": 4.0}}]}}}

    def respond(method: str, path: str) -> tuple[int, str, bytes]:
        if path.startswith("/api/v0/nodes"):
            return 200, "application/json", json_body(node)
        if path.startswith("/api/version"):
            time.sleep(stall_s)
            return on_version
        return 404, "application/json", json_body({"detail": "not found"})

    return StandIn(respond)


def test_ray_refusing_the_token_at_submit_is_one_line_exit_3(tmp_path: Path) -> None:
    """Ray's client raises its own AuthenticationError on a 401; it was a traceback, exit 1."""
    with _submit_stand_in((401, "text/plain", b"Unauthorized")) as server:
        proc = _run([*RTJOB, "submit", "tests/support/jobs/count.yaml", "--backend", "ray", "--address",
                     server.address], base_env(tmp_path / "home"))
    assert proc.returncode == 3, proc.stderr
    assert "authentication failed" in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("rtjob: error: ")


def test_a_submission_that_hangs_gives_up_after_its_time_out(tmp_path: Path) -> None:
    """Ray's client has no time-out of its own: a dashboard that never answers the submission was a hang."""
    with _submit_stand_in((200, "application/json", json_body({"version": "5"})), stall_s=30) as server:
        proc = _run([*RTJOB, "submit", "tests/support/jobs/count.yaml", "--backend", "ray", "--address",
                     server.address], base_env(tmp_path / "home", RTJOB_SUBMIT_TIMEOUT_S="1"))
    assert proc.returncode == 3, proc.stderr
    assert "did not accept the submission within 1s" in proc.stderr and "Traceback" not in proc.stderr
