"""Units of the job spec, YAML line numbers, overrides, shapes (nodes → workers), durations and settings;
plus the read-only commands over the shipped project (schema, jobs, validate). No cluster, no network."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from rtjob.backends import backend_class
from rtjob.backends import configured as load_settings
from rtjob.core.errors import BadInput
from rtjob.jobspec.overrides import apply_set, parse_duration, parse_env, parse_set
from rtjob.jobspec.project import find_root
from rtjob.jobspec.resolve import Overrides, ResolvedJob, load_job, render_args
from rtjob.jobspec.resolve import resolve as resolve_for
from rtjob.jobspec.schema import JobSpec, validate_compute_config, validate_job
from rtjob.jobspec.yamlsrc import parse_yaml
from support.cli import run_in_process
from support.scrub import scrub, scrubbed_environ
from support.shipped import shipped_jobs

REPO = Path(__file__).resolve().parents[2]

TRAIN_JOB = """\
name: train
entrypoint: python -m training.ray_ddp
compute_config: g5-4xlarge
nodes: 2
args:
  epochs: 3
  global_batch_size: 128
  dataset: mnist
env_vars:
  WANDB_PROJECT: demo
local:
  args:
    epochs: 1
    dataset: synthetic
  env_vars:
    WANDB_MODE: offline
"""


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """No setting leaks in from the caller's environment; RTJOB_HOME is private."""
    scrub(monkeypatch)
    monkeypatch.setenv("RTJOB_HOME", str(tmp_path / "rtjob-home"))
    return monkeypatch


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A throw-away project: jobs/train.yaml plus the repository's compute configs."""
    root = tmp_path / "project"
    (root / "jobs").mkdir(parents=True)
    (root / "jobs" / "train.yaml").write_text(TRAIN_JOB)
    shutil.copytree(REPO / "compute_configs", root / "compute_configs")
    return root


def _settings(root: Path, **flags: object):
    return load_settings(dict(flags), root)


def resolve(ref: str, settings, overrides: Overrides) -> ResolvedJob:
    """Resolve for the backend the settings name, as `rtjob submit` does (the registry gives its placement)."""
    return resolve_for(ref, settings, overrides, backend_class(settings.get("backend")).placement())


# -- the schema ---------------------------------------------------------------------------------------------


def test_minimal_job_validates_with_defaults():
    spec = validate_job(parse_yaml("name: tiny\nentrypoint: python x.py\n", "jobs/tiny.yaml"))
    assert spec.name == "tiny" and spec.entrypoint == "python x.py"
    assert spec.nodes == 1
    assert spec.strategy == "custom"
    assert spec.args == {} and spec.env_vars == {} and spec.tags == {} and spec.excludes == []
    assert spec.max_failures == 0 and spec.max_retries == 0 and spec.timeout_s is None
    assert spec.working_dir is None and spec.compute_config is None and spec.storage is None
    assert spec.worker_group is None and spec.requirements is None and spec.image_uri is None
    assert (spec.resources_per_worker.cpus, spec.resources_per_worker.gpus) == (None, None)
    assert spec.local.args == {} and spec.local.env_vars == {} and spec.local.cpus_per_node == 1
    assert spec == JobSpec(name="tiny", entrypoint="python x.py")


def test_shipped_jobs_validate():
    shown = [name for _, _, name in shipped_jobs()]  # validated as they load; a pipeline's steps each
    assert "jobs/ddp-resnet.yaml" in shown and "jobs/voice-clone.yaml step train" in shown
    assert "jobs/sd-pretrain.yaml step pretrain" in shown
    for path in sorted((REPO / "compute_configs").glob("*.y*ml")):
        validate_compute_config(parse_yaml(path.read_text(), path.name))


