"""rtjob as an installed tool in someone else's project: built-in compute configs, `rtjob init`, jobs that
declare their requirements (and the embedded cluster that skips what it already has), what the wheel packages (its
contents: tests/e2e/test_use_in_a_project.py, which builds it anyway)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from rtjob.jobspec import catalog
from rtjob.jobspec.project import (
    BUILTIN_COMPUTE_CONFIGS,
    builtin_compute_config_names,
    find_compute_config_file,
)
from rtjob.jobspec.requirements import read_requirements, split_satisfied
from rtjob.jobspec.resolve import load_compute_config
from support.cli import REPO, plant, record
from support.project import ProjectCli, write_files
from support.shipped import shipped_jobs

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> ProjectCli:
    """rtjob's own entry point, in this process, standing in ``cli.project`` (a folder outside this repo)."""
    return ProjectCli(tmp_path, monkeypatch, capsys)


# -- built-in compute configs ------------------------------------------------------------------------------


def test_builtins_are_the_catalog_types_and_name_no_cloud(tmp_path: Path) -> None:
    assert set(builtin_compute_config_names()) == {name.replace(".", "-") for name in catalog.CATALOG}
    for name in builtin_compute_config_names():
        cc, shown = load_compute_config(name, tmp_path)
        assert shown == f"<built-in>/{name}.yaml" and cc.cloud is None
        types = [cc.head_node.instance_type] if cc.head_node else []
        types += [group.instance_type for group in cc.worker_nodes]
        assert types and all(catalog.lookup(t) for t in types), name  # the figures live in the catalog only
        assert cc.worker_nodes[0].instance_type.replace(".", "-") == name


def test_a_project_compute_config_overrides_the_builtin_of_its_name(tmp_path: Path) -> None:
    write_files(tmp_path, {"compute_configs/g5-4xlarge.yaml": "worker_nodes:\n  - instance_type: g5.4xlarge\n    max_nodes: 9\n"})
    path, shown = find_compute_config_file("g5-4xlarge", tmp_path)
    assert path == tmp_path / "compute_configs" / "g5-4xlarge.yaml" and shown == "compute_configs/g5-4xlarge.yaml"
    assert find_compute_config_file("g5-12xlarge", tmp_path)[0] == BUILTIN_COMPUTE_CONFIGS / "g5-12xlarge.yaml"


def test_compute_config_list_marks_builtin_and_own(cli) -> None:
    write_files(cli.project, {"compute_configs/g5-4xlarge.yaml": "worker_nodes:\n  - instance_type: g5.4xlarge\n",
                         "compute_configs/mine.yaml": "worker_nodes:\n  - instance_type: g6.xlarge\n    max_nodes: 2\n"})
    res = cli("compute-config", "list", "-o", "json")
    assert res.returncode == 0, res.stderr
    rows = {row["name"]: row for row in json.loads(res.stdout)}
    assert rows["mine"]["origin"] == "project" and rows["mine"]["worker_group"] == "g6.xlarge"
    assert rows["mine"]["max_nodes"] == 2
    assert rows["g5-4xlarge"]["origin"] == "project, overrides built-in"
    assert rows["g5-4xlarge"]["file"] == "compute_configs/g5-4xlarge.yaml"
    assert rows["p5-48xlarge"]["origin"] == "built-in" and rows["p5-48xlarge"]["file"] == "<built-in>/p5-48xlarge.yaml"
    text = cli("compute-config", "list")
    assert re.search(r"^mine\tproject\tg6\.xlarge\t2\t", text.stdout, re.M)  # off a terminal: tab-separated rows


