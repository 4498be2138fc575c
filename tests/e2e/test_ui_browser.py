"""`rtjob ui` in a real browser (headless Debian Chromium through Selenium and Debian's chromedriver): the runs
page and its filters, a run's page with its charts drawn, a sample image, the log growing without a reload, a
pipeline's steps, a comparison, and hostile names shown as text. One server and one browser for the module; the
runs are written into a storage folder with rtjob's own writers (tests/support/ui_runs.py), as real runs leave
them. Screenshots of each page go to tmp/artifacts/ui/ (RTJOB_TEST_ARTIFACTS overrides)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.browser import chromium, ui_server, until
from support.cli import REPO, base_env, plant, record
from support.ui_runs import append_log_part, png, wav, write_run

ARTIFACTS = Path(os.environ.get("RTJOB_TEST_ARTIFACTS") or REPO / "tmp" / "artifacts") / "ui"
HOSTILE_JOB = 'x<script>alert(1)</script>"onload=alert(2)\u202eevil'
SECRET = plant("planted-ui-secret-4f9c2a7e")


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A storage folder with runs (a succeeded one with samples and checkpoints, a failed one, a running one,
    a damaged one, a hostile name, a 2-step pipeline) and an `rtjob ui` serving it."""
    home = Path(tempfile.mkdtemp(prefix="rtjob-ui-", dir="/tmp"))
    root = tmp_path_factory.mktemp("team-storage")
    env = base_env(home, WANDB_API_KEY=SECRET)
    prior = os.environ.get("RTJOB_HOME")
    os.environ["RTJOB_HOME"] = str(home)  # the writers' ledger is the server's
    try:
        runs = {
            "good": write_run(root, "run-good", "ddp-resnet", epochs=4, checkpoints=2,
                              samples={"epoch_0004.png": png(24, 24, 4), "voice/epoch_0004.wav": wav()},
                              log_lines=[f"epoch {e} loss {2 / e:.3f}" for e in range(1, 5)] + [f"token {SECRET}"]),
            "bad": write_run(root, "run-bad", "ddp-resnet", status="FAILED", user="bob", epochs=2, scale=1.4,
                             start="2026-11-21T09:00:00+00:00",
                             request={"entrypoint": "python ddp-resnet.py --epochs 2 --lr 0.1",
                                      "runtime_env": {"env_vars": {"RTJOB_JOB_NAME": "ddp-resnet", "LR": "0.1"}}}),
            "live": write_run(root, "run-live", "count", status="RUNNING", epochs=0, user="carol",
                              start="2026-11-22T09:00:00+00:00", log_lines=["line 1 of 3"]),
            "long": write_run(root, "run-long", "ddp-resnet", epochs=1, user="frank", start="2026-11-19T09:00:00+00:00",
                              log_lines=[f"row {n}" for n in range(1, 2501)]),
            "damaged": write_run(root, "run-damaged", "ddp-resnet", raw_metrics=b"{not json", user="dave"),
            "hostile": write_run(root, "run-hostile", HOSTILE_JOB, epochs=1, user="eve",
                                 samples={'pic"onload=alert(3).png': png(8, 8, 2)},
                                 log_lines=["<script>alert(4)</script> \u202eevil"]),
        }
        steps = [{"name": "prepare", "run_id": "pipe-1-prepare", "storage_uri": None, "reused_from": None},
                 {"name": "train", "run_id": "pipe-1-train", "storage_uri": None, "reused_from": None}]
        write_run(root, "pipe-1-prepare", "prepare", epochs=0, pipeline="pipe-1", start="2026-11-23T09:00:00+00:00")
        write_run(root, "pipe-1-train", "train", status="RUNNING", epochs=2, pipeline="pipe-1",
                  start="2026-11-23T09:01:00+00:00", archived=False)
        runs["pipeline"] = write_run(root, "pipe-1", "tiny-pipeline", status="RUNNING", epochs=0, steps=steps,
                                     start="2026-11-23T09:00:00+00:00")
    finally:
        if prior is None:
            os.environ.pop("RTJOB_HOME", None)
        else:
            os.environ["RTJOB_HOME"] = prior
    try:
        with ui_server(env, "--storage", str(root), log=root.parent / "ui-server.log") as url:
            yield {"url": url, "root": root, "runs": runs}
    finally:
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as driver:
        yield driver