def test_env_var_and_tag_numbers_are_taken_as_text_but_mappings_are_not():
    spec = validate_job(parse_yaml("name: a\nentrypoint: b\nenv_vars:\n  OMP_NUM_THREADS: 4\n  RATIO: 0.5\n"
                                   "tags:\n  priority: 1\n  team: ml\n", "j.yaml"))
    assert spec.env_vars == {"OMP_NUM_THREADS": "4", "RATIO": "0.5"}
    assert spec.tags == {"priority": "1", "team": "ml"}
    with pytest.raises(BadInput, match=r"j\.yaml:4: tags\.owner"):
        validate_job(parse_yaml("name: a\nentrypoint: b\ntags:\n  owner: [a, b]\n", "j.yaml"))
    with pytest.raises(BadInput, match=r"j\.yaml:4: env_vars\.B"):
        validate_job(parse_yaml("name: a\nentrypoint: b\nenv_vars:\n  B:\n    c: 1\n", "j.yaml"))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('args:\n  "bad flag": 1\n', r"^j\.yaml:3: args: value error, 'bad flag' is not a valid flag name"),
        ("env_vars:\n  1BAD: x\n", r"^j\.yaml:3: env_vars: value error, '1BAD' is not a valid environment variable"),
        ("timeout_s: 0\n", r"^j\.yaml:3: timeout_s: input should be greater than 0$"),
        ("local:\n  cpus_per_node: 0\n", r"^j\.yaml:4: local\.cpus_per_node: input should be greater than or equal"),
        ("local:\n  arg: {}\n", r"^j\.yaml:4: unknown key 'local\.arg'; did you mean 'args'\?"),
    ],
)
def test_more_schema_errors_are_one_located_line(text: str, message: str):
    with pytest.raises(BadInput, match=message) as err:
        validate_job(parse_yaml("name: a\nentrypoint: b\n" + text, "j.yaml"))
    assert "\n" not in err.value.message


def test_compute_config_must_be_a_mapping():
    with pytest.raises(BadInput, match=r"^cc\.yaml:1: a compute config must be a YAML mapping"):
        validate_compute_config(parse_yaml("- a\n", "cc.yaml"))


def test_a_typo_is_reported_before_the_missing_key_it_causes():
    with pytest.raises(BadInput) as err:
        validate_job(parse_yaml("name: a\nentrypont: b\n", "jobs/a.yaml"))
    assert err.value.message.startswith("jobs/a.yaml:2: unknown key 'entrypont'; did you mean 'entrypoint'?")


# -- YAML line numbers --------------------------------------------------------------------------------------

LINED = """\
# a comment first
name: demo
entrypoint: python train.py
args:
  epochs: 3
  layers:
    - 64
    - 128
excludes: [a, b]
resources_per_worker:
  cpus: 2
"""


def test_yamlsrc_lines_of_nested_keys_and_list_items():
    located = parse_yaml(LINED, "jobs/demo.yaml")
    lines = located.lines
    assert lines[("name",)] == 2
    assert lines[("args",)] == 4
    assert lines[("args", "epochs")] == 5
    assert lines[("args", "layers")] == 6
    assert lines[("args", "layers", 0)] == 7
    assert lines[("args", "layers", 1)] == 8
    assert lines[("excludes", 1)] == 9
    assert lines[("resources_per_worker", "cpus")] == 11
    # An unknown deeper path falls back to its deepest known prefix.
    assert located.line_of(("args", "epochs", "nope")) == 5
    assert located.where(("resources_per_worker", "cpu")) == "jobs/demo.yaml:10"
    assert located.where(("args", "layers", 1)) == "jobs/demo.yaml:8"


def test_validation_error_points_at_the_nested_line():
    text = LINED.replace("  cpus: 2", "  cpus: -2")
    with pytest.raises(BadInput, match=r"^jobs/demo\.yaml:11: resources_per_worker\.cpus: input should be greater"):
        validate_job(parse_yaml(text, "jobs/demo.yaml"))


def test_compute_config_error_in_second_list_item_has_its_line():
    text = """\
worker_nodes:
  - name: cpu
    instance_type: m5.xlarge
  - name: gpu
    instance_type: g5.4xlarge
    market_type: CHEAP
"""
    with pytest.raises(BadInput, match=r"^cc\.yaml:6: worker_nodes\[1\]\.market_type: not a valid value; expected one of"):
        validate_compute_config(parse_yaml(text, "cc.yaml"))


def test_malformed_yaml_reports_file_and_line():
    with pytest.raises(BadInput, match=r"^jobs/x\.yaml:3: invalid YAML"):
        parse_yaml("name: a\nentrypoint: b\n  nodes: 2\n", "jobs/x.yaml")
    with pytest.raises(BadInput, match=r"^jobs/x\.yaml:2: invalid YAML: duplicate key 'name' \(first on line 1\)"):
        parse_yaml("name: a\nname: b\n", "jobs/x.yaml")


