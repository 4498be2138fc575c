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
      axes: [{label: "epoch", incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000]}, {}],
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

// Scrolling back: the last N + 1,000 lines replace the N shown (read from the log's end by the server), the view
// kept where it was.
function scrollBack() {
  const pre = document.getElementById("log");
  const button = document.getElementById("earlier");
  if (!pre || !button) return;
  let shown = 1000;
  button.addEventListener("click", async () => {
    shown += 1000;
    button.disabled = true;
    const fromBottom = pre.scrollHeight - pre.scrollTop;
    const response = await fetch(pre.dataset.src + "?lines=" + shown, {credentials: "same-origin"});
    const text = await response.text();
    if (response.ok) {
      pre.textContent = text;
      pre.scrollTop = pre.scrollHeight - fromBottom;
    }
    const count = text.split("\n").length - 1;
    button.disabled = count < shown;
    if (count < shown) button.textContent = "the log's first line is shown";
  });
}

function refreshStatus() {
  const body = document.body;
  if (!body.dataset.live) return;
  const card = document.getElementById("status-card");
  const url = "/runs/" + encodeURIComponent(body.dataset.run) + "/card";
  let shown = null;
  const tick = async () => {
    try {
      const response = await fetch(url, {credentials: "same-origin"});
      if (response.ok) {
        const html = await response.text();  // server-rendered, escaped fragment
        if (html !== shown) {  // an unchanged card is left as it is (no needless re-render of its elements)
          const doc = new DOMParser().parseFromString(html, "text/html");
          card.replaceChildren(...doc.body.childNodes);
          shown = html;
        }
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
  scrollBack();
  refreshStatus();
});