def test_a_job_outside_this_repo_uses_a_builtin_and_the_cloud_setting(cli) -> None:
    write_files(cli.project, {"jobs/t.yaml": "name: t\nentrypoint: python t.py\ncompute_config: g5-12xlarge\nrequirements: []\n"})
    res = cli("render", "t", "--backend", "anyscale")
    assert res.returncode == 0, res.stderr
    assert "note:      no cloud named: Anyscale uses the organization's default cloud" in res.stdout
    assert "shape:     1 node(s) × 4 worker(s)" in res.stdout  # g5.12xlarge: 4 GPUs, from the catalog
    config = json.loads(cli("render", "t", "--backend", "anyscale", "-o", "json", env={"RTJOB_ANYSCALE_CLOUD": "team-cloud"})
                        .stdout)["job_config"]
    assert config["cloud"] == "team-cloud" and "cloud" not in config["compute_config"]
    assert config["compute_config"]["worker_nodes"][0]["instance_type"] == "g5.12xlarge"
    # The job's own cloud wins over the setting; an unknown name lists the built-ins.
    write_files(cli.project, {"jobs/t.yaml": "name: t\nentrypoint: python t.py\ncompute_config: g5-12xlarge\ncloud: own\n"})
    config = json.loads(cli("render", "t", "--backend", "anyscale", "-o", "json").stdout)["job_config"]
    assert config["cloud"] == "own"
    res = cli("render", "t", "--backend", "anyscale", "--compute-config", "g5-4xlarg")
    assert res.returncode == 2 and "did you mean 'g5-4xlarge'?" in res.stderr and "p5-48xlarge" in res.stderr
    # A compute config that names its cloud (a project's own, or one registered on Anyscale) keeps it: the
    # setting fills in only where nothing names one.
    write_files(cli.project, {"jobs/t.yaml": "name: t\nentrypoint: python t.py\ncompute_config: mine\n",
                         "compute_configs/mine.yaml": "cloud: cloud-a\nworker_nodes: [{instance_type: g5.xlarge}]\n"})
    env = {"RTJOB_ANYSCALE_CLOUD": "cloud-b"}
    config = json.loads(cli("render", "t", "--backend", "anyscale", "-o", "json", env=env).stdout)["job_config"]
    assert "cloud" not in config and config["compute_config"]["cloud"] == "cloud-a"
    # compute-config show/apply (what registers a built-in) take the setting's cloud too; a named one stays.
    shown = json.loads(cli("compute-config", "show", "g5-4xlarge", "-o", "json", env=env).stdout)
    assert shown["compute_config"]["cloud"] == "cloud-b", shown
    shown = json.loads(cli("compute-config", "show", "mine", "-o", "json", env=env).stdout)
    assert "cloud-b" not in json.dumps(shown), shown
    res = cli("render", "t", "--backend", "anyscale", "--compute-config", "anyscale:team-g5", "-o", "json", env=env)
    assert res.returncode == 0, res.stderr
    config = json.loads(res.stdout)["job_config"]
    assert "cloud" not in config and config["compute_config"] == "team-g5"


# -- requirements -------------------------------------------------------------------------------------------


def test_requirements_this_environment_satisfies_are_split_off() -> None:
    import importlib.metadata

    pinned = f"torch=={importlib.metadata.version('torch')}"
    missing, present = split_satisfied([
        pinned, "torch==0.0.1", "surely-not-installed-pkg-rtjob", 'pytest ; sys_platform == "no-such-os"',
        "--index-url https://example.invalid/simple", "git+https://example.invalid/x.git", "ray[train]==2.60.0",
        "ray[no-such-extra]", "not a requirement ===",
    ])
    assert present == [pinned, 'pytest ; sys_platform == "no-such-os"', "ray[train]==2.60.0"]
    assert missing == ["torch==0.0.1", "surely-not-installed-pkg-rtjob", "--index-url https://example.invalid/simple",
                       "git+https://example.invalid/x.git", "ray[no-such-extra]", "not a requirement ==="]


def test_a_requirements_file_is_read_relative_to_the_job_file_with_its_includes(tmp_path: Path) -> None:
    write_files(tmp_path, {"jobs/base.txt": "# pins\ntorch==2.14.1  # the one the venv has\n\n",
                      "jobs/extra.txt": "-r base.txt\nrich\n"})
    job = tmp_path / "jobs" / "x.yaml"
    assert read_requirements("extra.txt", job, "jobs/x.yaml") == ["torch==2.14.1", "rich"]
    assert read_requirements(["a"], job, "jobs/x.yaml") == ["a"] and read_requirements(None, job, "x") is None
    write_files(tmp_path, {"jobs/loop.txt": "-r loop.txt\n"})
    with pytest.raises(Exception, match="includes itself"):
        read_requirements("loop.txt", job, "jobs/x.yaml")