# -- --set / --env ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        ("args.epochs=5", 5),
        ("args.lr=1e-3", "1e-3"),  # a number Python would print differently keeps its text (YAML as written)
        ("args.version=1.10", "1.10"),
        ("args.lr=0.5", 0.5),
        ("args.dataset=off", "off"),  # YAML 1.2: only true/false are booleans
        ("nodes=010", 10),  # outside args: YAML 1.2 numbers (not octal)
        ("args.flag=true", True),
        ("args.flag=false", False),
        ("args.name=resnet", "resnet"),
        ("args.quoted='5'", "5"),
        ("args.quoted=\"1e-3\"", "1e-3"),
        ("args.layers=[64, 128]", [64, 128]),
        ("args.empty=", ""),
    ],
)
def test_set_values_are_yaml_typed(item: str, expected: object):
    [(parts, value, original)] = parse_set([item])
    assert parts == item.split("=", 1)[0].split(".")
    assert value == expected and type(value) is type(expected)
    assert original == item


def test_set_applies_nested_paths_and_creates_mappings():
    data: dict = {"name": "a", "args": {"epochs": 1}}
    for parts, value, item in parse_set(["args.epochs=5", "resources_per_worker.gpus=1", "nodes=3"]):
        apply_set(data, parts, value, item)
    assert data == {"name": "a", "args": {"epochs": 5}, "resources_per_worker": {"gpus": 1}, "nodes": 3}


def test_set_and_env_through_load_job(project: Path, clean_env: pytest.MonkeyPatch):
    overrides = Overrides(sets=("args.epochs=5", "args.lr=1e-3", "args.flag=true", "env_vars.OMP_NUM_THREADS=4"),
                          env=("WANDB_PROJECT=other",))
    spec, shown = load_job("train", project, overrides)
    assert shown == "jobs/train.yaml"
    assert spec.args["epochs"] == 5 and type(spec.args["epochs"]) is int
    assert spec.args["lr"] == "1e-3"  # passed to the script as written
    assert spec.args["flag"] is True
    assert spec.env_vars == {"WANDB_PROJECT": "other", "OMP_NUM_THREADS": "4"}


def test_parse_env_keeps_everything_after_the_first_equals():
    assert parse_env(["A=1", "B=x=y", "C="]) == {"A": "1", "B": "x=y", "C": ""}


# -- shapes: --nodes × compute config → workers -------------------------------------------------------------


def test_ray_g5_4xlarge_one_gpu_worker_per_node(project: Path, clean_env: pytest.MonkeyPatch):
    job = resolve("train", _settings(project, backend="ray"), Overrides(nodes=3))
    assert job.backend == "ray" and job.compute_config_name == "g5-4xlarge"
    assert job.worker_group is not None and job.worker_group.instance_type == "g5.4xlarge"
    assert (job.nodes, job.workers_per_node, job.num_workers) == (3, 1, 3)
    assert job.worker_resources() == {"CPU": 1.0, "GPU": 1.0}
    assert job.use_gpu
    env = job.env_vars
    assert (env["RTJOB_NODES"], env["RTJOB_NUM_WORKERS"], env["RTJOB_GPUS_PER_WORKER"], env["RTJOB_USE_GPU"]) == (
        "3", "3", "1", "1")
    # The local profile is only for the embedded cluster.
    assert job.spec.args == {"epochs": 3, "global_batch_size": 128, "dataset": "mnist"}
    assert "WANDB_MODE" not in env


def test_ray_g5_12xlarge_four_gpu_workers_per_node(project: Path, clean_env: pytest.MonkeyPatch):
    job = resolve("train", _settings(project, backend="ray", compute_config="g5-12xlarge"), Overrides(nodes=3))
    assert job.compute_config_name == "g5-12xlarge"
    assert (job.nodes, job.workers_per_node, job.num_workers) == (3, 4, 12)
    assert job.worker_resources() == {"CPU": 1.0, "GPU": 1.0}
    assert job.env_vars["RTJOB_NUM_WORKERS"] == "12"
    # --nodes above the group's max_nodes is allowed (a note, not an error).
    assert any("max_nodes=2" in note for note in job.notes)


def test_ray_job_nodes_default_from_spec(project: Path, clean_env: pytest.MonkeyPatch):
    job = resolve("train", _settings(project, backend="ray"), Overrides())
    assert (job.nodes, job.num_workers) == (2, 2)


