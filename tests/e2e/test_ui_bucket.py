"""`rtjob ui --storage s3://…`: a team's runs in a real S3 server (moto, loopback), written with rtjob's own writers
as runs leave them: listed from the bucket's index, a run's page with its charts, sample image and log read from
the bucket, and not one object written to the bucket by browsing it (the index is never compacted by the UI, even
with more entries left over than a CLI listing would compact)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from rtjob.storage.index import COMPACT_AFTER, index_objects, write_entry
from support.browser import chromium, ui_server, until
from support.cli import REPO, base_env, record
from support.s3_server import S3Server, with_bucket
from support.ui_runs import png, write_run

ROOT = "s3://team/runs"


def keys(server: S3Server) -> list[tuple[str, str]]:
    listed = server.client().list_objects_v2(Bucket="team")
    return sorted((item["Key"], item["ETag"]) for item in listed.get("Contents", []))


@pytest.fixture(scope="module")
def team(shared_s3: S3Server) -> Iterator[dict[str, Any]]:
    home = Path(tempfile.mkdtemp(prefix="rtjob-ui-s3-", dir="/tmp"))
    server = with_bucket(shared_s3, "team")
    with mock.patch.dict(os.environ, server.env()):  # this process's writers find the server; restored after
        first = write_run(ROOT, "s3-run-a", "ddp-resnet", backend="ray", epochs=3,
                          samples={"epoch_0003.png": png(16, 16, 3)}, log_lines=["hello from the bucket"])
        write_run(ROOT, "s3-run-b", "ddp-resnet", backend="anyscale", user="bob", status="FAILED", epochs=2,
                  start="2026-11-21T10:00:00+00:00")
        with index_objects(ROOT, None) as objects:  # more entries left over than a CLI listing leaves
            for _ in range(COMPACT_AFTER + 5):
                write_entry(ROOT, None, first, objects=objects)
    env = base_env(home, **server.env())
    with ui_server(env, "--storage", ROOT, log=home / "ui.log") as url:
        yield {"url": url, "server": server}


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as driver:
        yield driver


def test_a_team_bucket_browsed_without_a_write(team: dict[str, Any], browser: Any) -> None:
    from selenium.webdriver.common.by import By

    before = keys(team["server"])
    browser.get(team["url"])
    ids = [row.get_attribute("data-run") for row in browser.find_elements(By.CSS_SELECTOR, "tr.run")]
    assert ids == ["s3-run-b", "s3-run-a"]
    browser.get(team["url"] + "?backend=ray")
    assert [r.get_attribute("data-run") for r in browser.find_elements(By.CSS_SELECTOR, "tr.run")] == ["s3-run-a"]
    browser.find_element(By.CSS_SELECTOR, "a.run-link").click()
    until(lambda: "s3-run-a" in browser.title, what="the run page")
    figures = browser.find_elements(By.CSS_SELECTOR, "figure.chart")
    assert figures and all(f.get_attribute("data-points") == "3" for f in figures)
    until(lambda: "hello from the bucket" in browser.find_element(By.ID, "log").text, what="the log from S3")
    until(lambda: browser.execute_script("return arguments[0].complete && arguments[0].naturalWidth",
                                         browser.find_element(By.CSS_SELECTOR, "#samples img")) == 16,
          what="the sample image from S3")
    artifacts = REPO / "tmp" / "artifacts" / "ui"
    artifacts.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(artifacts / "bucket-run.png"))
    record(browser.page_source)
    browser.get(team["url"] + "compare?run=s3-run-a&run=s3-run-b")
    differs = [row.find_element(By.TAG_NAME, "code").text for row in browser.find_elements(By.CSS_SELECTOR, "tr.differs")]
    assert differs == ["epochs", "entrypoint"]  # the arg (from the entrypoint's flags) and the entrypoint
    assert keys(team["server"]) == before, "browsing wrote to the bucket"