def test_render_installs_only_what_the_embedded_cluster_lacks_and_everything_elsewhere(cli) -> None:
    write_files(cli.project, {"jobs/x.yaml": "name: x\nentrypoint: python x.py\nrequirements: req/needs.txt\n",
                         "jobs/req/needs.txt": "torch==2.14.1\nsurely-not-installed-pkg-rtjob==1.0\n"})
    res = cli("render", "x")  # embedded (the default backend): this environment runs the job
    assert res.returncode == 0, res.stderr
    assert "requirements this environment already satisfies are not installed again: torch==2.14.1" in res.stdout
    request = json.loads(cli("render", "x", "-o", "json").stdout)
    assert request["submit_job"]["runtime_env"]["pip"] == ["surely-not-installed-pkg-rtjob==1.0"]
    config = json.loads(cli("render", "x", "--backend", "anyscale", "-o", "json").stdout)["job_config"]
    assert config["requirements"] == ["torch==2.14.1", "surely-not-installed-pkg-rtjob==1.0"]
    # All satisfied: no pip runtime_env at all (Ray would clone the whole virtualenv for it).
    write_files(cli.project, {"jobs/req/needs.txt": "torch==2.14.1\n"})
    assert "pip" not in json.loads(cli("render", "x", "-o", "json").stdout)["submit_job"]["runtime_env"]
    write_files(cli.project, {"jobs/x.yaml": "name: x\nentrypoint: python x.py\nrequirements: gone.txt\n"})
    res = cli("render", "x")
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "requirements file 'gone.txt'" in res.stderr


def test_validate_warns_once_per_job_declaring_neither_image_nor_requirements(cli) -> None:
    write_files(cli.project, {"jobs/bare.yaml": "name: bare\nentrypoint: python t.py\n",
                         "jobs/none.yaml": "name: none\nentrypoint: python t.py\nrequirements: []\n",
                         "jobs/image.yaml": "name: image\nentrypoint: python t.py\nimage_uri: my/image:1\n"})
    res = cli("validate")
    assert res.returncode == 0, res.stderr
    warnings = [line for line in res.stderr.splitlines() if line.startswith("warning")]
    assert warnings == [warnings[0]] and warnings[0].startswith("warning jobs/bare.yaml: declares neither image_uri")
    assert res.stdout.count("ok      jobs/") == 3


def test_shipped_jobs_declare_requirements_pinned_as_the_train_extra(cli) -> None:
    extras = PYPROJECT["project"]["optional-dependencies"]

    def pins(name: str) -> list[str]:  # an extra's requirements, its own `rtjob[other]` extras expanded
        return [pin for spec in extras[name] for pin in (
            [p for other in spec[6:-1].split(",") for p in pins(other)] if spec.startswith("rtjob[") else [spec])]

    extra = {re.split(r"[=<>]", spec)[0]: spec for spec in pins("train")}
    for spec, job, shown in shipped_jobs():  # a pipeline's steps each
        assert spec.requirements is not None or spec.image_uri, shown
        for line in read_requirements(spec.requirements, job, shown) or []:
            name = re.split(r"[=<>]", line)[0]
            assert extra.get(name) == line, f"{shown}: {line} differs from the train extra's {extra.get(name)}"


# -- rtjob init ---------------------------------------------------------------------------------------------


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_init_scaffolds_a_fresh_folder_that_validates(cli) -> None:
    res = cli("init", "fresh", "--entrypoint", "python src/fit.py --epochs 2")
    assert res.returncode == 0, res.stderr
    root = cli.project / "fresh"
    assert sorted(_files(root)) == [".gitignore", "compute_configs/g5-4xlarge.yaml", "jobs/fit.yaml", "rtjob.toml",
                                    "schemas/compute-config.schema.json", "schemas/job.schema.json"]
    assert res.stdout.count("created") == 6
    job = (root / "jobs" / "fit.yaml").read_text()
    assert job.splitlines()[0] == "# yaml-language-server: $schema=../schemas/job.schema.json"
    assert json.loads((root / "schemas" / "job.schema.json").read_text())["title"] == "rtjob job"
    assert '\nentrypoint: "python src/fit.py --epochs 2"\n' in job
    # Its comment says what the script gets: RTJOB_RUN_DIR is a local folder synced to the run's storage URI.
    comment = " ".join(line.lstrip("# ") for line in job.splitlines() if line.startswith("#"))
    assert "RTJOB_RUN_DIR, a local folder on the driver's node that rtjob syncs to this run's folder in its " \
           "storage (RTJOB_RUN_URI" in comment, comment
    assert {".env*", ".rtjob/", "rtjob-runs/"} <= set((root / ".gitignore").read_text().splitlines())
    assert tomllib.loads((root / "rtjob.toml").read_text()) == {}  # every key commented out
    (root / "src").mkdir()
    res = cli("validate", env={"RTJOB_PROJECT": str(root)})
    assert res.returncode == 0 and "warning" not in res.stderr, res.stderr
    assert "ok      jobs/fit.yaml" in res.stdout and "ok      compute_configs/g5-4xlarge.yaml" in res.stdout