def shot(driver: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(ARTIFACTS / f"{name}.png"))
    record(driver.page_source)  # the suite-wide secret check reads every page the browser saw
    assert SECRET not in driver.page_source


def canvas_drawn(driver: Any, figure: Any) -> bool:
    """Some pixel of the chart's canvas is not transparent (uPlot drew the series)."""
    return bool(driver.execute_script(
        "const c = arguments[0].querySelector('canvas'); if (!c) return false;"
        "const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
        "for (let i = 3; i < d.length; i += 4) if (d[i] !== 0) return true; return false;", figure))


def chart_drawn(driver: Any, n: int) -> bool:
    """The page's n-th chart is drawn (looked up on each check)."""
    from selenium.webdriver.common.by import By

    figures = driver.find_elements(By.CSS_SELECTOR, "figure.chart")
    return len(figures) > n and canvas_drawn(driver, figures[n])


def test_runs_page_filters_and_search(team: dict[str, Any], browser: Any) -> None:
    from selenium.webdriver.common.by import By

    browser.get(team["url"])
    rows = until(lambda: browser.find_elements(By.CSS_SELECTOR, "tr.run"), what="the runs table")
    ids = [row.get_attribute("data-run") for row in rows]
    assert ids[0] == "pipe-1-train" and {"run-good", "run-bad", "run-live"} <= set(ids)  # newest first
    shot(browser, "runs")
    user = browser.find_element(By.NAME, "user")
    user.send_keys("bob")
    browser.find_element(By.ID, "apply").click()
    until(lambda: [r.get_attribute("data-run") for r in browser.find_elements(By.CSS_SELECTOR, "tr.run")] == ["run-bad"],
          what="only bob's run")
    browser.get(team["url"] + "?q=count")
    assert [r.get_attribute("data-run") for r in browser.find_elements(By.CSS_SELECTOR, "tr.run")] == ["run-live"]
    browser.get(team["url"] + "?status=FAILED")
    assert [r.get_attribute("data-run") for r in browser.find_elements(By.CSS_SELECTOR, "tr.run")] == ["run-bad"]


def test_run_page_charts_samples_checkpoints(team: dict[str, Any], browser: Any) -> None:
    from selenium.webdriver.common.by import By

    browser.get(team["url"])
    until(lambda: browser.find_elements(By.CSS_SELECTOR, 'tr[data-run="run-good"] a.run-link'))[0].click()
    until(lambda: "run-good" in browser.title, what="the run page")
    figures = browser.find_elements(By.CSS_SELECTOR, "figure.chart")
    assert [f.get_attribute("data-title") for f in figures] == ["loss", "accuracy", "samples/s"]
    assert all(f.get_attribute("data-points") == "4" for f in figures)
    for n in range(len(figures)):
        until(lambda n=n: chart_drawn(browser, n), what="a drawn chart")
    assert browser.find_element(By.ID, "status").text == "SUCCEEDED"
    pulls = [c.text for c in browser.find_elements(By.CSS_SELECTOR, "#checkpoints code.pull")]
    # one command per checkpoint (each pulls that one), and the best by validation loss
    assert pulls == ["rtjob pull run-good --checkpoint checkpoint_epoch_0001",
                     "rtjob pull run-good --checkpoint checkpoint_epoch_0002", "rtjob pull run-good --checkpoint best:val_loss"]
    until(lambda: "epoch 4 loss" in browser.find_element(By.ID, "log").text, what="the log's tail")
    assert "****" in browser.find_element(By.ID, "log").text  # the planted secret, masked
    shot(browser, "run")
    until(lambda: browser.execute_script("return arguments[0].complete && arguments[0].naturalWidth",
                                         browser.find_element(By.CSS_SELECTOR, "#samples img")) == 24,
          what="the sample image")
    browser.execute_script("document.querySelector('#samples audio').load()")
    until(lambda: browser.execute_script("return document.querySelector('#samples audio').duration") == 0.25,
          what="the audio sample")
    browser.get(browser.find_element(By.CSS_SELECTOR, "#samples img").get_attribute("src"))
    assert browser.execute_script("return document.images[0].naturalWidth") == 24
    shot(browser, "sample")


