"""No symbolic link inside a run's folder is followed, by `rtjob ui` (a real server, plain HTTP requests), `rtjob
pull` or `rtjob results`: links to a file and to a folder, pointing out of the run's folder or inside it (the rule is
the same wherever a link points: a link is nothing rtjob or a run's script wrote, so it is skipped, and named where
the command reports what it skipped). Local storage only: object storage has no links (a pull's destination, where
links can be planted, is tried in test_storage_pull.py). No cluster."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.browser import ui_server
from support.cli import base_env, plant, rtjob
from support.ui_runs import metrics, png, write_run

SECRET = plant("outside-the-run-secret-5e1d0c")
LINKS = ["samples/linkdir/", "samples/leak.png", "samples/inside.png", "samples/insidedir/", "checkpoint_epoch_0099/"]


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Two runs in local storage with links planted as a hostile teammate (or a script) could: `linked` has links
    in samples/ and a linked checkpoint folder; `linked-history` has its metrics.json linked out, and one real
    checkpoint history of 1 epoch."""
    home = Path(tempfile.mkdtemp(prefix="rtjob-links-", dir="/tmp"))
    base = tmp_path_factory.mktemp("links")
    root, outside = base / "storage", base / "outside"
    (outside / "ckpt").mkdir(parents=True)
    (outside / "secret.txt").write_text(SECRET)
    (outside / "secret.png").write_bytes(png(4, 4, 9) + SECRET.encode())
    (outside / "metrics.json").write_text(json.dumps(metrics(7, scale=777)))
    (outside / "ckpt" / "metrics.json").write_text(json.dumps(metrics(99)))
    prior = os.environ.get("RTJOB_HOME")
    os.environ["RTJOB_HOME"] = str(home)  # the writers' ledger is the server's
    try:
        linked = Path(write_run(root, "linked", "ddp-resnet", epochs=2, checkpoints=1,
                                samples={"epoch_0002.png": png(8, 8, 2)}).storage_uri or "")
        history = Path(write_run(root, "linked-history", "ddp-resnet", epochs=0, checkpoints=1).storage_uri or "")
    finally:
        if prior is None:
            os.environ.pop("RTJOB_HOME", None)
        else:
            os.environ["RTJOB_HOME"] = prior
    (linked / "samples" / "linkdir").symlink_to(outside, target_is_directory=True)
    (linked / "samples" / "leak.png").symlink_to(outside / "secret.png")
    (linked / "samples" / "inside.png").symlink_to(linked / "samples" / "epoch_0002.png")
    (linked / "samples" / "insidedir").symlink_to(linked / "checkpoint_epoch_0001", target_is_directory=True)
    (linked / "checkpoint_epoch_0099").symlink_to(outside / "ckpt", target_is_directory=True)
    (history / "checkpoint_epoch_0001" / "metrics.json").write_text(json.dumps(metrics(1)))
    (history / "metrics.json").symlink_to(outside / "metrics.json")
    (history / "checkpoint_epoch_0099").symlink_to(outside / "ckpt", target_is_directory=True)
    env = base_env(home)
    try:
        yield {"root": root, "linked": linked, "history": history, "env": env, "base": base}
    finally:
        shutil.rmtree(home, ignore_errors=True)


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")


def test_the_ui_serves_no_link(team: dict[str, Any]) -> None:
    with ui_server(team["env"], "--storage", str(team["root"]), log=team["base"] / "ui.log") as url:
        assert get(f"{url}runs/linked/samples/epoch_0002.png")[0] == 200  # the control: a sample is served
        for name in ("linkdir/secret.txt", "linkdir/secret.png", "leak.png", "inside.png", "insidedir/model.pt"):
            status, body = get(f"{url}runs/linked/samples/{name}")
            assert status == 404 and SECRET not in body, (name, status)
        status, page = get(f"{url}runs/linked")
        assert status == 200 and "epoch_0002.png" in page
        assert not any(name in page for name in ("linkdir", "leak.png", "inside.png", "insidedir", "epoch_0099"))
        status, page = get(f"{url}runs/linked-history")  # its history from the one real checkpoint
        assert status == 200 and 'data-points="1"' in page and 'data-points="7"' not in page
        assert 'data-points="99"' not in page


def test_pull_skips_every_link_and_names_it(team: dict[str, Any], tmp_path: Path) -> None:
    dest = tmp_path / "pulled"
    proc = rtjob("pull", str(team["linked"]), "--to", str(dest), "--checkpoint", "all", "-o", "json", env=team["env"])
    assert proc.returncode == 1, proc.stderr  # some keys refused, the rest pulled
    report = json.loads(proc.stdout)
    assert sorted(item["key"] for item in report["refused"]) == sorted(LINKS)
    for key in LINKS:
        assert f"refused {key}: symbolic link" in proc.stderr
    pulled = {p.relative_to(dest).as_posix(): p for p in dest.rglob("*")}
    assert "samples/epoch_0002.png" in pulled and "checkpoint_epoch_0001/model.pt" in pulled
    assert not any(p.is_symlink() for p in pulled.values())
    assert not any(SECRET.encode() in p.read_bytes() for p in pulled.values() if p.is_file())
    assert not any(name in key for key in pulled for name in ("linkdir", "leak", "inside", "0099"))


def test_results_skips_every_link_and_names_it(team: dict[str, Any], tmp_path: Path) -> None:
    proc = rtjob("results", str(team["linked"]), "--samples", "all", "-o", "json", env=team["env"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    [run] = json.loads(proc.stdout)
    assert [Path(s["path"]).name for s in run["samples"]] == ["epoch_0002.png"]
    assert len(run["history"]) == 2
    for key in [k for k in LINKS if k.startswith("samples/")]:
        assert f"sample {key} skipped: symbolic link (not followed)" in proc.stderr
    assert SECRET not in proc.stdout + proc.stderr
    proc = rtjob("results", str(team["history"]), "-o", "json", env=team["env"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    [run] = json.loads(proc.stdout)  # neither the linked metrics.json (7 epochs) nor the linked checkpoint (99)
    assert len(run["history"]) == 1 and run["source"].endswith("checkpoint_epoch_0001/metrics.json")
