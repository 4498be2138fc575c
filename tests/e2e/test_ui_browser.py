"""`rtjob ui` in a real browser (headless Debian Chromium through Selenium and Debian's chromedriver): the runs
page and its filters, a run's page with its charts drawn, a sample image, the log growing without a reload, a
pipeline's steps, a comparison, and hostile names shown as text. One server and one browser for the module; the
runs are written into a storage folder with rtjob's own writers (tests/support/ui_runs.py), as real runs leave
them. Screenshots of each page go to tmp/artifacts/ui/ (RTJOB_TEST_ARTIFACTS overrides)."""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.request import urlopen

import pytest
from support.browser import chromium, ui_server, until
from support.cli import REPO, base_env, plant, record
from support.planted import plant_record
from support.ui_runs import append_log_part, append_rows, png, step_rows, system_rows, wav, write_run

from rtjob_contract import STEP_METRICS_FILE, SYSTEM_METRICS_FILE

ARTIFACTS = Path(os.environ.get("RTJOB_TEST_ARTIFACTS") or REPO / "tmp" / "artifacts") / "ui"
# The docs' screenshot of a live run page: RTJOB_DOCS_IMAGES=1 pytest tests/e2e/test_ui_browser.py -k grows renews it.
DOCS_IMAGE = REPO / "docs" / "images" / "ui-run.png"
LONG_TAG = "x" * 3000
NOW = time.time()
TAGS = {"team": "vision", "note": "שלום עולם · مرحبا · 🚀", "long": LONG_TAG}
# A failed run's log as Ray and a training script print it: worker prefixes in colour, a \r progress bar, a traceback.
TERM_LOG = [*(f"\x1b[36m(RayTrainWorker pid=4242, ip=10.0.0.7)\x1b[0m step {n} \x1b[32mloss 0.{n:02d}\x1b[0m"
              for n in range(1, 61)),
            "Training:   0%|          | 0/100\rTraining:  50%|#####     | 50/100\rTraining: 100%|##########| 100/100",
            "\x1b[33mwarning\x1b[0m: a yellow word",
            "Traceback (most recent call last):", '  File "train.py", line 3, in <module>', "ValueError: bad shape",
            "\x1b[36m(RayTrainWorker pid=4243, ip=10.0.0.7)\x1b[0m worker exits"]
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
        # A run its record says is RUNNING, its live rows growing (the test appends to them as its sync would).
        runs["grow"] = write_run(root, "run-grow", "live-train", status="RUNNING", epochs=1, user="gita",
                                 start="2026-11-18T09:00:00+00:00", archived=False, log_lines=["training starts"],
                                 step_rows=step_rows(0, 90, start=NOW - 200), system_rows=system_rows(3, start=NOW - 50))
        # GPU rows from a fake source (no GPU here): what the companion's sampler writes on a GPU node.
        write_run(root, "run-gpu", "gpu-train", epochs=2, user="gita", start="2026-11-18T06:00:00+00:00",
                  step_rows=step_rows(0, 50), system_rows=system_rows(4, gpus=2))
        runs["term"] = write_run(root, "run-term", "ansi-train", status="FAILED", epochs=0, user="hana",
                                 start="2026-11-18T08:00:00+00:00", log_lines=TERM_LOG)
        runs["tagged"] = write_run(root, "run-tagged", "tagged-train", epochs=2, user="ivan",
                                   start="2026-11-18T07:00:00+00:00", document={"tags": TAGS, "args": {"epochs": 2}},
                                   request={"entrypoint": "python tagged.py --epochs 2 --lr 0.003",
                                            "runtime_env": {"env_vars": {"RTJOB_RUN_ID": "run-tagged", "LR": "0.01"}}},
                                   entry={"tags": TAGS, "args": {"epochs": 2, "lr": 0.003}, "attempts": 1,
                                          "duration_s": 754.0, "final_metrics": {"val_loss": 0.4321, "val_accuracy": 0.9}})
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
    assert [r.get_attribute("data-run") for r in browser.find_elements(By.CSS_SELECTOR, "tr.run")] == ["run-bad",
                                                                                                       "run-term"]


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
    bar = browser.find_element(By.CSS_SELECTOR, "#timeline .timeline-bar")  # the start-up timeline, one bar
    assert bar.size["width"] > 100 and len(bar.find_elements(By.CSS_SELECTOR, ".stage")) == 4
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
    assert differs == ["epochs", "lr", "LR", "entrypoint"]  # args (read from the entrypoint's flags), env, request
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


def titles(driver: Any, where: str) -> list[str]:
    from selenium.webdriver.common.by import By

    return [f.get_attribute("data-title") for f in driver.find_elements(By.CSS_SELECTOR, f"{where} figure.chart")]