def test_the_log_opens_at_its_end_and_scrolls_back(team: dict[str, Any], browser: Any) -> None:
    from selenium.webdriver.common.by import By

    def lines() -> list[str]:
        return browser.find_element(By.ID, "log").text.splitlines()

    browser.get(team["url"] + "runs/run-long")
    until(lambda: lines()[-1:] == ["row 2500"], what="the log's last line")
    assert lines()[0] == "row 1501" and len(lines()) == 1000
    assert browser.execute_script("const p = document.getElementById('log');"
                                  "return p.scrollTop + p.clientHeight >= p.scrollHeight - 4")
    browser.find_element(By.ID, "earlier").click()
    until(lambda: lines()[0] == "row 501", what="1,000 earlier lines")
    browser.find_element(By.ID, "earlier").click()
    until(lambda: lines()[0] == "row 1", what="the log's first line")
    until(lambda: not browser.find_element(By.ID, "earlier").is_enabled(), what="nothing earlier")


def test_live_log_line_appears_without_reload(team: dict[str, Any], browser: Any) -> None:
    from selenium.webdriver.common.by import By

    browser.get(team["url"] + "runs/run-live")
    until(lambda: "line 1 of 3" in browser.find_element(By.ID, "log").text, what="the log's first line")
    browser.execute_script("window.notReloaded = true")
    append_log_part(team["runs"]["live"], 1, ["line 2 of 3"])  # as the run's companion writes its next part
    until(lambda: "line 2 of 3" in browser.find_element(By.ID, "log").text, timeout=60, what="the live line")
    assert browser.execute_script("return window.notReloaded") is True
    shot(browser, "live-log")


def test_pipeline_steps_as_a_graph(team: dict[str, Any], browser: Any) -> None:
    from selenium.webdriver.common.by import By

    browser.get(team["url"] + "runs/pipe-1")
    nodes = browser.find_elements(By.CSS_SELECTOR, "#steps .node")
    assert [n.text.split("\n")[:2] for n in nodes] == [["prepare", "SUCCEEDED"], ["train", "RUNNING"]]
    shot(browser, "pipeline")


def test_compare_two_runs(team: dict[str, Any], browser: Any) -> None:
    from selenium.webdriver.common.by import By

    browser.get(team["url"])
    for run_id in ("run-good", "run-bad"):
        browser.find_element(By.CSS_SELECTOR, f'tr[data-run="{run_id}"] input[type=checkbox]').click()
    browser.find_element(By.ID, "compare").click()
    until(lambda: "compare" in browser.title, what="the compare page")
    figures = browser.find_elements(By.CSS_SELECTOR, "figure.chart")
    assert figures and all(f.get_attribute("data-points") == "4" for f in figures)
    for n in range(len(figures)):
        until(lambda n=n: chart_drawn(browser, n), what="a drawn chart")
    differs = [row.find_element(By.TAG_NAME, "code").text for row in browser.find_elements(By.CSS_SELECTOR, "tr.differs")]
    assert "entrypoint" in differs and "runtime_env.env_vars.LR" in differs
    shot(browser, "compare")


def test_hostile_names_are_text_and_damage_stays_on_its_card(team: dict[str, Any], browser: Any) -> None:
    from selenium.webdriver.common.by import By

    browser.get(team["url"])
    row = browser.find_element(By.CSS_SELECTOR, 'tr[data-run="run-hostile"] td.job')
    assert "<script>alert(1)</script>" in row.text and "<U+202E>" in row.text
    browser.get(team["url"] + "runs/run-hostile")
    until(lambda: "<script>alert(4)</script>" in browser.find_element(By.ID, "log").text, what="the hostile log line")
    assert "<U+202E>" in browser.find_element(By.ID, "log").text
    caption = browser.find_element(By.CSS_SELECTOR, "#samples figcaption").text
    assert caption == 'pic"onload=alert(3).png'
    assert browser.find_elements(By.CSS_SELECTOR, "script:not([src])") == []
    shot(browser, "hostile")
    browser.get(team["url"] + "runs/run-damaged")
    error = browser.find_element(By.CSS_SELECTOR, "#metrics .card-error").text
    assert "not valid JSON" in error and browser.find_element(By.ID, "status").text == "SUCCEEDED"
    shot(browser, "damaged")
