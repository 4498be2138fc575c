"""Adoption: rtjob as a team would use it. The wheel is built and installed into a fresh venv (not editable, the
`[ray]` client extra only: no torch), a project is made in a temp folder with a training script that knows
nothing of rtjob (it takes its output folder from an argument the job passes), then `rtjob init`, `submit
--nodes 2` on the embedded cluster to SUCCEEDED (the project's requirements.txt names a wheel on a package index
served on loopback: the cluster's real pip installs it), `pull` and `results` of its output. Nothing is mocked; the
tool runs from outside this repository, so it can only use what the wheel carries; what the wheel holds is checked
too (the one wheel build of the suite)."""

from __future__ import annotations

import json
import os
import subprocess
import zipfile
from pathlib import Path

import pytest
from support import tool_venv
from support.cli import base_env, record
from support.pypi_index import SimpleIndex, build_wheel

# The user's own script: Ray core only (the client extra has no torch and no Ray Train), a linear model fitted by
# gradients from one actor per node (1 CPU each: two actors need both nodes), one checkpoint folder per epoch and
# a metrics history, in the folder --output-dir names.
TRAIN_PY = '''\
import argparse, json, os

import ray
from adoption_helper import LEARNING_RATE  # the project's own dependency: requirements.txt, from its index

parser = argparse.ArgumentParser()
parser.add_argument("--output-dir", required=True)
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--num-workers", type=int, default=2)
args = parser.parse_args()

ray.init()
points = [(i / 100, 3 * (i / 100) + 1) for i in range(100)]
shards = [points[i::args.num_workers] for i in range(args.num_workers)]


@ray.remote(num_cpus=1)
class Worker:
    def __init__(self, shard):
        self.shard = shard

    def gradient(self, w, b):
        shard = self.shard
        gw = sum(2 * (w * x + b - y) * x for x, y in shard) / len(shard)
        gb = sum(2 * (w * x + b - y) for x, y in shard) / len(shard)
        loss = sum((w * x + b - y) ** 2 for x, y in shard) / len(shard)
        return gw, gb, loss, ray.get_runtime_context().get_node_id()


workers = [Worker.remote(shard) for shard in shards]


w = b = 0.0
history = []
for epoch in range(1, args.epochs + 1):
    nodes = set()
    for _ in range(40):
        results = ray.get([worker.gradient.remote(w, b) for worker in workers])
        w -= LEARNING_RATE * sum(r[0] for r in results) / len(results)
        b -= LEARNING_RATE * sum(r[1] for r in results) / len(results)
        nodes |= {r[3] for r in results}
    loss = sum(r[2] for r in results) / len(results)
    history.append({"epoch": epoch, "train_loss": loss, "nodes": len(nodes)})
    folder = os.path.join(args.output_dir, f"checkpoint_epoch_{epoch:04d}")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "model.json"), "w") as f:
        json.dump({"w": w, "b": b}, f)
    with open(os.path.join(args.output_dir, "metrics.json"), "w") as f:
        json.dump(history, f)
    print(f"epoch {epoch} loss {loss:.6f} on {history[-1]['nodes']} node(s)", flush=True)
'''


# Variables that would import rtjob from elsewhere than what the wheel installed (a checkout on PYTHONPATH).
NOT_THE_WHEEL = ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")


