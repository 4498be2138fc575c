"""A job's project and its upload: the project is found from the job file (never from the current folder, never
$HOME), paths in a job file are relative to it, a job is found by file name or `name:`, and the working dir
upload is exactly what Ray zips, without secrets, rtjob's state, pulled runs or anything behind an outward link."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import pytest
from rtjob.backends.packaging import RTJOB_EXCLUDES, ray_default_excludes, sent_excludes, uploaded_files
from rtjob.core.errors import BadInput
from rtjob.jobspec.project import PULLED_RUNS_DIR, find_root, job_file_root, load_settings
from rtjob.storage.destination import default_destination
from support.project import ProjectCli, write_files
from support.scrub import scrub


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> ProjectCli:
    """rtjob's console entry point in this process, with HOME a temporary folder (``cli.home``); call(*args, cwd=...)."""
    return ProjectCli(tmp_path, monkeypatch, capsys)


def _project(root: Path) -> Path:
    """A user's project: its own settings, a job in jobs/, code at the root and a secret next to it."""
    write_files(root, {
        "rtjob.toml": 'storage = "s3://team-bucket/runs"\n',
        "jobs/train.yaml": "name: train\nentrypoint: python train.py\n",
        "train.py": "print('train')\n",
        ".env": "WANDB_API_KEY=not-for-the-cluster\n",
    })
    return root


