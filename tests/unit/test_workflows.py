"""The GitHub Actions workflows: every file in .github/workflows/ and what `rtjob schedule render --github`
prints.

The format is checked by GitHub's workflow schema as check-jsonschema vendors it (SchemaStore's
github-workflow.json, read from the installed package: offline, no download), validated with jsonschema.
Only rtjob's own contract for a scheduled run is checked by hand: cron that GitHub runs (rtjob's own check) in an
IANA time zone, a manual trigger with `nodes` and `timeout`, only a client extra installed (no torch), `rtjob submit`
of the right job with a fixed submission id, --timeout and --output json, secrets referenced from
`secrets.*` and never inlined or pasted into scripts, the exit-code handling (recorded as a step output, results
pulled and uploaded even on failure, the workflow failing unless the job succeeded) and scripts that parse
and only read variables the workflow sets. The last tests feed it broken workflows to show each check can fail.
"""

from __future__ import annotations

import functools
import json
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.cli import REPO, base_env, run_in_process

from rtjob_contract import GITHUB_DISPATCH_EVENT

WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.y*ml"))
RUNNER_ENV = {"GITHUB_OUTPUT", "GITHUB_ENV", "GITHUB_PATH", "GITHUB_STEP_SUMMARY", "GITHUB_WORKSPACE",
              "GITHUB_SHA", "GITHUB_REF", "GITHUB_RUN_ID", "RUNNER_TEMP", "HOME", "PATH", "PWD"}
_EXPR = re.compile(r"\$\{\{(.*?)\}\}", re.S)
_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|KEY|ADDRESS|CREDENTIAL", re.I)


@functools.cache
def github_workflow_schema() -> dict[str, Any]:
    """GitHub's workflow schema as vendored by the installed check-jsonschema (its own loader, no network)."""
    from check_jsonschema.builtin_schemas import get_builtin_schema

    return get_builtin_schema("vendor.github-workflows")


def schema_errors(data: Any) -> list[str]:
    """Where ``data`` breaks GitHub's workflow schema: the most relevant reason inside each failing branch."""
    import jsonschema

    validator = jsonschema.Draft7Validator(github_workflow_schema())
    errors = []
    for error in validator.iter_errors(data):
        best = jsonschema.exceptions.best_match([error])
        errors.append(f"schema: {'/'.join(map(str, best.absolute_path)) or '(top)'}: {best.message}")
    return errors


def load_workflow(text: str) -> Any:
    data = yaml.safe_load(text)
    if isinstance(data, dict) and True in data:  # YAML 1.1 reads the key `on` as a boolean
        data["on"] = data.pop(True)
    return data


def _expressions(value: Any) -> list[str]:
    if isinstance(value, str):
        return [m.strip() for m in _EXPR.findall(value)]
    if isinstance(value, dict):
        return [e for v in value.values() for e in _expressions(v)]
    if isinstance(value, list):
        return [e for v in value for e in _expressions(v)]
    return []


def check_workflow(text: str, job: str | None = None) -> list[str]:
    """Every problem found in one workflow file (empty: it passes). ``job``: the job `rtjob submit` must run."""
    data = load_workflow(text)
    errors = schema_errors(data)
    if errors:
        return errors
    on = data["on"] if isinstance(data["on"], dict) else {}
    errors += _schedule_errors(on)
    for job_id, job_def in data["jobs"].items():
        errors += _rtjob_contract(job_id, job_def, data, on, job)
    return errors


def _schedule_errors(on: dict[str, Any]) -> list[str]:
    """rtjob's own checks: cron that GitHub runs (the schema only types it as a string), an IANA zone."""
    from rtjob.core.errors import BadInput
    from rtjob.jobspec.cron import validate_github_cron, validate_iana_timezone

    errors = []
    for item in on.get("schedule") or []:
        try:
            validate_github_cron(item["cron"], "cron")
            if "timezone" in item:
                validate_iana_timezone(item["timezone"], "timezone")
        except BadInput as exc:
            errors.append(f"on.schedule: {exc.message}")
    return errors


def _env_errors(where: str, env: dict[str, Any]) -> list[str]:
    """Secrets referenced (`${{ secrets.NAME }}`), never a value written into the file."""
    return [f"{where}: env {name} must be ${{{{ secrets.{name} }}}} (a secret is referenced, never inlined)"
            for name, value in env.items()
            if _SECRET_NAME.search(name) and str(value).strip() != f"${{{{ secrets.{name} }}}}"]


