"""`rtjob render` / `submit --dry-run`: the exact Ray submit_job request, its `ray job submit` equivalent,
--explain sources, and the timeout_s wrapper. Offline: nothing is started or contacted."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from rtjob.backends.packaging import RTJOB_EXCLUDES, measure
from rtjob.jobspec.project import PULLED_RUNS_DIR
from support.cli import run_in_process
from support.companion import WRAPPER, inner
from support.scrub import scrubbed_environ

REPO = Path(__file__).resolve().parents[2]
NOWHERE = "http://127.0.0.1:9"  # never contacted by render; if it were, rtjob would exit 3
RUN_ID = "rtjob-ddp-resnet-test-0001"
DDP = ("ddp-resnet", "--nodes", "2", "--submission-id", RUN_ID)

TMP_JOBS = {
    "train.yaml": "name: train\nentrypoint: python train.py\ncompute_config: g5-4xlarge\nargs:\n  epochs: 1\n",
    "timed.yaml": "name: timed\nentrypoint: python train.py\ntimeout_s: 90\nargs:\n  epochs: 1\n",
    "quoted.yaml": "name: quoted\nentrypoint: python -c \"print('it''s here')\"\ntimeout_s: 5\n",
}
G5_4X = "worker_nodes:\n  - name: gpu-workers\n    instance_type: g5.4xlarge\n"


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = scrubbed_environ()
    env.update(RTJOB_HOME=str(home), HOME=str(home.parent / "userhome"))
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def repo_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("home")


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory, repo_home: Path) -> dict[str, subprocess.CompletedProcess[str]]:
    """Every CLI call of this module, through its console entry point in this process (a subprocess costs a
    second to start)."""
    project = tmp_path_factory.mktemp("project")
    (project / "jobs").mkdir()
    for name, text in TMP_JOBS.items():
        (project / "jobs" / name).write_text(text)
    (project / "compute_configs").mkdir()
    (project / "compute_configs" / "g5-4xlarge.yaml").write_text(G5_4X)
    (project / "pyproject.toml").write_text('[tool.rtjob]\ncompute_config = "g5-4xlarge"\n')
    tmp_home = tmp_path_factory.mktemp("home")
    repo_env = _env(repo_home)
    tmp_env = _env(tmp_home, RTJOB_PROJECT=str(project), RTJOB_STORAGE="s3://bucket/runs/")
    explain = ("render", "train", "--backend", "ray", "--address", NOWHERE, "--explain", "--submission-id", "e-1")
    calls: dict[str, tuple[tuple[str, ...], Path, dict[str, str]]] = {
        "render-json": (("render", *DDP, "--output", "json"), REPO, repo_env),
        "dry-run-json": (("submit", *DDP, "--output", "json", "--dry-run"), REPO, repo_env),
        "render-text": (("render", *DDP), REPO, repo_env),
        "ray-json": (("render", *DDP, "--output", "json", "--backend", "ray", "--address", NOWHERE), REPO, repo_env),
        "explain-json": ((*explain, "--output", "json"), project, tmp_env),
        "explain-text": (explain, project, tmp_env),
        "timed": (("render", "timed", "--output", "json"), project, tmp_env),
        "set-timeout": (("render", "train", "--output", "json", "--set", "timeout_s=120"), project, tmp_env),
        "quoted": (("render", "quoted", "--output", "json"), project, tmp_env),
        "timed-bare": (("render", "timed", "--output", "json"), project, {**tmp_env, "RTJOB_COMPANION": "0"}),
        "set-profile": (("render", *DDP, "--output", "json", "--set", "local.args.epochs=5", "--set", "args.lr=0.5",
                         "--set", "local.args.lr=0.25"), REPO, repo_env),
    }

    results = {name: run_in_process(*args, env=env, cwd=cwd) for name, (args, cwd, env) in calls.items()}
    for home in (repo_home, tmp_home):  # render and --dry-run leave nothing behind
        assert not (home / "local").exists(), sorted(home.rglob("*"))
    return results


def _ok(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    return proc.stdout


def _json(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(_ok(proc))
    return data


def _text_sections(text: str) -> tuple[dict[str, Any], str]:
    """(the JSON after 'request:', the command after 'equivalent:') of a text render."""
    head, _, rest = text.partition("\nrequest:\n")
    request, _, equivalent = rest.partition("\nequivalent:\n")
    assert head and request and equivalent, text
    return json.loads(request), equivalent.strip()


def measured_upload(root: Path, excludes: list[str]) -> dict[str, Any]:
    size = measure(root, excludes)
    return {"working_dir": str(root), "files": size.files, "bytes": size.total_bytes}


def _ddp_yaml() -> dict[str, Any]:
    """The shipped job, read independently of rtjob (expectations follow the file if it is edited)."""
    data: dict[str, Any] = yaml.safe_load((REPO / "jobs" / "ddp-resnet.yaml").read_text())
    return data


def _flags(args: dict[str, Any]) -> list[str]:
    """args as command-line flags, the documented way: True → bare flag, False/None → omitted."""
    out: list[str] = []
    for key, value in args.items():
        flag = f"--{key.replace('_', '-')}"
        if value is True:
            out.append(flag)
        elif value is not None and value is not False:
            out += [flag, *(map(str, value) if isinstance(value, list) else [str(value)])]
    return out


def test_render_json_has_the_exact_submit_job_fields(out, repo_home: Path):
    spec = _ddp_yaml()
    data = _json(out["render-json"])
    assert data["backend"] == "local"
    assert data["headers"] == {"Authorization": "****"}
    job = data["submit_job"]
    assert set(job) == {"submission_id", "entrypoint", "runtime_env", "metadata", "entrypoint_num_cpus"}
    assert job["submission_id"] == RUN_ID
    assert job["entrypoint_num_cpus"] == 0
    # The run-side companion runs the entrypoint (and its time limit); inside it, the args with the local
    # profile's on top.
    argv = shlex.split(job["entrypoint"])
    assert argv[:3] == WRAPPER and len(argv) == 4
    assert job["runtime_env"]["env_vars"]["RTJOB_TIME_LIMIT_S"] == str(spec["timeout_s"])
    assert job["metadata"]["rtjob.timeout_s"] == str(spec["timeout_s"])
    local_args = {**spec["args"], **spec["local"]["args"]}
    assert spec["local"]["args"] and local_args != spec["args"]
    assert shlex.split(argv[3]) == [*shlex.split(spec["entrypoint"]), *_flags(local_args)]
    runtime_env = job["runtime_env"]
    assert set(runtime_env) == {"working_dir", "env_vars", "excludes", "py_modules"}
    # The companion travels with the request: rtjob and its contract as py_modules, never pip.
    assert [Path(p).name for p in runtime_env["py_modules"]] == ["rtjob", "rtjob_contract"]
    assert runtime_env["env_vars"]["RAY_JOB_STOP_WAIT_TIME_S"] == "30"
    assert runtime_env["working_dir"] == str(REPO)
    # rtjob's default excludes (secrets, its state, pulled runs), then the job's own.
    assert runtime_env["excludes"] == [*RTJOB_EXCLUDES, *spec.get("excludes", [])]
    assert ".env" in RTJOB_EXCLUDES and f"{PULLED_RUNS_DIR}/" in RTJOB_EXCLUDES
    storage_uri = f"{repo_home}/local/storage/ddp-resnet/{RUN_ID}"
    assert runtime_env["env_vars"] == {
        "PYTHONUNBUFFERED": "1",
        "RAY_CHDIR_TO_TRIAL_DIR": "0",  # Ray Train V2 workers stay in the working dir (./data)
        "RAY_TRAIN_ENABLE_STATE_TRACKING": "1",  # rtjob asks Ray where a plain Train script stored its run
        **spec.get("env_vars", {}),
        **spec["local"].get("env_vars", {}),
        "RTJOB_JOB_NAME": "ddp-resnet",
        "RTJOB_RUN_NAME": RUN_ID,
        "RTJOB_RUN_BACKEND": "local",  # the record its run side writes first says where the run went
        "RTJOB_NODES": "2",
        "RTJOB_NUM_WORKERS": "2",
        "RTJOB_CPUS_PER_WORKER": "1",
        "RTJOB_GPUS_PER_WORKER": "0",
        "RTJOB_USE_GPU": "0",
        "RTJOB_MAX_FAILURES": str(spec.get("max_failures", 0)),
        "RTJOB_STORAGE_PATH": f"{repo_home}/local/storage/ddp-resnet",
        "RTJOB_RUN_DIR": storage_uri,  # where a script unaware of rtjob writes what pull/results read
        "RTJOB_RUN_URI": storage_uri,  # always the run's storage folder (workers on any node write there)
        "RAY_JOB_STOP_WAIT_TIME_S": "30",  # Ray's stop leaves the companion time for its last writes
        "RTJOB_TIME_LIMIT_S": str(spec["timeout_s"]),  # the companion enforces timeout_s
    }
    assert job["metadata"] == {
        "rtjob.job": "ddp-resnet",
        "rtjob.job_file": "jobs/ddp-resnet.yaml",
        "rtjob.nodes": "2",
        "rtjob.workers": "2",
        "rtjob.storage_uri": storage_uri,
        "rtjob.timeout_s": str(spec["timeout_s"]),
        **{f"tag.{k}": v for k, v in spec.get("tags", {}).items()},
    }
    upload = data["run"].pop("upload")
    assert data["run"] == {
        "id": RUN_ID, "job": "ddp-resnet", "job_file": "jobs/ddp-resnet.yaml", "nodes": 2, "workers": 2,
        "resources_per_worker": {"CPU": 1.0}, "compute_config": spec["compute_config"], "storage_uri": storage_uri,
        "run_dir": storage_uri,  # a folder as storage: the script's RTJOB_RUN_DIR is that folder itself
        "profile": "local", "gpus_per_node": 0,  # the embedded cluster: the local profile, no GPU on this machine
        "queue": None,  # no queue: sent at once
    }
    # What is uploaded: the project root, measured as Ray packs it (tests/ excluded by the job).
    assert upload["working_dir"] == str(REPO) and upload["files"] > 0 and upload["bytes"] > 0
    assert upload == measured_upload(REPO, runtime_env["excludes"])


def test_render_on_ray_uses_the_compute_config_and_not_the_local_profile(out):
    spec = _ddp_yaml()
    data = _json(out["ray-json"])
    assert data["backend"] == "ray" and data["address"] == NOWHERE and data["headers"] == {}
    job = data["submit_job"]
    assert shlex.split(inner(job["entrypoint"])) == [*shlex.split(spec["entrypoint"]), *_flags(spec["args"])]
    env = job["runtime_env"]["env_vars"]
    # g5-4xlarge: one A10G per node, so --nodes 2 is 2 GPU workers.
    assert (env["RTJOB_NUM_WORKERS"], env["RTJOB_GPUS_PER_WORKER"], env["RTJOB_USE_GPU"]) == ("2", "1", "1")
    assert "RTJOB_STORAGE_PATH" not in env and "rtjob.storage_uri" not in job["metadata"]
    assert data["run"]["resources_per_worker"] == {"CPU": 1.0, "GPU": 1.0}


def test_a_set_of_the_local_profile_changes_the_profile_and_a_set_of_args_wins_over_it(out):
    """`--set local.args.X` was applied after the profile had been merged, so it changed nothing."""
    flags = shlex.split(inner(_json(out["set-profile"])["submit_job"]["entrypoint"]))
    assert flags[flags.index("--epochs") + 1] == "5" and flags[flags.index("--lr") + 1] == "0.5", flags


def test_submit_dry_run_prints_the_same_request_as_render(out):
    assert _json(out["dry-run-json"]) == _json(out["render-json"])
    assert out["dry-run-json"].stderr == out["render-json"].stderr == ""


def test_text_render_request_matches_json(out):
    text = _ok(out["render-text"])
    request, _ = _text_sections(text)
    data = _json(out["render-json"])
    # The text shows the backend's request; JSON adds rtjob's own keys (run, notes, ...) beside it.
    assert {"backend", "address", "headers", "submit_job"} <= set(request)
    assert request == {k: v for k, v in data.items() if k in request}
    assert re.search(r"^shape:\s+2 node\(s\) × 1 worker\(s\) = 2 worker\(s\), each \{CPU=1\}$", text, re.M)
    assert re.search(rf"^run id:\s+{RUN_ID}$", text, re.M)
    assert re.search(r"^note:\s+compute config g5-4xlarge describes the cloud cluster", text, re.M)


def test_text_render_shows_an_equivalent_ray_job_submit(out):
    request, command = _text_sections(_ok(out["render-text"]))
    job = request["submit_job"]
    argv = shlex.split(command)  # as a POSIX shell would split it
    assert argv[:2] == ["RAY_AUTH_MODE=token", "RAY_AUTH_TOKEN=****"]
    assert argv[2:5] == ["ray", "job", "submit"]
    sep = argv.index("--")
    opts = dict(zip(argv[5:sep:2], argv[6:sep:2], strict=True))
    # The embedded cluster does not run: its address is chosen when it starts, and said so (never a made-up port).
    assert request["address"] == "(chosen when the embedded cluster starts: submit starts it)"
    assert opts["--address"] == "$RAY_API_SERVER_ADDRESS"
    assert opts["--submission-id"] == RUN_ID
    assert json.loads(opts["--runtime-env-json"]) == job["runtime_env"]
    assert json.loads(opts["--metadata-json"]) == job["metadata"]
    assert float(opts["--entrypoint-num-cpus"]) == job["entrypoint_num_cpus"]
    assert argv[sep + 1:] == shlex.split(job["entrypoint"])


def test_equivalent_command_parses_with_rays_own_cli(out):
    """Ray's `ray job submit` (its click command, not invoked) reads the same request from the command."""
    ray_cli = pytest.importorskip("ray.dashboard.modules.job.cli")
    request, command = _text_sections(_ok(out["render-text"]))
    argv = shlex.split(command)[5:]  # after the env assignments and `ray job submit`
    ctx = ray_cli.job_cli_group.commands["submit"].make_context("submit", argv)
    job = request["submit_job"]
    assert ctx.params["address"] == "$RAY_API_SERVER_ADDRESS"  # a shell expands it (rtjob local env sets it)
    assert ctx.params["submission_id"] == RUN_ID
    assert json.loads(ctx.params["runtime_env_json"]) == job["runtime_env"]
    assert json.loads(ctx.params["metadata_json"]) == job["metadata"]
    assert ctx.params["entrypoint_num_cpus"] == job["entrypoint_num_cpus"]
    # Ray joins the entrypoint words with subprocess.list2cmdline; the shell must see the same argv.
    joined = subprocess.list2cmdline(ctx.params["entrypoint"])
    assert shlex.split(joined) == shlex.split(job["entrypoint"])


