// rtjob ui: draws the charts from the data the page carries, fills the log (its last lines, then live lines),
// and refreshes a running run's status card. Text from the server is only ever set as textContent.
"use strict";

const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];

function drawCharts() {
  for (const fig of document.querySelectorAll("figure.chart")) {
    const chart = JSON.parse(fig.dataset.chart);
    const data = [chart.x, ...chart.series.map((s) => s.values)];
    const opts = {
      width: 460, height: 240,
      scales: {x: {time: false}},
      axes: [{label: "epoch"}, {}],
      series: [{label: "epoch"}, ...chart.series.map((s, i) => ({label: s.label, stroke: COLORS[i % COLORS.length],
                                                                 width: 2, points: {show: true}}))],
    };
    new uPlot(opts, data, fig);
  }
}

function appendLog(pre, text) {
  const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
  pre.appendChild(document.createTextNode(text));
  if (atEnd) pre.scrollTop = pre.scrollHeight;
}

async function fillLog() {
  const pre = document.getElementById("log");
  if (!pre) return;
  let parts = "";
  try {
    const response = await fetch(pre.dataset.src, {credentials: "same-origin"});
    parts = response.headers.get("x-log-parts") || "";
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    for (;;) {
      const {done, value} = await reader.read();
      if (done) break;
      appendLog(pre, decoder.decode(value, {stream: true}));
    }
    pre.scrollTop = pre.scrollHeight;
  } catch (err) {
    appendLog(pre, "(log not readable: " + err + ")\n");
  }
  if (pre.dataset.live) {
    const source = new EventSource(pre.dataset.live + (parts ? "?skip=" + encodeURIComponent(parts) : ""));
    source.addEventListener("lines", (event) => appendLog(pre, event.data + "\n"));
    source.addEventListener("ended", () => {
      source.close();
      const state = document.getElementById("live-state");
      if (state) state.textContent = "ended";
    });
  }
}

function refreshStatus() {
  const body = document.body;
  if (!body.dataset.live) return;
  const card = document.getElementById("status-card");
  const url = "/runs/" + encodeURIComponent(body.dataset.run) + "/card";
  const tick = async () => {
    try {
      const response = await fetch(url, {credentials: "same-origin"});
      if (response.ok) {
        const html = await response.text();  // server-rendered, escaped fragment
        const doc = new DOMParser().parseFromString(html, "text/html");
        card.replaceChildren(...doc.body.childNodes);
        if (response.headers.get("x-run-ended") === "1") return;
      }
    } catch (err) { /* the server is restarting: try again */ }
    setTimeout(tick, 3000);
  };
  setTimeout(tick, 3000);
}

document.addEventListener("DOMContentLoaded", () => {
  drawCharts();
  fillLog();
  refreshStatus();
});