def test_local_n_cpu_workers_and_the_local_profile(project: Path, clean_env: pytest.MonkeyPatch):
    job = resolve("train", _settings(project), Overrides(nodes=3))
    assert job.backend == "local"
    assert (job.nodes, job.workers_per_node, job.num_workers) == (3, 1, 3)
    assert job.worker_resources() == {"CPU": 1.0}
    assert not job.use_gpu and job.env_vars["RTJOB_USE_GPU"] == "0" and job.env_vars["RTJOB_GPUS_PER_WORKER"] == "0"
    assert job.spec.args == {"epochs": 1, "global_batch_size": 128, "dataset": "synthetic"}
    assert job.entrypoint == "python -m training.ray_ddp --epochs 1 --global-batch-size 128 --dataset synthetic"
    assert job.env_vars["WANDB_MODE"] == "offline" and job.env_vars["WANDB_PROJECT"] == "demo"
    assert any("g5-4xlarge" in note and "no GPU" in note for note in job.notes)
    home = Path(os.environ["RTJOB_HOME"])
    assert job.storage_uri == f"{home}/local/storage/train/{job.run_id}"
    assert not home.exists(), "resolving must not write anything"


def test_set_overrides_the_local_profile(project: Path, clean_env: pytest.MonkeyPatch):
    job = resolve("train", _settings(project), Overrides(sets=("args.epochs=7",), submission_id="fixed-id"))
    assert job.spec.args["epochs"] == 7 and job.run_id == "fixed-id"


# -- render_args, durations ---------------------------------------------------------------------------------


def test_render_args():
    assert render_args({"global_batch_size": 128}) == ["--global-batch-size", "128"]
    assert render_args({"use_gpu": True}) == ["--use-gpu"]
    assert render_args({"resume": False, "seed": None}) == []
    assert render_args({"layers": [64, 128], "lr": 0.001}) == ["--layers", "64", "128", "--lr", "0.001"]
    assert render_args({"name": "a b", "already-dashed": 1}) == ["--name", "a b", "--already-dashed", "1"]
    assert render_args({}) == []


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("15m", 900), ("2h", 7200), ("1.5h", 5400), ("45", 45), ("500ms", 0.5), ("1d", 86400),
     (" 10 min ", 600), ("3H", 10800)],
)
def test_parse_duration(text: str, seconds: float):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["5x", "-3", "0", "0s", "", "h", "1.5.2h"])
def test_parse_duration_rejects(text: str):
    with pytest.raises(BadInput, match="^--timeout "):
        parse_duration(text)


# -- settings: flags > env > [tool.rtjob], with sources -----------------------------------------------------


def test_settings_precedence_and_sources(tmp_path: Path, clean_env: pytest.MonkeyPatch):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.rtjob]\naddress = "http://from-pyproject:8265"\nstorage = "s3://from-pyproject/runs"\n'
        'compute_config = "g5-4xlarge"\nverify_tls = false\nstorage_check = false\n'
    )
    clean_env.setenv("RTJOB_PROJECT", str(tmp_path))
    clean_env.setenv("RTJOB_ADDRESS", "http://from-env:8265")
    clean_env.setenv("RAY_ADDRESS", "http://from-ray-env:8265")  # lower than RTJOB_ADDRESS
    clean_env.setenv("RTJOB_STORAGE", "s3://from-env/runs")
    clean_env.setenv("RAY_JOB_HEADERS", '{"X-Team": "ml"}')
    settings = load_settings({"address": "http://from-flag:8265", "storage": None, "headers": {"X-Team": "flag"}})
    assert settings.root == tmp_path.resolve()
    table = f"{tmp_path.resolve() / 'pyproject.toml'} [tool.rtjob]"
    expected = {
        "address": ("http://from-flag:8265", "flag --address"),
        "storage": ("s3://from-env/runs", "env RTJOB_STORAGE"),
        "compute_config": ("g5-4xlarge", table),
        "verify_tls": (False, table),
        "storage_check": (False, table),
        "headers": ({"X-Team": "flag"}, "flag --headers"),
        "backend": ("ray", "default (an address is set by flag --address)"),
    }
    assert {k: (s.value, s.source) for k, s in settings.values.items()} == expected