def test_init_rerun_keeps_every_file(cli) -> None:
    assert cli("init", "--github").returncode == 0
    (cli.project / "jobs" / "train.yaml").write_text("name: train\nentrypoint: python mine.py\n")  # the user's edit
    (cli.project / ".gitignore").write_text("# mine\n.env*\n.rtjob/\nrtjob-runs/\n")
    before = _files(cli.project)
    res = cli("init", "--github", "--entrypoint", "python other.py", "--name", "train")
    assert res.returncode == 0, res.stderr
    assert _files(cli.project) == before
    assert res.stdout.count("kept") == 7 and "created" not in res.stdout
    assert ".github/workflows/rtjob-train.yml" in before


def test_init_appends_tool_rtjob_to_a_pyproject_only_when_absent(cli) -> None:
    original = '[project]\nname = "mine"\nversion = "1"'  # no final newline
    (cli.project / "pyproject.toml").write_text(original)
    res = cli("init")
    assert res.returncode == 0 and "appended  pyproject.toml [tool.rtjob]" in res.stdout, res.stdout
    text = (cli.project / "pyproject.toml").read_text()
    assert text.startswith(original + "\n") and tomllib.loads(text)["tool"]["rtjob"] == {}
    assert not (cli.project / "rtjob.toml").exists()
    res = cli("init")
    assert "kept      pyproject.toml [tool.rtjob]" in res.stdout and (cli.project / "pyproject.toml").read_text() == text
    from rtjob.jobspec.project import load_settings

    assert load_settings({}, cli.project).get("backend") is None  # the appended table is valid for rtjob


def test_init_keeps_an_existing_tool_rtjob_table_and_appends_missing_ignores(cli) -> None:
    mine = '[tool.rtjob]\nbackend = "ray"\n'
    (cli.project / "pyproject.toml").write_text(mine)
    (cli.project / ".gitignore").write_text("build/\n.env*")
    res = cli("init")
    assert "kept      pyproject.toml [tool.rtjob]" in res.stdout and "appended  .gitignore" in res.stdout
    assert (cli.project / "pyproject.toml").read_text() == mine
    lines = (cli.project / ".gitignore").read_text().splitlines()
    assert lines[:2] == ["build/", ".env*"] and lines.count(".env*") == 1 and ".rtjob/" in lines


def test_init_github_writes_the_scheduled_workflow(cli) -> None:
    res = cli("init", "--github", "--cron", "15 4 * * 1")
    assert res.returncode == 0, res.stderr
    workflow = (cli.project / ".github" / "workflows" / "rtjob-train.yml").read_text()
    assert 'cron: "15 4 * * 1"' in workflow and "rtjob submit jobs/train.yaml" in workflow
    # A user's project installs the released client pinned to this version, never the project itself.
    from rtjob import __version__

    assert f'pip install "rtjob[ray]=={__version__}"' in workflow and 'pip install ".[' not in workflow
    res = cli("init", "other", "--github", "--cron", "61 * * * *")
    assert res.returncode == 2 and not (cli.project / "other").exists()
    # Cron that GitHub does not run (L, more often than every 5 minutes) is refused before any file is written.
    for cron in ("0 3 L * *", "*/2 * * * *"):
        res = cli("init", "other", "--github", "--cron", cron)
        assert res.returncode == 2 and "GitHub" in res.stderr and not (cli.project / "other").exists(), res.stderr
    (cli.project / "broken").mkdir()
    (cli.project / "broken" / "pyproject.toml").write_text("[project\n")
    res = cli("init", "broken")
    assert res.returncode == 2 and sorted(p.name for p in (cli.project / "broken").iterdir()) == ["pyproject.toml"]


# -- the packaged training entrypoints and the packages list -----------------------------------------------


def test_training_imports_itself_relatively() -> None:
    """Shipped as rtjob_training, `from training.x import` would break: only relative imports."""
    offenders = [f"{p.name}:{n}" for p in sorted((REPO / "training").rglob("*.py"))
                 for n, line in enumerate(p.read_text().splitlines(), 1)
                 if re.match(r"\s*(from training\b|import training\b)", line) or '"training.' in line]
    assert not offenders