def _run(cmd: list[str], env: dict[str, str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    record(proc.stdout, proc.stderr)
    return proc


@pytest.fixture(scope="module")
def tool() -> Path:
    """The installed `rtjob` console script: the wheel in a fresh venv, client extra only (support/tool_venv.py;
    tests/conftest.py started the install when this test was collected)."""
    venv = tool_venv.start().wait()
    env = {k: v for k, v in os.environ.items() if k not in NOT_THE_WHEEL}
    no_torch = subprocess.run([str(venv / "bin" / "python"), "-c", "import torch"], capture_output=True, env=env)
    assert no_torch.returncode != 0, "the client extra must not pull torch"
    editable = subprocess.run([str(venv / "bin" / "python"), "-c", "import rtjob; print(rtjob.__file__)"],
                              capture_output=True, text=True, check=True, env=env)
    assert str(venv) in editable.stdout, f"rtjob must come from the installed wheel: {editable.stdout}"
    return venv / "bin" / "rtjob"


def test_the_wheel_carries_rtjob_the_contract_training_and_builtins(tool: Path) -> None:
    """What the wheel the tool was installed from holds (built once, for both tests)."""
    from rtjob.jobspec import catalog

    names = set(zipfile.ZipFile(tool_venv.start().wheel()).namelist())
    assert {"rtjob/main.py", "rtjob/py.typed", "rtjob_contract/__init__.py", "rtjob_training/__init__.py",
            "rtjob_training/ray_ddp.py", "rtjob/jobspec/builtin_compute_configs/g5-4xlarge.yaml"} <= names
    assert len([n for n in names if n.startswith("rtjob/jobspec/builtin_compute_configs/")]) == len(catalog.CATALOG)
    assert not any(n.startswith(("training/", "tests/", "jobs/")) for n in names)
    # Built from a clean clone without npm: no chart library, and `rtjob ui` says so in one line (exit 2).
    assert not any(n.startswith("rtjob/ui/static/vendor/") for n in names) and "rtjob/ui/static/app.js" in names
    env = {k: v for k, v in os.environ.items() if k not in NOT_THE_WHEEL}
    ui = _run([str(tool), "ui", "--port", "0"], env, tool.parent, timeout=120)
    assert ui.returncode == 2 and ui.stderr.count("\n") == 1 and "make ui-assets" in ui.stderr, ui.stderr


def test_init_submit_pull_results_in_a_fresh_project(tool: Path, tmp_path: Path) -> None:
    """The project declares its dependency in requirements.txt, from a package index of its own (served here on
    loopback): init points the job at it, and the first submit installs it through the cluster's real pip path."""
    project = tmp_path / "my-project"
    project.mkdir()
    (project / "train.py").write_text(TRAIN_PY)
    wheel = build_wheel(tmp_path, "adoption-helper", "1.0", "LEARNING_RATE = 0.5\n")
    with SimpleIndex(tmp_path / "index", {"adoption-helper": wheel}) as index:
        (project / "requirements.txt").write_text(f"--index-url {index.url}\nadoption-helper==1.0\n")
        _walk_through(tool, tmp_path, project)


def _walk_through(tool: Path, tmp_path: Path, project: Path) -> None:
    env = base_env(tmp_path / "rtjob-home")
    for name in NOT_THE_WHEEL:
        env.pop(name, None)
    env["PATH"] = f"{tool.parent}{os.pathsep}{env['PATH']}"
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    rtjob = str(tool)

    init = _run([rtjob, "init", "--entrypoint", 'python train.py --output-dir "$RTJOB_RUN_DIR"'], env, project)
    assert init.returncode == 0, init.stderr
    assert "created" in init.stdout and (project / "jobs" / "train.yaml").is_file()
    assert (project / "compute_configs").is_dir() and (project / "rtjob.toml").is_file()
    assert ".env*" in (project / ".gitignore").read_text().splitlines()
    assert "\nrequirements: ../requirements.txt\n" in (project / "jobs" / "train.yaml").read_text()
    again = _run([rtjob, "init"], env, project)
    assert again.returncode == 0 and "created" not in again.stdout, again.stdout  # never overwrites

    validate = _run([rtjob, "validate"], env, project)
    assert validate.returncode == 0 and "warning" not in validate.stderr, validate.stdout + validate.stderr
    run_id = "adoption-run-1"
    try:
        submit = _run([rtjob, "submit", "train", "--nodes", "2", "--submission-id", run_id], env, project, timeout=900)
        out = submit.stdout + submit.stderr
        assert submit.returncode == 0, out[-4000:]
        assert "SUCCEEDED" in out and "epoch 2 loss" in out and "on 2 node(s)" in out, out[-4000:]
        # The upload came from this project, not the repository (the log shows the script's output, not its command).
        assert f"uploading working dir {project.resolve()} (" in out or f"uploading working dir {project} (" in out, \
            out[-4000:]

        pull = _run([rtjob, "pull", run_id], env, project)
        assert pull.returncode == 0, pull.stdout + pull.stderr
        (model_file,) = project.glob(f"rtjob-runs/{run_id}/checkpoint_epoch_0002/model.json")
        model = json.loads(model_file.read_text())
        assert abs(model["w"] - 3) < 0.05 and abs(model["b"] - 1) < 0.05, model  # it learned y = 3x + 1

        for source in (run_id, f"rtjob-runs/{run_id}"):  # the run's storage, then the pulled copy
            results = _run([rtjob, "results", source, "-o", "json"], env, project)
            assert results.returncode == 0, results.stderr
            (run,) = json.loads(results.stdout)
            assert [row["epoch"] for row in run["history"]] == [1, 2], results.stdout
            assert 0 < run["history"][-1]["train_loss"] < run["history"][0]["train_loss"] < 0.1, run["history"]
    finally:
        down = _run([rtjob, "local", "down"], env, project, timeout=300)
        assert down.returncode == 0, down.stderr