def points(driver: Any, where: str, title: str) -> int:
    from selenium.webdriver.common.by import By

    found = driver.find_elements(By.CSS_SELECTOR, f'{where} figure.chart[data-title="{title}"]')
    return int(found[0].get_attribute("data-points") or 0) if found else 0


def test_a_running_run_grows_its_curves_and_ends_without_reload(team: dict[str, Any], browser: Any) -> None:
    """run-grow's record says RUNNING (no cluster: the rows are appended by this test, as the run's entrypoint and
    its companion's sync would append them); the page shows its status, step and curves, sampled at two times, a
    CPU-only system chart, then its end within 5 s of the record saying so."""
    from selenium.webdriver.common.by import By

    grow = team["runs"]["grow"]
    browser.get(team["url"] + "runs/run-grow")
    assert browser.find_element(By.ID, "status").text == "RUNNING"
    until(lambda: points(browser, "#step-charts", "loss") == 10, what="the step curves' first 10 rows")
    assert titles(browser, "#step-charts") == ["loss", "learning rate", "samples/s"]
    until(lambda: titles(browser, "#system-charts") == ["CPU %", "memory (GB)"], what="the CPU-only system chart")
    assert browser.find_element(By.ID, "live-step").text == "90"
    until(lambda: chart_drawn(browser, 0), what="a drawn step chart")
    browser.execute_script("window.notReloaded = true")
    append_rows(grow, STEP_METRICS_FILE, step_rows(100, 190, start=NOW - 200))
    append_rows(grow, SYSTEM_METRICS_FILE, system_rows(5, start=NOW - 50)[3:])
    until(lambda: points(browser, "#step-charts", "loss") == 20, what="the curves grown to 20 rows")
    until(lambda: points(browser, "#system-charts", "CPU %") == 5, what="the system chart grown to 5 rows")
    assert browser.find_element(By.ID, "live-step").text == "190" and browser.find_element(By.ID, "live-epoch").text == "2"
    assert browser.execute_script("return window.notReloaded") is True
    from selenium.webdriver.support.ui import Select

    Select(browser.find_element(By.ID, "x-axis")).select_by_value("time")  # the x axis: time, then steps again
    until(lambda: {f.get_attribute("data-x") for f in browser.find_elements(By.CSS_SELECTOR, "#step-charts figure")}
          == {"time"}, what="the step charts redrawn over time")
    until(lambda: chart_drawn(browser, 0), what="a drawn chart over time")
    # a time axis reads UTC, 24-hour; one point spans a minute (uPlot alone would stretch it over years)
    assert browser.execute_script("return utcTick(Date.UTC(2026, 11, 2, 15, 4, 5) / 1000, 3600)") == "15:04:05"
    assert browser.execute_script("return xRange(1000, 1000, true)") == [970, 1030]
    browser.execute_script('document.querySelector("#status-card time[data-ago]").textContent = "stale"')
    until(lambda: browser.find_element(By.CSS_SELECTOR, "#status-card time[data-ago]").text.endswith(" ago"),
          what="the card's relative time moved by a poll")
    Select(browser.find_element(By.ID, "x-axis")).select_by_value("step")
    assert points(browser, "#step-charts", "loss") == 20
    browser.find_element(By.ID, "smoothing").send_keys("\ue014" * 10)  # arrow right: smoothing 0.2
    until(lambda: browser.find_element(By.ID, "smoothing-value").text == "0.20", what="the smoothing control")
    shot(browser, "live-run")
    if os.environ.get("RTJOB_DOCS_IMAGES") == "1":  # the docs' screenshot, renewed on demand (a tracked file)
        browser.save_screenshot(str(DOCS_IMAGE))
    ended = dataclasses.replace(grow, status="SUCCEEDED", end_time="2026-11-18T09:30:00+00:00",
                                completed_by="companion", exit_code=0)
    plant_record(grow.storage_uri, ended, None)  # the run's companion writes its end
    began = time.monotonic()
    until(lambda: browser.find_element(By.ID, "status").text == "SUCCEEDED", timeout=5,
          what="the end shown within 5 s of the record")
    print(f"the end shown {time.monotonic() - began:.1f} s after the record")
    until(lambda: browser.execute_script("return document.body.dataset.ended") == "1", what="the polling stopped")
    assert browser.execute_script("return window.notReloaded") is True


