"""The backend contract is the whole contract: every registered backend implements it, plans purely into
plain requests that round-trip through JSON, and nothing outside backends/ probes a backend or tests its name."""

from __future__ import annotations

import ast
import copy
import json
import re
from pathlib import Path

import pytest
from rtjob.backends import backend_class, backend_names, configured, get_backend
from rtjob.backends.base import Backend, NotSupported
from rtjob.jobspec.resolve import Overrides
from rtjob.runs.runner import plan
from support.cli import REPO
from support.scrub import scrub

CLI = REPO / "cli" / "rtjob"


@pytest.fixture
def clean(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    scrub(monkeypatch)
    monkeypatch.setenv("RTJOB_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    monkeypatch.chdir(REPO)
    return tmp_path


def _settings(name: str):  # noqa: ANN202 - Settings
    flags = {"backend": name, "address": "http://127.0.0.1:9" if name == "ray" else None}
    return configured(flags, REPO)


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
    again = planned.backend.plan(planned.job)
    assert again == planned.request, "planning twice must give the same request"
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


def _outside_backends() -> list[Path]:
    return sorted(p for p in CLI.rglob("*.py") if "backends" not in p.relative_to(CLI).parts)


def test_nothing_outside_backends_tests_a_backend_name_or_probes_a_backend() -> None:
    names = set(backend_names())
    found = []
    for path in _outside_backends():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare):
                parts = [node.left, *node.comparators]
                consts = [c for p in parts for c in ([p] if not isinstance(p, (ast.Tuple, ast.List, ast.Set))
                                                     else p.elts)]
                # ... when what is compared is a backend or its name (`tz in ("UTC", "local")` is not)
                about_backend = re.search(r"backend|\.name\b", ast.unparse(node)) is not None
                if about_backend and any(isinstance(c, ast.Constant) and c.value in names for c in consts):
                    found.append(f"{path.relative_to(REPO)}:{node.lineno}: compares with a backend name")
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("getattr", "hasattr") and node.args
                    and isinstance(node.args[0], ast.Name) and node.args[0].id in ("be", "backend", "self")):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.func.id} probe of a backend")
    assert not found, "\n".join(found)