def test_explain_json_shows_each_setting_and_its_source(out):
    data = _json(out["explain-json"])
    explain = data["explain"]
    assert explain["backend"] == {"value": "ray", "source": "flag --backend"}
    assert explain["address"] == {"value": NOWHERE, "source": "flag --address"}
    assert explain["storage"] == {"value": "s3://bucket/runs/", "source": "env RTJOB_STORAGE"}
    assert explain["compute_config"]["value"] == "g5-4xlarge"
    assert explain["compute_config"]["source"].endswith("pyproject.toml [tool.rtjob]")
    assert explain["verify_tls"] == {"value": True, "source": "default"}
    # The settings took effect: the project's compute config, the env's storage (trailing slash dropped).
    assert data["run"]["compute_config"] == "g5-4xlarge" and data["run"]["workers"] == 1
    assert data["submit_job"]["metadata"]["rtjob.storage_uri"] == "s3://bucket/runs/train/e-1"
    assert data["submit_job"]["runtime_env"]["env_vars"]["RTJOB_STORAGE_PATH"] == "s3://bucket/runs/train"


def test_explain_text_lists_sources(out):
    text = _ok(out["explain-text"])
    assert "\nsettings:\n" in text
    assert re.search(rf"^  address\s+{re.escape(NOWHERE)}\s+from flag --address$", text, re.M)
    assert re.search(r"^  backend\s+ray\s+from flag --backend$", text, re.M)
    assert re.search(r"^  storage\s+s3://bucket/runs/\s+from env RTJOB_STORAGE$", text, re.M)
    assert re.search(r"^  compute_config\s+g5-4xlarge\s+from \S+pyproject\.toml \[tool\.rtjob\]$", text, re.M)
    assert re.search(r"^  verify_tls\s+True\s+from default$", text, re.M)