def test_gpu_rows_drawn_per_gpu(team: dict[str, Any], browser: Any) -> None:
    """System rows with two GPUs (a fake source: written by the fixture as a GPU node's sampler writes them): a chart
    of their utilisation and one of their memory, a series per GPU, beside CPU and memory."""
    browser.get(team["url"] + "runs/run-gpu")
    until(lambda: titles(browser, "#system-charts") == ["CPU %", "memory (GB)", "GPU utilisation %",
                                                        "GPU memory (GB)"], what="the GPU charts")
    legend = browser.execute_script("return [...document.querySelectorAll('#system-charts figure')].map("
                                    "f => [...f.querySelectorAll('.u-legend .u-label')].filter(l => l.offsetParent).map(l => l.textContent))")
    assert legend == [["cpu"], ["used"], ["gpu0", "gpu1"], ["gpu0", "gpu1"]], legend
    shot(browser, "gpu-run")


def test_a_log_as_a_terminal_shows_it(team: dict[str, Any], browser: Any) -> None:
    from selenium.webdriver.common.by import By

    browser.get(team["url"] + "runs/run-term")
    until(lambda: "worker exits" in browser.find_element(By.ID, "log").text, what="the log")
    text = browser.find_element(By.ID, "log").text
    assert "\x1b" not in text and "[36m" not in text and "[0m" not in text
    assert "worker 4242 step 1 loss 0.01" in text and "RayTrainWorker" not in text  # the prefix, kept short
    lines = text.splitlines()
    assert "Training: 100%|##########| 100/100" in lines and "| 0/100" not in text and "| 50/100" not in text
    green = browser.find_elements(By.CSS_SELECTOR, "#log span.a-32")
    assert green and green[0].text == "loss 0.01" and green[0].value_of_css_property("color") != "rgba(221, 221, 221, 1)"
    # the failed run's log comes before the other cards, and its first error is a link at its top
    assert browser.execute_script("return document.getElementById('log-card').compareDocumentPosition("
                                  "document.getElementById('metrics')) & Node.DOCUMENT_POSITION_FOLLOWING")
    link = browser.find_element(By.ID, "first-error")
    assert link.is_displayed() and "Traceback" in link.text
    browser.execute_script("document.getElementById('log').scrollTop = 0")
    link.click()
    assert browser.execute_script(
        "const l = document.querySelector('#log .ln.hit'), p = document.getElementById('log');"
        "const a = l.getBoundingClientRect(), b = p.getBoundingClientRect(); return a.top >= b.top && a.bottom <= b.bottom")
    assert browser.find_element(By.CSS_SELECTOR, "#log .ln.hit").text.startswith("Traceback")
    shot(browser, "terminal-log")
    # search inside the app: highlighted, with context, a way back
    search = browser.find_element(By.CSS_SELECTOR, "#log-card input[name=q]")
    search.send_keys("valueerror")
    search.submit()
    until(lambda: browser.find_elements(By.CSS_SELECTOR, "pre.hits mark"), what="the search results")
    assert [m.text for m in browser.find_elements(By.CSS_SELECTOR, "pre.hits mark")] == ["ValueError"]
    context = browser.find_element(By.CSS_SELECTOR, "pre.hits").text
    assert 'File "train.py"' in context and "\x1b" not in context
    shot(browser, "log-search")
    browser.find_element(By.ID, "back").click()
    until(lambda: "run-term" in browser.title, what="back on the run page")
    href = browser.find_element(By.ID, "whole-log").get_attribute("href")
    with urlopen(href) as response:  # noqa: S310 (the test's own loopback server)
        assert "attachment" in response.headers["content-disposition"]
        assert "ValueError: bad shape" in response.read().decode()