def test_settings_env_over_pyproject_and_defaults(tmp_path: Path, clean_env: pytest.MonkeyPatch):
    (tmp_path / "pyproject.toml").write_text('[tool.rtjob]\naddress = "http://from-pyproject:8265"\n')
    clean_env.setenv("RAY_ADDRESS", "http://from-ray-env:8265")
    settings = load_settings({}, tmp_path)
    assert (settings.get("address"), settings.source("address")) == ("http://from-ray-env:8265", "env RAY_ADDRESS")
    clean_env.delenv("RAY_ADDRESS")
    settings = load_settings({}, tmp_path)
    assert settings.source("address") == f"{tmp_path / 'pyproject.toml'} [tool.rtjob]"
    assert (settings.get("verify_tls"), settings.source("verify_tls")) == (True, "default")
    assert (settings.get("storage_check"), settings.source("storage_check")) == (True, "default")
    clean_env.setenv("RTJOB_STORAGE_CHECK", "off")
    settings = load_settings({}, tmp_path)
    assert (settings.get("storage_check"), settings.source("storage_check")) == (False, "env RTJOB_STORAGE_CHECK")
    clean_env.delenv("RTJOB_STORAGE_CHECK")
    (tmp_path / "pyproject.toml").write_text("[tool.rtjob]\n")
    settings = load_settings({}, tmp_path)
    assert (settings.get("backend"), settings.source("backend")) == ("local", "default (no address configured)")
    assert settings.source("storage") == "unset"


def test_find_root_from_env_or_nearest_jobs_folder(tmp_path: Path, clean_env: pytest.MonkeyPatch):
    (tmp_path / "jobs").mkdir()
    (tmp_path / "deep" / "er").mkdir(parents=True)
    assert find_root(tmp_path / "deep" / "er") == tmp_path.resolve()
    clean_env.setenv("RTJOB_PROJECT", str(tmp_path / "deep"))
    assert find_root(tmp_path) == (tmp_path / "deep").resolve()


# -- read-only commands over the shipped project (the CLI's entry point, in this process) -------------------

REPO_COMMANDS = {
    "schema": ["schema"],
    "jobs-text": ["jobs"],
    "jobs-json": ["jobs", "--output", "json"],
    "validate": ["validate"],
}


@pytest.fixture(scope="module")
def repo_cli(tmp_path_factory: pytest.TempPathFactory):
    home = tmp_path_factory.mktemp("home")
    env = scrubbed_environ()
    env["RTJOB_HOME"] = str(home)

    yield {name: run_in_process(*args, env=env, cwd=REPO) for name, args in REPO_COMMANDS.items()}
    assert not any(home.iterdir()), "read-only commands wrote under RTJOB_HOME"


def _ok(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    return proc.stdout


def test_schema_prints_json_schema(repo_cli):
    schema = json.loads(_ok(repo_cli["schema"]))
    assert schema["properties"]["name"]["type"] == "string"
    assert "pattern" in schema["properties"]["name"]
    assert set(schema["required"]) == {"name", "entrypoint"}
    assert schema["additionalProperties"] is False


def test_jobs_lists_the_shipped_jobs(repo_cli):
    text = _ok(repo_cli["jobs-text"])
    assert "ddp-resnet" in text and "ray-ddp" in text and "g5-4xlarge" in text
    rows = {row["name"]: row for row in json.loads(_ok(repo_cli["jobs-json"]))}
    assert rows["ddp-resnet"]["error"] is None
    assert rows["ddp-resnet"]["strategy"] == "ray-ddp" and rows["ddp-resnet"]["compute_config"] == "g5-4xlarge"
    assert rows["ddp-resnet"]["file"] == "jobs/ddp-resnet.yaml"
    assert set(rows) == {p.stem for p in (REPO / "jobs").glob("*.y*ml")}


def test_validate_with_no_args_passes_over_the_repository(repo_cli):
    out = _ok(repo_cli["validate"])
    assert repo_cli["validate"].stderr == ""
    shown = sorted(line.split()[1] for line in out.splitlines())
    assert all(line.startswith("ok ") for line in out.splitlines())
    expected = sorted([f"jobs/{p.name}" for p in (REPO / "jobs").glob("*.y*ml")]
                      + [f"compute_configs/{p.name}" for p in (REPO / "compute_configs").glob("*.y*ml")])
    assert shown == expected