def _script_errors(script: str, where: str, env: set[str]) -> list[str]:
    errors = []
    if "${{" in script:
        errors.append(f"{where}: ${{{{ }}}} inside run: pass values through env (script injection)")
    proc = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        errors.append(f"{where}: bash -n: {proc.stderr.strip()}")
    assigned = set(re.findall(r"(?:^|[\s;])([A-Za-z_][A-Za-z0-9_]*)=", script))
    for name in re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", script):
        if name not in env | assigned | RUNNER_ENV:
            errors.append(f"{where}: ${name} is not set by the workflow, the job, the step or the runner")
    return errors


def _rtjob_contract(job_id: str, job_def: dict[str, Any], data: dict[str, Any], on: dict[str, Any],
                    expected_job: str | None) -> list[str]:
    """What a scheduled rtjob run must do (only for jobs that run `rtjob submit` or `rtjob wait`). Two shapes:
    one job submits and follows the run (exit code, pull, upload, fail unless 0); or a job submits with --no-wait
    and a check job, started by the run's repository_dispatch, reads how it ended with `rtjob wait` (the same)."""
    steps = job_def.get("steps") or []
    runs = [(i, s) for i, s in enumerate(steps) if "run" in s]
    submits = [(i, s) for i, s in runs if re.search(r"\brtjob submit\b", s["run"])]
    waits = [(i, s) for i, s in runs if re.search(r"\brtjob wait\b", s["run"])]
    if not submits and not waits:
        return []
    errors = []
    inputs = set((on.get("workflow_dispatch") or {}).get("inputs") or {})
    job_env = set(data.get("env") or {}) | set(job_def.get("env") or {})
    errors += _env_errors("workflow", data.get("env") or {}) + _env_errors(job_id, job_def.get("env") or {})
    for expr in _expressions([job_def.get("env"), job_def.get("if")]) + _expressions([s.get("if") for s in steps]):
        for name in re.findall(r"\binputs\.([A-Za-z_][A-Za-z0-9_-]*)", expr):
            if name not in inputs:
                errors.append(f"{job_id}: no workflow_dispatch input {name!r}")

    outputs: dict[str, set[str]] = {}  # step id -> outputs it writes, as the steps run
    for index, step in enumerate(steps):
        where = f"{job_id}.steps[{index}] ({step.get('name') or step.get('uses') or step.get('id')})"
        errors += _env_errors(where, step.get("env") or {})
        for expr in _expressions([step.get("if"), step.get("env"), step.get("with")]) + (
                [step["if"]] if isinstance(step.get("if"), str) and "${{" not in step["if"] else []):
            for sid, name in re.findall(r"\bsteps\.([A-Za-z0-9_-]+)\.outputs\.([A-Za-z0-9_-]+)", expr):
                if sid not in outputs:
                    errors.append(f"{where}: no earlier step with id {sid!r}")
                elif name not in outputs[sid]:
                    errors.append(f"{where}: step {sid!r} never writes output {name!r}")
        if "run" in step:
            errors += _script_errors(step["run"], where, job_env | set(step.get("env") or {}))
        if "id" in step:
            outputs[step["id"]] = set(re.findall(r"([A-Za-z_][A-Za-z0-9_-]*)=[^\n]*>>\s*\"?\$GITHUB_OUTPUT",
                                                 step.get("run", "")))

    installs = [s["run"] for _, s in runs if "pip install" in s["run"]]
    if not installs:
        errors.append(f"{job_id}: rtjob is never installed")
    for script in installs:
        for line in script.splitlines():
            if "pip install" in line and re.search(r"torch|\[(all|train)|(,|\[)train", line):
                errors.append(f"{job_id}: installs more than a client extra: {line.strip()}")
        if "pip show torch" not in script:
            errors.append(f"{job_id}: the install step does not check that torch stayed out")

    if submits:
        (result_index, result), *_ = submits
        verb = "submit"
        words = shlex.split(next(line for line in result["run"].splitlines() if "rtjob submit" in line))
        ref = words[words.index("submit") + 1]
        if expected_job is not None and ref != expected_job:
            errors.append(f"{job_id}: rtjob submit runs {ref!r}, not the job {expected_job!r}")
        if "--submission-id" not in words or "github.run_id" not in str((job_def.get("env") or {}).get(
                words[words.index("--submission-id") + 1].lstrip("$"), "")):
            errors.append(f"{job_id}: rtjob submit needs --submission-id fixed per workflow run (a re-run attaches)")
        if "--output" not in words or words[words.index("--output") + 1] != "json":
            errors.append(f"{job_id}: rtjob submit needs --output json")
        if "--no-wait" in words:  # unattended: the cluster carries the run, a check job reads how it ended
            if "workflow_dispatch" not in on or not {"nodes", "check_run_id"} <= inputs:
                errors.append("on: a workflow_dispatch with `nodes` and `check_run_id` inputs")
            checkers = [j for j, d in data["jobs"].items()
                        if any(re.search(r"\brtjob wait\b", s.get("run", "")) for s in d.get("steps") or [])]
            if not checkers:
                errors.append(f"{job_id}: rtjob submit --no-wait needs a check job (rtjob wait) to fail the workflow")
            if GITHUB_DISPATCH_EVENT not in ((on.get("repository_dispatch") or {}).get("types") or []):
                errors.append(f"on: repository_dispatch of type {GITHUB_DISPATCH_EVENT} (the run's github "
                              "notification) must start the check job")
            if "repository_dispatch" in str(job_def.get("if", "")) or "schedule" not in str(job_def.get("if", "")):
                errors.append(f"{job_id}: submits on the schedule only, never on the run's notification")
            return errors
        if "workflow_dispatch" not in on or not {"nodes", "timeout"} <= inputs:
            errors.append("on: a workflow_dispatch with `nodes` and `timeout` inputs (a scheduled run also runs by "
                          "hand)")
        if "--timeout" not in words:
            errors.append(f"{job_id}: rtjob submit needs --timeout and --output json")
    else:
        (result_index, result), *_ = waits
        verb = "wait"
        words = shlex.split(next(line for line in result["run"].splitlines() if "rtjob wait" in line))
        if "--timeout" not in words or "--output" not in words or words[words.index("--output") + 1] != "json":
            errors.append(f"{job_id}: rtjob wait needs --timeout and --output json")
        run_id = str((job_def.get("env") or {}).get(words[words.index("wait") + 1].lstrip("$"), ""))
        if "github.event.client_payload.run_id" not in run_id:
            errors.append(f"{job_id}: rtjob wait must check the run the notification names (client_payload.run_id)")
        if "repository_dispatch" not in str(job_def.get("if", "")):
            errors.append(f"{job_id}: the check job must run on the run's repository_dispatch")
        elif "startsWith(github.event.client_payload.run_id, 'rtjob-" not in str(job_def.get("if", "")):
            errors.append(f"{job_id}: the check job must take only the runs this workflow submits (every workflow "
                          "listening for the event sees each dispatch)")
    if "set +e" not in result["run"] or "rc" not in outputs.get(result.get("id", ""), set()):
        errors.append(f"{job_id}: the {verb} step must record rtjob's exit code as output rc (set +e, id)")

    rc_ref = f"steps.{result.get('id')}.outputs.rc"
    later = steps[result_index + 1:]
    pulls = [s for s in later if "run" in s and re.search(r"\brtjob pull\b", s["run"])]
    uploads = [s for s in later if str(s.get("uses", "")).startswith("actions/upload-artifact")]
    if not pulls or not (str(pulls[0].get("if", "")).startswith("always()") and rc_ref in pulls[0]["if"]):
        errors.append(f"{job_id}: results must be pulled (rtjob pull) after any run that ended, by {rc_ref}")
    if not uploads or not str(uploads[0].get("if", "")).startswith("always()"):
        errors.append(f"{job_id}: results must be uploaded with `if: always()` (failed runs too)")
    last = steps[-1]
    if not ("run" in last and "exit 1" in last["run"] and str(last.get("if", "")).startswith("always()")
            and rc_ref in yaml.safe_dump(last)):
        errors.append(f"{job_id}: the last step must fail the workflow (if: always()) unless {rc_ref} is 0")
    return errors


