"""The contract between the client (cli/rtjob) and the code it runs (training/) has one home, rtjob_contract.

These tests fail when the two sides drift: a side spells a contract value itself instead of naming it, a side
uses an RTJOB_* variable the contract does not define, the client stops setting a variable the entrypoints
read, or the contract module grows a dependency (training on a cluster imports it from the working dir).
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest
from rtjob.jobspec.contexts import CONTEXT_ENV
from rtjob.jobspec.settings import ENV_NAMES
from support.cli import REPO

import rtjob_contract as contract

CLI = REPO / "cli" / "rtjob"
TRAINING = REPO / "training"
CONSTANTS = {name: value for name, value in vars(contract).items() if name.isupper() and isinstance(value, str)}
_FILE_NAME = re.compile(r"[^./]\.[A-Za-z0-9]+$")  # model.pt, rtjob-run.json, driver.log


def _distinctive(name: str, value: str) -> bool:
    """A value no code writes for another reason: a variable, metadata or tag key, a file name, an rtjob or
    checkpoint_ prefix."""
    return name.startswith(("ENV_", "META_", "TAG_")) or value.startswith(("rtjob", "checkpoint_")) \
        or bool(_FILE_NAME.search(value))


# Values that must be named through the contract, never spelled: every distinctive one, derived.
SPELLED = {value: name for name, value in CONSTANTS.items() if _distinctive(name, value)}
# Ordinary words that appear elsewhere for other reasons ("epoch", "logs", "samples"): checked through the code
# that reads and writes them instead (test_results_reads_the_metric_keys_..., test_the_ordinary_words_...).
THROUGH_READERS = {name for name, value in CONSTANTS.items() if not _distinctive(name, value)}
RTJOB_VAR = re.compile(r"\bRTJOB_[A-Z0-9_]+\b")
# The client's own settings and state (never sent to a job), and the torchrun launcher's private marker.
CLIENT_ONLY = {name for names in ENV_NAMES.values() for name in names if name.startswith("RTJOB_")} | {
    CONTEXT_ENV, "RTJOB_HOME", "RTJOB_PROJECT", "RTJOB_DEBUG", "RTJOB_SUBMIT_TIMEOUT_S", "RTJOB_FOLLOW_GRACE_S",
    "RTJOB_STUCK_GRACE_S", "RTJOB_LOCAL_DASHBOARD_WAIT_S", "RTJOB_LOCAL_START_TIMEOUT_S", "RTJOB_S3_ENGINE",
    "RTJOB_S3_OBJECTS", "RTJOB_UI_TOKEN", "RTJOB_VERBOSE"}
TRAINING_ONLY = {"RTJOB_TORCHRUN_TREE"}


def _sources(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


def _strings(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)]


def test_every_contract_value_is_scanned_for_or_checked_through_its_readers() -> None:
    assert {"SCALER_FILE", "RUN_RECORD_FILE", "DRIVER_LOG_FILE", "MODEL_FILE", "META_JOB", "TAG_RUN_ID",
            "EPOCH_CHECKPOINT_PREFIX", "ENV_RUN_NAME"} <= set(SPELLED.values())
    assert {"RUN_LOGS_DIR", "SAMPLES_DIR", "LOG_PART_PREFIX", "EVENT_FIRST_STEP", "EVENT_WORKERS_STARTED",
            "ROLE_SUPERVISOR", "SUPERVISOR_SUFFIX", "STEP_KEY", "STEP_TIME", "STEP_SEALED",
            "EVENT_STEP_ROW", "EVENT_SYSTEM_ROW", "STEP_TRIAL", "EVENT_OUTPUTS_NOT_STORED", "ROLE_SYNC", "SYNC_SUFFIX",
            "EVENT_AT_KEY", "EVENT_TRAIN_CONTROLLER_STARTED", "EVENT_WORKER_GROUP_STARTED", "EVENT_PROCESS_GROUP_READY",
            "EVENT_TRAIN_FN_STARTED", "EVENT_FIRST_REPORT",
            *(n for n in CONSTANTS if n.startswith("METRIC_"))} == THROUGH_READERS
    assert len(SPELLED) + len(THROUGH_READERS) == len(CONSTANTS)  # no two names share a value


def _named(folder: Path) -> set[str]:
    """The contract's names a side reads through it: ``contract.NAME`` or ``from rtjob_contract import NAME``."""
    names: set[str] = set()
    for path in _sources(folder):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "contract":
                names.add(node.attr)
            elif isinstance(node, ast.ImportFrom) and node.module == "rtjob_contract":
                names.update(alias.name for alias in node.names)
    return names