def test_rtjob_training_imports_without_torch_and_runs_as_a_module(tmp_path: Path) -> None:
    (tmp_path / "rtjob_training").symlink_to(REPO / "training")  # the wheel's package-dir mapping
    # The package and its module list without torch; then the torchrun launcher, which runs on the head node and
    # only parses flags and places workers, as `-m ... --help`, and every entrypoint's training flags: no torch.
    code = ("import pkgutil, runpy, sys, rtjob_training\n"
            "names = [m.name for m in pkgutil.iter_modules(rtjob_training.__path__)]\n"
            "assert 'ray_ddp' in names and 'torch' not in sys.modules and 'ray' not in sys.modules, names\n"
            "sys.argv = ['torchrun_launcher', '--help']\n"
            "try:\n"
            "    runpy.run_module('rtjob_training.torchrun_launcher', run_name='__main__', alter_sys=True)\n"
            "except SystemExit as end:\n"
            "    assert end.code == 0\n"
            "from argparse import ArgumentParser\n"
            "from rtjob_training import options\n"
            "options.add_training_args(ArgumentParser())\n"
            "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if 'torch' in m)\n")
    env = {"PYTHONPATH": f"{tmp_path}:{REPO}", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "usage: python -m rtjob_training.torchrun_launcher" in proc.stdout, proc.stdout


def test_packages_list_covers_every_rtjob_package() -> None:
    listed = set(PYPROJECT["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(REPO / "cli").parts) for p in (REPO / "cli" / "rtjob").rglob("__init__.py")}
    found |= {".".join(("rtjob_training", *p.parent.relative_to(REPO / "training").parts))
              for p in (REPO / "training").rglob("__init__.py")}
    assert found <= listed, f"add to [tool.setuptools] packages: {sorted(found - listed)}"


# -- init and validate with the project's own requirements --------------------------------------------------------


def _render_pip(cli) -> list[str]:
    res = cli("render", "train", "-o", "json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)["submit_job"]["runtime_env"]["pip"]


def test_init_points_the_job_at_the_projects_requirements_txt_and_it_works_as_written(cli) -> None:
    (cli.project / "requirements.txt").write_text("rtjob-absent-package-a==1.0\n-r more.txt\n")
    (cli.project / "more.txt").write_text("rtjob-absent-package-b\n")
    assert cli("init").returncode == 0
    assert "\nrequirements: ../requirements.txt\n" in (cli.project / "jobs" / "train.yaml").read_text()
    res = cli("validate")
    assert res.returncode == 0 and "warning" not in res.stderr, res.stderr
    assert _render_pip(cli) == ["rtjob-absent-package-a==1.0", "rtjob-absent-package-b"]


def test_init_points_the_job_at_pyproject_dependencies_read_at_plan_time(cli) -> None:
    (cli.project / "pyproject.toml").write_text(
        '[project]\nname = "mine"\nversion = "1"\ndependencies = [\n  "rtjob-absent-package-c>=2",\n]\n')
    assert cli("init").returncode == 0
    assert "\nrequirements: ../pyproject.toml\n" in (cli.project / "jobs" / "train.yaml").read_text()
    assert _render_pip(cli) == ["rtjob-absent-package-c>=2"]
    # A pyproject without dependencies is not pointed at: the job says none.
    (cli.project / "jobs" / "train.yaml").unlink()
    (cli.project / "pyproject.toml").write_text('[project]\nname = "mine"\nversion = "1"\n')
    assert cli("init").returncode == 0
    assert "\nrequirements: []\n" in (cli.project / "jobs" / "train.yaml").read_text()


def test_validate_flags_requirement_lines_a_cluster_cannot_install_with_file_and_line(cli) -> None:
    secret = plant("s3cret-index-pass")
    (cli.project / "requirements.txt").write_text(
        f"numpy\n--index-url https://me:{secret}@pypi.example/simple\n-e ./mylib\n../wheels/mine-1.0-py3-none-any.whl\n")
    write_files(cli.project, {"jobs/train.yaml": "name: train\nentrypoint: python t.py\n"
                                                 "requirements: ../requirements.txt\n"})
    res = cli("validate")
    record(res.stdout, res.stderr)
    assert res.returncode == 0, res.stderr
    warnings = [line for line in res.stderr.splitlines() if line.startswith("warning")]
    assert len(warnings) == 1, res.stderr  # one line per job, its problems joined
    assert "requirements.txt:3: '-e ./mylib' installs from this machine's disk" in warnings[0]
    assert "requirements.txt:4: '../wheels/mine-1.0-py3-none-any.whl'" in warnings[0]
    assert "numpy" not in warnings[0] and "index-url" not in warnings[0] and secret not in res.stderr


def test_a_requirements_file_that_cannot_be_read_is_named_with_the_job_files_line(cli) -> None:
    write_files(cli.project, {"jobs/train.yaml": "name: train\nentrypoint: python t.py\n\nrequirements: reqs.txt\n"})
    for command in (("validate",), ("render", "train")):
        res = cli(*command)
        assert res.returncode == 2, res.stderr
        assert "jobs/train.yaml:4: requirements file 'reqs.txt' cannot be read" in res.stderr, res.stderr