def _render(*args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return run_in_process("schedule", "render", *args, env=base_env(tmp_path / "home"))


def _rendered(tmp_path: Path, *extra: str) -> str:
    proc = _render("hello", "--cron", "*/30 6-18 * * MON-FRI", "--github", "--timeout", "15m", *extra,
                   tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.fixture(scope="module", name="rendered")
def rendered_fixture(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One rendered Ray workflow (UTC) that follows its run, for the schema tests to edit."""
    return _rendered(tmp_path_factory.mktemp("render"), "--follow")


FOLLOW_ARGS = ("ddp-resnet", "--cron", "0 3 * * 1", "--github", "--backend", "anyscale", "--nodes", "3", "--follow",
               "--timeout", "2h")


@pytest.fixture(scope="module", name="follow_anyscale")
def follow_anyscale_fixture(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The Anyscale workflow that follows its run (the committed one is unattended), for the mistakes to edit."""
    proc = _render(*FOLLOW_ARGS, tmp_path=tmp_path_factory.mktemp("follow"))
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _rendered_by(text: str) -> list[str] | None:
    line = next((ln for ln in text.splitlines() if ln.startswith("# Rendered by: rtjob ")), None)
    return shlex.split(line.removeprefix("# Rendered by: rtjob ")) if line else None


@pytest.mark.parametrize("path", WORKFLOWS, ids=[p.name for p in WORKFLOWS])
def test_committed_workflow_passes(path: Path) -> None:
    text = path.read_text()
    args = _rendered_by(text)
    assert check_workflow(text, job=args[2] if args else None) == []


def test_there_is_a_scheduled_anyscale_workflow() -> None:
    names = [p.name for p in WORKFLOWS]
    assert "train-ddp-resnet-anyscale.yml" in names


@pytest.mark.parametrize("path", WORKFLOWS, ids=[p.name for p in WORKFLOWS])
def test_committed_workflow_is_what_render_prints(path: Path, tmp_path: Path) -> None:
    """A workflow that says it was rendered is byte-for-byte what that command prints today."""
    text = path.read_text()
    args = _rendered_by(text)
    if args is None:
        pytest.skip("not rendered by rtjob")
    proc = run_in_process(*args, env=base_env(tmp_path / "home"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == text, "stale: re-render it with the command in its header"


def test_rendered_ray_workflow_that_follows_passes(rendered: str) -> None:
    text = rendered
    assert check_workflow(text, job="hello") == []
    assert list(load_workflow(text)["jobs"]) == ["train"] and "--no-wait" not in text
    assert 'python -m pip install ".[ray]"\n' in text and "RAY_ADDRESS: ${{ secrets.RAY_ADDRESS }}" in text
    assert "RTJOB_BACKEND: ray" in text and "timeout-minutes: 45" in text
    assert "rtjob submit hello --nodes \"$NODES\"" in text
    assert load_workflow(text)["on"]["schedule"] == [{"cron": "*/30 6-18 * * MON-FRI"}]  # UTC: GitHub's default


def test_rendered_workflow_is_unattended_submit_then_a_check_started_by_the_runs_notification(tmp_path: Path) -> None:
    """The default: a short job submits with --no-wait (no runner held while the job trains); the run's github
    notification (a repository_dispatch) or a hand-started run with check_run_id starts the check job."""
    text = _rendered(tmp_path)
    assert check_workflow(text, job="hello") == []
    data = load_workflow(text)
    assert list(data["jobs"]) == ["submit", "check"]
    assert data["on"]["repository_dispatch"] == {"types": [GITHUB_DISPATCH_EVENT]}
    assert set(data["on"]["workflow_dispatch"]["inputs"]) == {"nodes", "check_run_id"}
    submit, check = data["jobs"]["submit"], data["jobs"]["check"]
    assert 'rtjob submit hello --nodes "$NODES" --submission-id "$RUN_ID" --no-wait --output json' in text
    assert "repository_dispatch" not in submit["if"] and "repository_dispatch" in check["if"]
    assert check["env"]["RUN_ID"] == "${{ github.event.client_payload.run_id || inputs.check_run_id }}"
    assert 'rtjob wait "$RUN_ID" --timeout 1m --output json' in text
    assert submit["timeout-minutes"] == check["timeout-minutes"] == 30  # neither follows the training
    args = _rendered_by(text)
    assert args is not None and "--follow" not in args
    assert run_in_process(*args, env=base_env(tmp_path / "home")).stdout == text


UNATTENDED_MISTAKES = [
    ("  repository_dispatch:\n    types: [rtjob-run-ended]\n", "", "repository_dispatch of type"),
    ("    types: [rtjob-run-ended]", "    types: [run-ended]", "repository_dispatch of type"),
    ("${{ github.event.client_payload.run_id || inputs.check_run_id }}", "${{ inputs.check_run_id }}",
     "client_payload.run_id"),
    ('rtjob wait "$RUN_ID" --timeout 1m --output json', 'rtjob wait "$RUN_ID" --output json', "--timeout"),
    ("if: github.event_name == 'schedule' ||", "if: github.event_name == 'repository_dispatch' ||",
     "submits on the schedule only"),
    ("steps.check.outputs.rc)", "steps.chek.outputs.rc)", "no earlier step with id 'chek'"),
    ("      check_run_id:\n", "      run_id:\n", "check_run_id"),
    ("github.event_name == 'repository_dispatch' && startsWith(github.event.client_payload.run_id, "
     "'rtjob-ddp-resnet-gh')", "github.event_name == 'repository_dispatch'", "only the runs this workflow submits"),
]


@pytest.mark.parametrize(("old", "new", "expect"), UNATTENDED_MISTAKES, ids=[m[2] for m in UNATTENDED_MISTAKES])
def test_checker_catches_each_mistake_of_an_unattended_workflow(old: str, new: str, expect: str) -> None:
    text = (REPO / ".github" / "workflows" / "train-ddp-resnet-anyscale.yml").read_text()
    assert old in text
    errors = check_workflow(text.replace(old, new, 1), job="ddp-resnet")
    assert any(expect in e for e in errors), errors


def test_an_unattended_submit_without_a_check_job_is_caught() -> None:
    text = (REPO / ".github" / "workflows" / "train-ddp-resnet-anyscale.yml").read_text()
    data = load_workflow(text)
    del data["jobs"]["check"]
    errors = check_workflow(yaml.safe_dump(data, sort_keys=False), job="ddp-resnet")
    assert any("needs a check job" in e for e in errors), errors


def test_rendered_workflow_with_a_timezone(tmp_path: Path) -> None:
    """--timezone writes GitHub's `on.schedule[].timezone`; the header's command renders the same file again."""
    text = _rendered(tmp_path, "--timezone", "America/New_York")
    assert check_workflow(text, job="hello") == []
    assert load_workflow(text)["on"]["schedule"] == [{"cron": "*/30 6-18 * * MON-FRI",
                                                      "timezone": "America/New_York"}]
    args = _rendered_by(text)
    assert args is not None and args[args.index("--timezone") + 1] == "America/New_York"
    assert run_in_process(*args, env=base_env(tmp_path / "home")).stdout == text


def test_vendored_schema_knows_schedule_timezone() -> None:
    """GitHub accepts `timezone:` on a schedule entry (2026); the vendored schema must know it too, or every
    rendered --timezone workflow would fail here: an older check-jsonschema (dev extra pins one that knows)."""
    on = github_workflow_schema()["properties"]["on"]
    schedules = [branch["properties"]["schedule"] for branch in on["oneOf"]
                 if "schedule" in branch.get("properties", {})]
    assert schedules and schedules[0]["items"]["properties"]["timezone"]["type"] == "string"
    assert schedules[0]["items"]["additionalProperties"] is False  # so a typo in an entry's key is caught


def _edited(text: str, edit: Any) -> str:
    data = load_workflow(text)
    edit(data)
    return yaml.safe_dump(data, sort_keys=False, width=1000)


VALID = {
    "release and workflow_run triggers": lambda d: d["on"].update(
        release={"types": ["published"]}, workflow_run={"workflows": ["CI"], "types": ["completed"]}),
    "job environment (name)": lambda d: d["jobs"]["train"].update(environment="production"),
    "job environment (name and url)": lambda d: d["jobs"]["train"].update(
        environment={"name": "production", "url": "https://example.com"}),
    "timezone on a schedule entry": lambda d: d["on"]["schedule"][0].update(timezone="Europe/Berlin"),
    "cancel-in-progress as an expression": lambda d: d["concurrency"].update(
        {"cancel-in-progress": "${{ github.event_name == 'workflow_dispatch' }}"}),
}


@pytest.mark.parametrize("edit", VALID.values(), ids=VALID.keys())
def test_github_schema_accepts_valid_workflows(rendered: str, edit: Any) -> None:
    """Valid GitHub workflows that a hand-written subset schema rejected."""
    text = _edited(rendered, edit)
    assert check_workflow(text, job="hello") == []


TYPOS = {
    "permissions contents: reed": (lambda d: d.update(permissions={"contents": "reed"}),
                                   "permissions/contents: 'reed' is not one of"),
    "cancel-in-progres": (lambda d: d["concurrency"].update({"cancel-in-progres": False}),
                          "'cancel-in-progres' was unexpected"),
    "timezon on a schedule entry": (lambda d: d["on"]["schedule"][0].update(timezon="Europe/Berlin"),
                                    "'timezon' was unexpected"),
    "runs_on": (lambda d: d["jobs"]["train"].update({"runs_on": d["jobs"]["train"].pop("runs-on")}),
                "jobs/train"),
    "workflow_dispatsh": (lambda d: d["on"].update(workflow_dispatsh=d["on"].pop("workflow_dispatch")), "on"),
}


@pytest.mark.parametrize(("edit", "expect"), TYPOS.values(), ids=TYPOS.keys())
def test_github_schema_rejects_typos(rendered: str, edit: Any, expect: str) -> None:
    errors = check_workflow(_edited(rendered, edit), job="hello")
    assert errors and all(e.startswith("schema: ") for e in errors)
    assert any(expect in e for e in errors), errors


MISTAKES = [
    ('- cron: "0 3 * * 1"', '- cron: "0 3 * *"', "not a valid cron expression"),
    ('- cron: "0 3 * * 1"', '- cron: "*/2 * * * *"', "less than 5 minutes apart"),
    ('- cron: "0 3 * * 1"', '- cron: "0 3 L * *"', "does not run L"),
    ('- cron: "0 3 * * 1"  # GitHub Actions schedules are in UTC\n',
     '- cron: "0 3 * * 1"\n      timezone: "Mars/Olympus"\n', "timezone 'Mars/Olympus'"),
    ("  workflow_dispatch:\n", "  workflow_dispatsh:\n", "schema"),
    ('rtjob submit ddp-resnet --nodes "$NODES"', "rtjob submit ddp-resnet --nodes ${{ inputs.nodes }}",
     "script injection"),
    ('rtjob submit ddp-resnet --nodes', 'rtjob submit hello --nodes', "not the job 'ddp-resnet'"),
    ("--output json > run.json", "> run.json", "--output json"),
    ('--submission-id "$RUN_ID" ', "", "--submission-id"),
    ('python -m pip install ".[anyscale,s3]"', 'python -m pip install ".[anyscale,s3,train]"', "client extra"),
    ("${{ secrets.ANYSCALE_CLI_TOKEN }}", "aph0_planted_in_clear", "never inlined"),
    ("steps.submit.outputs.rc)", "steps.submitt.outputs.rc)", "no earlier step with id 'submitt'"),
    ('echo "rc=$?" >> "$GITHUB_OUTPUT"', 'echo "code=$?" >> "$GITHUB_OUTPUT"', "never writes output 'rc'"),
    ("inputs.nodes || '3'", "inputs.node || '3'", "no workflow_dispatch input 'node'"),
    ('if [ "$SUBMIT_RC" != "0" ]; then', 'if [ "$SUBMIT_RC" != "0" ] then', "bash -n"),
    ('rtjob pull "$RUN_ID"', 'rtjob pull "$RUNID"', "$RUNID is not set"),
    ("        if: always()\n        uses: actions/upload", "        uses: actions/upload", "if: always()"),
    ("          set +e\n", "", "exit code"),
    ("if: always() && contains(", "if: contains(", "rtjob pull"),
]


@pytest.mark.parametrize(("old", "new", "expect"), MISTAKES, ids=[m[2] for m in MISTAKES])
def test_checker_catches_each_mistake(old: str, new: str, expect: str, follow_anyscale: str) -> None:
    text = follow_anyscale
    assert old in text
    errors = check_workflow(text.replace(old, new, 1), job="ddp-resnet")
    assert any(expect in e for e in errors), errors


def test_render_bad_input_exits_2(tmp_path: Path) -> None:
    for args, expect in [
        (("hello", "--cron", "0 3 * *", "--github"), "--cron '0 3 * *'"),
        (("helo", "--cron", "0 3 * * *", "--github"), "unknown job 'helo'"),
        (("hello", "--cron", "0 3 * * *", "--github", "--timeout", "5x"), "--timeout '5x'"),
    ]:
        proc = _render(*args, tmp_path=tmp_path)
        assert proc.returncode == 2 and expect in proc.stderr and proc.stdout == ""
        assert len(proc.stderr.strip().splitlines()) == 1


def test_a_pipeline_renders_unattended_where_the_cluster_carries_it(tmp_path: Path) -> None:
    """A pipeline's supervisor runs its steps with no client (on Ray a job of its own; on Anyscale the driver of the
    one job that hosts the steps): the unattended workflow submits it, on either backend; --follow too."""
    pipeline = "tests/support/jobs/relay.yaml"
    proc = _render(pipeline, "--cron", "0 3 * * *", "--github", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert check_workflow(proc.stdout, job=pipeline) == [] and "--no-wait" in proc.stdout
    unattended = _render(pipeline, "--cron", "0 3 * * *", "--github", "--backend", "anyscale", tmp_path=tmp_path)
    assert unattended.returncode == 0, unattended.stderr
    assert check_workflow(unattended.stdout, job=pipeline) == [] and "--no-wait" in unattended.stdout
    followed = _render(pipeline, "--cron", "0 3 * * *", "--github", "--backend", "anyscale", "--follow",
                       tmp_path=tmp_path)
    assert followed.returncode == 0 and check_workflow(followed.stdout, job=pipeline) == []


def test_a_check_cron_starts_the_check_job_for_the_run_this_workflow_submitted_last(tmp_path: Path) -> None:
    """--check-cron: the check job also runs on a cron of its own (no notify token on the cluster): it finds the
    newest run id of this workflow's shape in RTJOB_STORAGE's run index (a pipeline step's id is not one), then
    checks it as for a notification. The submit job runs on the submit cron only."""
    text = _rendered(tmp_path, "--check-cron", "0 20 * * MON-FRI")
    assert check_workflow(text, job="hello") == []
    data = load_workflow(text)
    assert [e["cron"] for e in data["on"]["schedule"]] == ["*/30 6-18 * * MON-FRI", "0 20 * * MON-FRI"]
    submit, check = data["jobs"]["submit"], data["jobs"]["check"]
    assert "github.event.schedule == '*/30 6-18 * * MON-FRI'" in submit["if"]
    assert "github.event.schedule == '0 20 * * MON-FRI'" in check["if"]
    (find,) = [s for s in check["steps"] if s.get("name") == "The run this workflow submitted last"]
    assert find["if"] == "env.RUN_ID == ''" and check["steps"].index(find) < next(
        i for i, s in enumerate(check["steps"]) if "rtjob wait" in s.get("run", ""))
    assert 'rtjob runs --storage "$RTJOB_STORAGE" --since 30d --limit 500 --output json > runs.json' in find["run"]
    # The script's choice, run for real: the newest id of this workflow's shape, never a step's, never another's.
    pick = next(line for line in find["run"].splitlines() if line.startswith("RUN_ID=$("))
    script = pick + '\necho "$RUN_ID"\n'
    for runs, expect in [
        (["rtjob-other-gh30", "rtjob-hello-gh29-train", "rtjob-hello-gh29", "rtjob-hello-gh28"], "rtjob-hello-gh29"),
        (["rtjob-hello-20261126-0300-ab12", "rtjob-hello-ghX"], ""),
    ]:
        (tmp_path / "runs.json").write_text(json.dumps([{"id": r, "status": "SUCCEEDED"} for r in runs]))
        got = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=30)
        assert got.returncode == 0 and got.stdout.strip() == expect, got.stderr
    args = _rendered_by(text)
    assert args is not None and run_in_process(*args, env=base_env(tmp_path / "home")).stdout == text
    for extra, expect in [(("--check-cron", "*/30 6-18 * * MON-FRI"), "is --cron"),
                          (("--check-cron", "0 20 * *"), "--cron '0 20 * *'"),
                          (("--check-cron", "0 20 * * *", "--follow"), "not with --follow")]:
        proc = _render("hello", "--cron", "*/30 6-18 * * MON-FRI", "--github", *extra, tmp_path=tmp_path)
        assert proc.returncode == 2 and expect in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, \
            proc.stderr