def _render(cli, ref: str, cwd: Path) -> dict:
    proc = cli("render", ref, "--output", "json", cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


# -- the project of a job -------------------------------------------------------------------------------------

def test_a_job_by_path_belongs_to_its_own_project_from_home_from_a_parent_and_from_elsewhere(cli, tmp_path):
    home: Path = cli.home
    write_files(home, {".aws/credentials": "[default]\naws_secret_access_key=x\n", "notes.txt": "x"})
    project = _project(home / "code" / "proj")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    job = project / "jobs" / "train.yaml"
    for cwd, ref in ((home, "code/proj/jobs/train.yaml"), (home / "code", "proj/jobs/train.yaml"),
                     (elsewhere, str(job))):
        data = _render(cli, ref, cwd)
        runtime_env = data["submit_job"]["runtime_env"]
        assert runtime_env["working_dir"] == str(project), cwd
        assert data["run"]["upload"]["working_dir"] == str(project)
        assert data["run"]["upload"]["files"] == 3  # rtjob.toml, jobs/train.yaml, train.py: no .env
        # Settings come from the job's project (its rtjob.toml), not from where rtjob runs.
        assert data["run"]["storage_uri"].startswith("s3://team-bucket/runs/train/"), cwd
        # What the script gets as RTJOB_RUN_DIR: a local folder on the driver's node, synced to that URI.
        assert data["run"]["run_dir"] == f"$TMPDIR/rtjob-run-dirs-<uid>/{data['run']['id']}/run"
    assert data["run"]["job_file"] == "jobs/train.yaml"  # outside the current folder: within its project
    assert _render(cli, "jobs/train.yaml", project)["run"]["job_file"] == "jobs/train.yaml"
    text = cli("render", str(job), cwd=elsewhere)
    assert f"upload:    {project} (3 files, " in text.stdout and " KiB)" in text.stdout


def test_the_project_root_walks_up_from_the_file_and_never_stops_at_home_or_slash(cli, tmp_path):
    home: Path = cli.home
    (home / ".git").mkdir()  # a dotfiles repository must not make $HOME a project
    write_files(home, {"exp/a.yaml": "", "jobs/b.yaml": ""})
    write_files(tmp_path, {
        "toml/rtjob.toml": "",
        "toml/deep/c.yaml": "",
        "py/pyproject.toml": "[project]\nname='x'\n\n[tool.rtjob]\n",
        "py/cfg/d.yaml": "",
        "git/experiments/e.yaml": "",
        "git/sub/jobs/f.yaml": "",
        "plain/g.yaml": "",
    })
    (tmp_path / "git" / ".git").write_text("gitdir: elsewhere\n")  # a worktree's .git is a file
    assert job_file_root(home / "exp" / "a.yaml") == home / "exp"
    assert job_file_root(home / "jobs" / "b.yaml") == home / "jobs"
    assert job_file_root(tmp_path / "toml" / "deep" / "c.yaml") == tmp_path / "toml"
    assert job_file_root(tmp_path / "py" / "cfg" / "d.yaml") == tmp_path / "py"
    assert job_file_root(tmp_path / "git" / "experiments" / "e.yaml") == tmp_path / "git"
    assert job_file_root(tmp_path / "git" / "sub" / "jobs" / "f.yaml") == tmp_path / "git" / "sub"  # nearest
    assert job_file_root(tmp_path / "plain" / "g.yaml") == tmp_path / "plain"


def test_a_job_file_in_the_home_folder_never_uploads_it(cli, tmp_path):
    home: Path = cli.home
    write_files(home, {"job.yaml": "name: h\nentrypoint: python x.py\n", ".aws/credentials": "x"})
    proc = cli("render", "job.yaml", cwd=home)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "holds your home folder" in proc.stderr and str(home) in proc.stderr
    write_files(home, {"jobs/named.yaml": "name: named\nentrypoint: python x.py\nworking_dir: ../..\n"})
    proc = cli("render", "named", cwd=home)  # by name from $HOME, a working_dir reaching above it
    assert proc.returncode == 2 and "holds your home folder" in proc.stderr


def test_relative_paths_in_a_job_file_are_relative_to_the_file(cli, tmp_path):
    project = _project(tmp_path / "proj")
    write_files(project, {"src/main.py": "", "jobs/in-src.yaml":
            "name: in-src\nentrypoint: python main.py\nworking_dir: ../src\n",
            "jobs/here.yaml": "name: here\nentrypoint: python x.py\nworking_dir: .\n"})
    assert _render(cli, "in-src", project)["submit_job"]["runtime_env"]["working_dir"] == str(project / "src")
    assert _render(cli, "here", project)["submit_job"]["runtime_env"]["working_dir"] == str(project / "jobs")
    elsewhere = tmp_path / "else"
    elsewhere.mkdir()
    data = _render(cli, str(project / "jobs" / "in-src.yaml"), elsewhere)
    assert data["submit_job"]["runtime_env"]["working_dir"] == str(project / "src")
    write_files(project, {"jobs/gone.yaml": "name: gone\nentrypoint: python x.py\nworking_dir: ../nowhere\n"})
    proc = cli("render", "gone", cwd=project)
    assert proc.returncode == 2 and "relative to the job file's folder" in proc.stderr


def test_settings_come_from_rtjob_toml(tmp_path, monkeypatch):
    scrub(monkeypatch)
    write_files(tmp_path, {"rtjob.toml": 'address = "http://head:8265"\n'})
    settings = load_settings({}, tmp_path)
    assert settings.get("address") == "http://head:8265"
    assert settings.source("address") == str(tmp_path / "rtjob.toml")
    (tmp_path / "deep" / "er").mkdir(parents=True)
    assert find_root(tmp_path / "deep" / "er") == tmp_path  # rtjob.toml marks the current project too
    write_files(tmp_path, {"rtjob.toml": 'adress = "http://head:8265"\n'})
    with pytest.raises(BadInput, match="rtjob.toml:1: unknown key 'adress'; did you mean 'address'"):
        load_settings({}, tmp_path)


# -- a job by its name ----------------------------------------------------------------------------------------

def test_a_job_is_found_by_its_name_and_an_ambiguous_name_lists_both_files(cli, tmp_path):
    project = _project(tmp_path / "proj")
    write_files(project, {"jobs/whatever.yaml": "name: foo\nentrypoint: python train.py\n"})
    data = _render(cli, "foo", project)
    assert data["run"]["job"] == "foo" and data["run"]["job_file"] == "jobs/whatever.yaml"
    assert _render(cli, "whatever", project)["run"]["job"] == "foo"  # the file name still works
    write_files(project, {"jobs/foo.yaml": "name: other\nentrypoint: python train.py\n"})
    proc = cli("render", "foo", cwd=project)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "ambiguous" in proc.stderr and "jobs/foo.yaml" in proc.stderr and "jobs/whatever.yaml" in proc.stderr
    jobs = cli("jobs", "--output", "json", cwd=project)  # `rtjob jobs` lists files as before
    assert jobs.returncode == 0, jobs.stderr
    assert [row["name"] for row in json.loads(jobs.stdout)] == ["foo", "train", "whatever"]


# -- what is uploaded -----------------------------------------------------------------------------------------

SECRETS = [".env", ".env.local", "sub/.env", ".envrc", ".aws/credentials", ".ssh/id_ed25519", "certs/server.pem",
           "tls.key", "id_rsa", "id_rsa.pub", ".netrc", ".git-credentials", "gcp/credentials.json", "credentials",
           ".rtjob/state.json", f"{PULLED_RUNS_DIR}/rtjob-train-1/checkpoint_epoch_0001/model.pt", ".git/config"]


def test_secrets_rtjob_state_and_pulled_runs_are_not_uploaded(cli, tmp_path):
    project = _project(tmp_path / "proj")
    write_files(project, {rel: "secret" for rel in SECRETS})
    write_files(project, {"lib/keys.py": "code"})
    files = sorted(rel for _, rel in uploaded_files(project, sent_excludes([])))
    assert files == ["jobs/train.yaml", "lib/keys.py", "rtjob.toml", "train.py"]
    # A job re-includes one on purpose with a negated pattern.
    write_files(project, {".env.example": "TEMPLATE="})
    again = [rel for _, rel in uploaded_files(project, sent_excludes(["!.env.example"]))]
    assert ".env.example" in again and ".env" not in again
    # The pull destination is the folder that is excluded: one name for both.
    assert default_destination("r1") == Path.cwd() / PULLED_RUNS_DIR / "r1"
    assert f"{PULLED_RUNS_DIR}/" in RTJOB_EXCLUDES


def test_a_link_out_of_the_working_dir_is_refused_naming_it_and_the_fix(cli, tmp_path):
    project = _project(tmp_path / "proj")
    outside = tmp_path / "shared-data"
    write_files(outside, {"big.bin": "d" * 1000})
    (project / "data").symlink_to(outside)
    for command in ("render", "submit"):
        proc = cli(command, "train", cwd=project)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert f"data is a symlink to {outside}" in proc.stderr and "excludes" in proc.stderr
    assert not (tmp_path / "rtjob-home" / "local").exists()  # nothing was started
    write_files(project, {"jobs/train.yaml": "name: train\nentrypoint: python train.py\nexcludes: [data]\n"})
    assert cli("render", "train", cwd=project).returncode == 0
    # A file link out is refused too; a link inside the working dir is uploaded (and counted) as Ray zips it.
    (project / "data").unlink()
    write_files(tmp_path, {"user/.netrc": "machine x password y"})
    (project / "secret.txt").symlink_to(tmp_path / "user" / ".netrc")
    assert "secret.txt is a symlink" in cli("render", "train", cwd=project).stderr
    (project / "secret.txt").unlink()
    (project / "again.py").symlink_to(project / "train.py")
    assert _render(cli, "train", project)["run"]["upload"]["files"] == 4
    (project / "loop").symlink_to(project)
    proc = cli("render", "train", cwd=project)
    assert proc.returncode == 2 and "loop is a symlink" in proc.stderr and "forever" in proc.stderr


def test_the_size_check_counts_exactly_what_ray_zips(tmp_path):
    """The same tree packed by Ray 2.60's own _zip_files and measured by rtjob: the same files, the same bytes."""
    packaging = pytest.importorskip("ray._private.runtime_env.packaging")
    root = tmp_path / "wd"
    write_files(root, {
        "train.py": "a" * 10,
        ".gitignore": "*.ckpt\nout/\n!keep.ckpt\nbuild\n",
        "model.ckpt": "c" * 100, "keep.ckpt": "k" * 7, "out/x.txt": "o" * 50,
        "build/lib.so": "b" * 30,
        "sub/.gitignore": "local.bin\n/anchored.txt\n",
        "sub/local.bin": "l" * 20, "sub/anchored.txt": "n" * 3,
        "sub/deeper/anchored.txt": "m" * 4, "sub/code.py": "z" * 5,
        "sub/.rayignore": "*.tmp\n", "sub/a.tmp": "t",
        ".venv/big": "v" * 1000, "__pycache__/x.pyc": "p",
        "data/d.bin": "d" * 1000, ".env": "SECRET=1", "nested/credentials": "x",
        "docs/readme.md": "r" * 9,
    })
    (root / "empty").mkdir()
    (root / "docs-link").symlink_to(root / "docs")
    (root / "train-link.py").symlink_to(root / "train.py")
    excludes = sent_excludes(["data/"])
    zip_path = tmp_path / "pkg.zip"
    packaging._zip_files(str(root), [*ray_default_excludes(), *excludes], str(zip_path), include_gitignore=True)
    with zipfile.ZipFile(zip_path) as zf:
        zipped = sorted((info.file_size, info.filename) for info in zf.infolist() if not info.is_dir())
    ours = sorted(uploaded_files(root, excludes))
    assert ours == zipped
    assert {rel for _, rel in ours} >= {"keep.ckpt", "sub/deeper/anchored.txt", "docs-link/readme.md",
                                        "train-link.py"}
    assert os.path.islink(root / "docs-link")