def test_runs_table_columns_tags_and_times(team: dict[str, Any], browser: Any) -> None:
    """The runs table's columns: duration, user, tags as text (any script), the job's args and final metrics
    (choosable), relative times with the absolute one on hover. The ledger's view reads them from the records
    (the team storage's from the index entries' newer fields, once its reader keeps them)."""
    from selenium.webdriver.common.by import By

    browser.get(team["url"] + "?source=ledger")
    row = until(lambda: browser.find_element(By.CSS_SELECTOR, 'tr[data-run="run-tagged"]'), what="the tagged run")
    tags = row.find_element(By.CSS_SELECTOR, "td.tags").text
    assert "שלום עולם · مرحبا · 🚀" in tags and "\\u" not in tags
    assert row.find_element(By.CSS_SELECTOR, "td.user").text == "ivan"  # the ledger's view names the user
    heads = [h.text for h in browser.find_elements(By.CSS_SELECTOR, "#runs thead th")]
    assert {"epochs", "val_loss", "val_accuracy", "duration", "tags"} <= set(heads), heads
    assert [c.text for c in row.find_elements(By.CSS_SELECTOR, "td.arg")][:1] == ["2"]
    assert [c.text for c in row.find_elements(By.CSS_SELECTOR, "td.metric")] == ["1.1", "0.75"]
    started = row.find_element(By.TAG_NAME, "time")
    assert started.text.endswith("ago") and started.get_attribute("title") == "2026-11-18T07:00:00Z"
    assert browser.find_element(By.CSS_SELECTOR, 'tr[data-run="run-good"] td.duration').text == "5 min 00 s"
    shot(browser, "runs-columns")
    # tags are searched where the rows carry them (the ledger's: with a user filter, which reads the records; the
    # team storage's: the index entries' tags)
    for needle, found in (("مرحبا", ["run-tagged"]), ("nowhere", [])):
        browser.get(team["url"] + "?source=ledger&user=ivan&q=" + needle)
        assert [r.get_attribute("data-run") for r in browser.find_elements(By.CSS_SELECTOR, "tr.run")] == found
    browser.get(team["url"] + "?source=ledger&cols=metric.val_loss")  # the columns chosen
    assert [h.text for h in browser.find_elements(By.CSS_SELECTOR, "#runs thead th.metric-col, #runs thead th.arg-col")] \
        == ["val_loss"]
    browser.get(team["url"])  # the team storage's view: user and duration from today's index entries
    browser.execute_script("window.notReloaded = true")
    write_run(team["root"], "run-late", "late-train", epochs=1, user="jon", start="2026-11-18T05:00:00+00:00")
    until(lambda: browser.find_elements(By.CSS_SELECTOR, 'tr[data-run="run-late"]'), timeout=30,
          what="a new run in the table without a reload (it refreshes itself every 10 s)")
    assert browser.execute_script("return window.notReloaded") is True
    assert browser.find_element(By.CSS_SELECTOR, 'tr[data-run="run-good"] td.duration').text == "5 min 00 s"
    assert browser.find_element(By.CSS_SELECTOR, 'tr[data-run="run-tagged"] td.user').text == "ivan"
    colours = {browser.find_element(By.CSS_SELECTOR, f'tr[data-run="{r}"] .status').value_of_css_property("color")
               for r in ("run-good", "run-bad", "run-live")}
    assert len(colours) == 3
    shot(browser, "runs-colours")
    with urlopen(team["url"] + "favicon.ico") as response:  # noqa: S310
        assert response.status == 200 and response.headers["content-type"].startswith("image/svg")


def test_compare_shows_only_differences_and_stays_in_the_window(team: dict[str, Any], browser: Any) -> None:
    from selenium.webdriver.common.by import By

    browser.get(team["url"] + "compare?run=run-tagged&run=run-good")
    until(lambda: "compare" in browser.title, what="the compare page")
    shown = [r.find_element(By.TAG_NAME, "code").text for r in browser.find_elements(By.CSS_SELECTOR, "#diff tr")
             if r.is_displayed() and r.find_elements(By.TAG_NAME, "code")]
    assert "epochs" in shown and "lr" in shown and "long" in shown  # the real changes, as args
    assert "RTJOB_RUN_ID" not in shown  # an id: shown with the rest, not counted
    assert all(r.get_attribute("class").startswith("differs") for r in browser.find_elements(By.CSS_SELECTOR, "#diff tr")
               if r.is_displayed() and r.find_elements(By.TAG_NAME, "code"))
    width = browser.execute_script("return [document.documentElement.scrollWidth, window.innerWidth]")
    assert width[0] <= width[1], width
    browser.find_element(By.ID, "show-all").click()
    assert any(r.is_displayed() for r in browser.find_elements(By.CSS_SELECTOR, "#diff tr.same"))
    legends = browser.execute_script(
        "return [...document.querySelectorAll('figure.chart')].map(f => [f.querySelector('.u-legend').offsetHeight,"
        " f.querySelector('canvas').offsetHeight])")
    assert legends and all(legend < chart for legend, chart in legends), legends
    shot(browser, "compare-long-tag")


def test_pages_fit_a_phone(team: dict[str, Any], browser: Any) -> None:
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                            {"width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": True})
    try:
        for path in ("", "runs/run-good", "runs/run-grow", "runs/run-term", "compare?run=run-tagged&run=run-good",
                     "runs/run-term/log/find?q=loss"):
            browser.get(team["url"] + path)
            if path.startswith("runs/run-g"):
                until(lambda: chart_drawn(browser, 0), what="a drawn chart")
            width = browser.execute_script("return [document.documentElement.scrollWidth, window.innerWidth]")
            assert width[0] <= width[1] == 390, (path, width)
            shot(browser, "phone-" + (path.split("?")[0].replace("/", "-") or "runs"))
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