def test_timeout_s_is_a_fact_of_the_request_the_companion_enforces(out):
    timed = _json(out["timed"])["submit_job"]
    assert timed["entrypoint"] == "python -m rtjob.runside.companion 'python train.py --epochs 1'"
    assert timed["runtime_env"]["env_vars"]["RTJOB_TIME_LIMIT_S"] == "90" and timed["metadata"]["rtjob.timeout_s"] == "90"
    plain = _json(out["explain-json"])["submit_job"]  # no timeout_s
    assert inner(plain["entrypoint"]) == "python train.py --epochs 1"
    assert "RTJOB_TIME_LIMIT_S" not in plain["runtime_env"]["env_vars"] and "rtjob.timeout_s" not in plain["metadata"]
    from_set = _json(out["set-timeout"])["submit_job"]
    assert inner(from_set["entrypoint"]) == "python train.py --epochs 1"
    assert from_set["runtime_env"]["env_vars"]["RTJOB_TIME_LIMIT_S"] == "120"
    # Quotes in the entrypoint survive the wrapping: the companion's shell gets the entrypoint exactly.
    quoted = shlex.split(_json(out["quoted"])["submit_job"]["entrypoint"])
    assert quoted[:3] == WRAPPER and quoted[3] == "python -c \"print('it''s here')\""


def test_without_the_companion_coreutils_timeout_enforces_timeout_s(out):
    bare = _json(out["timed-bare"])["submit_job"]
    assert bare["entrypoint"] == "timeout -k 30 90 bash -c 'python train.py --epochs 1'"
    assert "py_modules" not in bare["runtime_env"] and "RAY_JOB_STOP_WAIT_TIME_S" not in bare["runtime_env"]["env_vars"]
    assert bare["metadata"]["rtjob.timeout_s"] == "90"