def test_the_ordinary_words_are_read_and_written_through_the_contract() -> None:
    """rtjob's log folder in a run (the client alone writes and reads it), the samples folder (training writes,
    `rtjob results` reads) and the evaluation rows' model key; the metric keys: test_results_reads_..."""
    assert {"RUN_LOGS_DIR", "SAMPLES_DIR", "METRIC_MODEL", "LOG_PART_PREFIX", "EVENT_FIRST_STEP"} <= _named(CLI)
    assert {"SAMPLES_DIR", "METRIC_MODEL", "EVENT_FIRST_STEP", "EVENT_WORKERS_STARTED", "METRIC_PRECISION"} \
        <= _named(TRAINING)
    assert "TIMELINE_EVENTS" in _named(CLI)  # the companion notes every event line the entrypoints print


@pytest.mark.parametrize("side", [CLI, TRAINING], ids=["cli", "training"])
def test_no_side_spells_a_contract_value_itself(side: Path) -> None:
    spelled = [f"{path.relative_to(REPO)}:{line}: {text!r} (use rtjob_contract.{SPELLED[text]})"
               for path in _sources(side) for line, text in _strings(path) if text in SPELLED]
    assert not spelled, "\n".join(spelled)


@pytest.mark.parametrize("side,own", [(CLI, CLIENT_ONLY), (TRAINING, TRAINING_ONLY)], ids=["cli", "training"])
def test_every_rtjob_variable_a_side_names_is_in_the_contract(side: Path, own: set[str]) -> None:
    unknown = sorted({f"{path.relative_to(REPO)}: {var}" for path in _sources(side)
                      for _, text in _strings(path) for var in RTJOB_VAR.findall(text)
                      if var not in contract.ENV_NAMES and var not in own})
    assert not unknown, "RTJOB_* names outside rtjob_contract.ENV_NAMES:\n" + "\n".join(unknown)


def test_the_client_sets_every_variable_the_entrypoints_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What training reads from the environment (its flags' defaults) is what a resolved job carries."""
    from rtjob.backends import backend_class, configured
    from rtjob.jobspec.resolve import Overrides, resolve

    read = {getattr(contract, node.attr) for path in _sources(TRAINING)
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "contract"
            and node.attr.startswith("ENV_")}
    assert {contract.ENV_NUM_WORKERS, contract.ENV_RUN_NAME, contract.ENV_STORAGE_PATH} <= read
    monkeypatch.setenv("RTJOB_HOME", str(tmp_path))
    monkeypatch.delenv("RTJOB_PROJECT", raising=False)
    monkeypatch.chdir(REPO)
    for backend in ("local", "ray"):
        settings = configured({"backend": backend, "address": "http://127.0.0.1:9"}, REPO)
        job = resolve("ddp-resnet", settings, Overrides(nodes=2), backend_class(backend).placement(),
                      storage_flag="s3://bucket/runs" if backend == "ray" else None)
        sent = {name for name in job.env_vars if name.startswith("RTJOB_")}
        assert sent <= contract.ENV_NAMES
        # Optional on purpose: the data cache (the entrypoint's default), the schedule's name and a pipeline
        # step's names and inputs (set by a pipeline only; tests/unit/test_pipeline_spec.py checks those).
        optional = {contract.ENV_DATA_DIR, contract.ENV_SCHEDULE, contract.ENV_PIPELINE_ID, contract.ENV_STEP_NAME,
                    contract.ENV_INPUT_URI, contract.ENV_STEP_URIS}
        assert read - optional <= sent, backend


def test_results_reads_the_metric_keys_the_training_loop_writes() -> None:
    from rtjob.storage.results import COLUMNS

    keys = [key for key, _, _ in COLUMNS]
    assert keys == [contract.METRIC_EPOCH, contract.METRIC_TRAIN_LOSS, contract.METRIC_VAL_LOSS,
                    contract.METRIC_VAL_ACCURACY, contract.METRIC_SAMPLES_PER_S, contract.METRIC_EPOCH_TIME]
    loop = (TRAINING / "loop.py").read_text(encoding="utf-8")
    assert "contract.METRIC_EPOCH:" in loop and "contract.METRIC_EPOCH_TIME:" in loop
    # The rest are "<train_|val_><stat>" from loop's EpochStats.as_dict: check the stats' field names.
    fields = re.findall(r"^    (\w+): float", loop, flags=re.M)
    for key in (contract.METRIC_TRAIN_LOSS, contract.METRIC_VAL_LOSS, contract.METRIC_VAL_ACCURACY,
                contract.METRIC_SAMPLES_PER_S):
        assert key.split("_", 1)[1] in fields, key


def test_the_contract_imports_only_the_standard_library() -> None:
    tree = ast.parse(Path(contract.__file__).read_text(encoding="utf-8"))
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {(node.module or "").split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported
    # It sits beside training/ so that the uploaded working dir carries it to the cluster.
    assert Path(contract.__file__).resolve().parent.parent == REPO
