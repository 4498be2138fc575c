"""The backend contract is the whole contract: every registered backend (rtjob's and a toy one registered by a
test, which proves that a backend is one folder and one registration) implements it, plans purely into plain
requests that round-trip through JSON; the policy every backend shares is the base class's; and nothing outside
backends/ probes a backend, tests its name or passes one as an argument."""

from __future__ import annotations

import ast
import copy
import json
import os
import re
import subprocess
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
from rtjob import backends
from rtjob.backends import (
    backend_class,
    backend_names,
    configured,
    get_backend,
    offering,
    placement_for,
    register,
    registered_compute_configs,
)
from rtjob.backends.base import Backend, NotSupported
from rtjob.core.errors import BadInput
from rtjob.core.model import RunStatus
from rtjob.jobspec.resolve import Overrides
from rtjob.runs.runner import plan
from support.cli import REPO
from support.scrub import scrub
from support.toy_backend.backend import ToyBackend

register("toy", "support.toy_backend.backend:ToyBackend")  # the toy backend's one registration

CLI = REPO / "cli" / "rtjob"


@pytest.fixture
def clean(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    scrub(monkeypatch)
    monkeypatch.setenv("RTJOB_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    monkeypatch.chdir(REPO)
    return tmp_path


@pytest.fixture
def toy(clean: Path) -> Backend:
    ToyBackend.runs.clear()
    ToyBackend.calls.clear()
    return get_backend(_settings("toy"))


def _settings(name: str):  # noqa: ANN202 - Settings
    flags = {"backend": name, "address": "http://127.0.0.1:9" if name == "ray" else None}
    return configured(flags, REPO)


def test_the_toy_backend_is_registered_beside_rtjobs_own() -> None:
    assert {"local", "ray", "anyscale", "toy"} <= set(backend_names())


@pytest.mark.parametrize("name", backend_names())
def test_every_registered_backend_implements_the_whole_contract(name: str, clean: Path) -> None:
    cls = backend_class(name)
    assert issubclass(cls, Backend) and cls.name == name
    assert not getattr(cls, "__abstractmethods__", None), f"{name} leaves abstract: {cls.__abstractmethods__}"
    assert cls.placement().backend == name
    backend = get_backend(_settings(name))  # constructing contacts nothing
    assert backend.display_address and backend.address


@pytest.mark.parametrize("name", backend_names())
def test_plan_is_pure_and_its_request_round_trips_through_json(name: str, clean: Path) -> None:
    settings = _settings(name)
    planned = plan("ddp-resnet", settings, Overrides(nodes=2, submission_id="fixed-id",
                                                     env=("API_TOKEN=s3cr3t-value-123",)))
    job_before = copy.deepcopy(planned.job)
    again = planned.backend.plan(planned.job, planned.cost)
    assert again.request == planned.request, "planning twice must give the same request"
    assert again.upload == planned.upload
    assert planned.job.notes == job_before.notes and planned.job.env_vars == job_before.env_vars
    data = json.loads(json.dumps(planned.request.to_json()))
    assert data["kind"] == type(planned.request).__name__
    assert type(planned.request).from_json(data) == planned.request
    rendered = json.dumps(planned.backend.render(planned.request))
    assert "s3cr3t-value-123" not in rendered and "s3cr3t-value-123" not in planned.backend.equivalent_command(
        planned.request)


def test_a_capability_a_backend_lacks_is_one_clear_error(clean: Path) -> None:
    planned = plan("ddp-resnet", _settings("ray"), Overrides())
    with pytest.raises(NotSupported) as err:
        planned.backend.render_file(planned.request)
    assert err.value.exit_code == 2 and "--output yaml" in err.value.message
    assert planned.backend.attempts  # Ray runs are retried by rtjob: attempts is a capability there
    assert get_backend(_settings("anyscale")).retry("x", None) is None  # Anyscale retries its jobs itself


# -- the policy every backend shares: written once in Backend, tested once, on the toy backend ----------------


def test_submit_attaches_to_a_run_whose_id_exists(toy: Backend) -> None:
    planned = plan("ddp-resnet", toy.settings, Overrides(submission_id="toy-1"))
    first, second = toy.submit(planned.request), toy.submit(planned.request)
    assert first.created and not second.created and second.run.id == "toy-1"
    assert ToyBackend.calls == ["submit toy-1"]


def test_stop_returns_an_ended_run_at_once_and_stops_one_that_runs(toy: Backend) -> None:
    for run_id in ("ended", "running"):
        toy.submit(plan("ddp-resnet", toy.settings, Overrides(submission_id=run_id)).request)
    ToyBackend.runs["ended"].status = RunStatus.SUCCEEDED
    assert toy.stop("ended").status is RunStatus.SUCCEEDED
    assert toy.stop("running").status is RunStatus.STOPPED
    assert ToyBackend.calls[-1:] == ["stop running"]  # never "stop ended"
    with pytest.raises(BadInput, match="no run 'nope'"):
        toy.stop("nope")


def test_delete_refuses_a_run_that_has_not_ended(toy: Backend) -> None:
    toy.submit(plan("ddp-resnet", toy.settings, Overrides(submission_id="toy-2")).request)
    with pytest.raises(BadInput, match=r"run 'toy-2' is PENDING: stop it first: rtjob stop toy-2"):
        toy.delete("toy-2")
    toy.stop("toy-2")
    toy.delete("toy-2")
    assert toy.find("toy-2") is None and ToyBackend.calls[-1] == "delete toy-2"


def test_list_is_newest_first(toy: Backend) -> None:
    for run_id in ("old", "mid", "new"):
        toy.submit(plan("ddp-resnet", toy.settings, Overrides(submission_id=run_id)).request)
    assert [r.id for r in toy.list()] == ["new", "mid", "old"]


# -- the registry: entry points, capabilities ------------------------------------------------------------------


def test_a_package_adds_a_backend_through_an_entry_point(monkeypatch: pytest.MonkeyPatch) -> None:
    point = EntryPoint("toy-plugin", "support.toy_backend.backend:ToyBackend", backends.ENTRY_POINT_GROUP)
    asked: list[str] = []

    def entry_points(group: str) -> list[EntryPoint]:
        asked.append(group)
        return [point]

    monkeypatch.setattr("importlib.metadata.entry_points", entry_points)
    monkeypatch.setattr(backends, "_registered", dict(backends._registered))
    monkeypatch.setattr(backends, "_plugins_read", False)
    assert "toy-plugin" in backend_names() and backend_class("toy-plugin") is ToyBackend
    backend_names()
    assert asked == [backends.ENTRY_POINT_GROUP], "entry points are read once"


def test_starting_rtjob_reads_no_entry_points() -> None:
    """--backend's choices and help are filled in when used: `rtjob --help` does not scan installed packages."""
    code = "import rtjob.main, rtjob.backends as b; assert not b._plugins_read; print('ok')"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": f"{REPO / 'cli'}:{REPO}"})
    assert proc.stdout.strip() == "ok", proc.stderr[-2000:]


def test_optional_capabilities_are_found_through_the_registry(clean: Path) -> None:
    for capability in ("schedules", "compute_configs", "local_cluster"):
        name = offering(capability)
        assert getattr(get_backend(_settings(name)), capability)() is not None, name
    assert ToyBackend(_settings("toy")).schedules() is None  # a capability not declared: None
    prefixes = {r.prefix: r.backend for r in registered_compute_configs()}
    assert prefixes == {"anyscale:": offering("compute_configs")}
    # resolving for another backend knows them, to say which backend takes a job that names one
    assert placement_for(get_backend(_settings("ray"))).registered_elsewhere == registered_compute_configs()


# -- nothing outside backends/ knows a backend ----------------------------------------------------------------


def _outside_backends() -> list[Path]:
    return sorted(p for p in CLI.rglob("*.py") if "backends" not in p.relative_to(CLI).parts)


def _argument_constants(call: ast.Call) -> list[ast.expr]:
    """What a call passes: its arguments, keyword values, and the values of dicts it passes."""
    passed = [*call.args, *(k.value for k in call.keywords)]
    return passed + [v for p in passed if isinstance(p, ast.Dict) for v in p.values]


def backend_knowledge(source: str, names: set[str], where: str = "") -> list[str]:
    """Where ``source`` tests a backend's name, passes one as an argument, or probes a backend."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            parts = [node.left, *node.comparators]
            consts = [c for p in parts for c in ([p] if not isinstance(p, (ast.Tuple, ast.List, ast.Set))
                                                 else p.elts)]
            # ... when what is compared is a backend or its name (`tz in ("UTC", "local")` is not)
            about_backend = re.search(r"backend|\.name\b", ast.unparse(node)) is not None
            if about_backend and any(isinstance(c, ast.Constant) and c.value in names for c in consts):
                found.append(f"{where}:{node.lineno}: compares with a backend name")
        if isinstance(node, ast.Call):
            # A name handed to something about backends: backend_from("local"), configured({"backend": "ray"}),
            # click.option("--backend", default="ray"), github_workflow(..., backend="ray") (not d.get("local")).
            about_backend = "backend" in ast.unparse(node).lower()
            if about_backend and any(isinstance(c, ast.Constant) and c.value in names
                                     for c in _argument_constants(node)):
                found.append(f"{where}:{node.lineno}: passes a backend name")
            if (isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr") and node.args
                    and isinstance(node.args[0], ast.Name) and node.args[0].id in ("be", "backend", "self")):
                found.append(f"{where}:{node.lineno}: {node.func.id} probe of a backend")
    return found


def test_nothing_outside_backends_tests_passes_or_probes_a_backend_name() -> None:
    names = set(backend_names())
    found = [hit for path in _outside_backends()
             for hit in backend_knowledge(path.read_text(encoding="utf-8"), names, str(path.relative_to(REPO)))]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("line", [
    'backend_from("local", None, (), False)',
    'configured({"backend": "anyscale", "storage": None})',
    'click.option("--backend", type=click.Choice(names), default="ray")',
    'github_workflow(ref, cron, backend="ray", nodes=1)',
    'if backend.name == "anyscale": pass',
    'getattr(backend, "schedules", None)',
])
def test_the_guard_catches_each_way_of_knowing_a_backend(line: str) -> None:
    assert backend_knowledge(line, {"local", "ray", "anyscale"})


def test_the_guard_lets_other_uses_of_the_same_words_pass() -> None:
    assert not backend_knowledge('document.get("local")\nif tz in ("UTC", "local"): pass\nx = ("local", "args")',
                                 {"local", "ray", "anyscale"})


# -- plan facts once ------------------------------------------------------------------------------------------

# Who may work out a fact of the plan: the estimated cost in runs/runner.plan, the upload in a backend's plan
# (packaging.py's own walk aside). Everything after reads Plan.cost and Plan.upload.
FACTS = {"job_cost": {("runs/runner.py", "plan")},
         "check_upload": {("backends/ray/backend.py", "plan"), ("backends/anyscale/backend.py", "plan")},
         "measure": {("backends/packaging.py", "check_upload")},
         "uploaded_files": {("backends/packaging.py", "measure")}}


def _calls_by_function(tree: ast.AST) -> list[tuple[str, str]]:
    """(the function a call is in, the name it calls) for every call of a plain or dotted name."""
    found = []

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else where
            if isinstance(child, ast.Call):
                func = child.func
                name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
                found.append((where, name))
            visit(child, inner)

    visit(tree, "<module>")
    return found


def test_the_plans_cost_and_upload_are_worked_out_once() -> None:
    found = []
    for path in sorted(CLI.rglob("*.py")):
        rel = str(path.relative_to(CLI))
        for where, name in _calls_by_function(ast.parse(path.read_text(encoding="utf-8"))):
            if name in FACTS and (rel, where) not in FACTS[name]:
                found.append(f"{rel}: {where} calls {name}")
    assert not found, "\n".join(found)
