// rtjob ui: draws the charts (uPlot) from the data the page carries and from the run's live rows, renders the log as
// a terminal shows it (colours, progress bars at their last state, Ray's worker prefixes kept short), follows a
// running run (its status, attempt, step and curves, polled about every second until it ends), and refreshes the
// runs table. Text from the server is only ever set as textContent.
"use strict";

const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];
const POLL_MS = 1000;

// ---- charts -------------------------------------------------------------------------------------------------

const charts = new Map();  // key -> {fig, u, chart: {title, x, time, series: [{label, values}]}, zoomed}
let smoothing = 0;

function ema(values, weight) {
  if (!weight) return values;
  let last = null;
  return values.map((v) => (v == null ? null : (last = last == null ? v : weight * last + (1 - weight) * v)));
}

// A y tick with 3 significant digits (uPlot's default rounds a learning rate's 0.0008 and 0.001 alike).
function tick(v) {
  if (v == null) return "";
  const a = Math.abs(v);
  return a !== 0 && (a < 1e-4 || a >= 1e6) ? v.toExponential(1) : String(Number(v.toPrecision(3)));
}

// Times on a chart's axis as every printed time: UTC, 24-hour (uPlot's own ticks are local and 12-hour); the date
// only when the chart spans more than a day.
function utcTick(seconds, span) {
  const iso = new Date(seconds * 1000).toISOString();
  return span > 86400 ? iso.slice(5, 10) + " " + iso.slice(11, 16) : iso.slice(11, 19);
}

function utcTicks(u, splits) {
  const span = u.scales.x.max - u.scales.x.min;
  return splits.map((s) => (s == null ? "" : utcTick(s, span)));
}

// A chart's x range: its points', or for one point (or all at one x) a span around it: a minute of time, one step
// (uPlot would stretch a single time over years).
function xRange(min, max, time) {
  if (min == null || max == null) return [0, 1];
  if (min !== max) return [min, max];
  return time ? [min - 30, max + 30] : [min - 1, max + 1];
}

function chartWidth(fig) {
  return Math.max(200, Math.floor(fig.clientWidth || fig.parentElement.clientWidth || 400));
}

function draw(entry) {
  const {fig, chart} = entry;
  fig.dataset.points = String(chart.x.length);
  fig.dataset.x = chart.time ? "time" : (chart.xlabel || "x");
  const data = [chart.x, ...chart.series.map((s) => ema(s.values, smoothing))];
  const shape = chart.series.map((s) => s.label).join("\u0000") + (chart.time ? "|t" : "|n") + (chart.xlabel || "");
  if (entry.u && entry.shape === shape) {
    entry.u.setData(data, !entry.zoomed);
    return;
  }
  if (entry.u) entry.u.destroy();
  entry.shape = shape;
  entry.zoomed = false;
  const many = chart.x.length > 60;
  entry.u = new uPlot({
    width: chartWidth(fig), height: 220,
    tzDate: (seconds) => uPlot.tzDate(new Date(seconds * 1e3), "Etc/UTC"),  // the cursor's times in UTC too
    scales: {x: {time: !!chart.time, range: (u, min, max) => xRange(min, max, !!chart.time)}},
    axes: [{label: chart.xlabel || undefined, values: chart.time ? utcTicks : undefined},
           {size: 60, values: (u, splits) => splits.map(tick)}],
    legend: {live: false},
    cursor: {drag: {x: true, y: false}},
    hooks: {setSelect: [(u) => { if (u.select.width > 0) entry.zoomed = true; }]},
    series: [{label: chart.xlabel || "x"}, ...chart.series.map((s, i) => ({
      label: s.label, stroke: COLORS[i % COLORS.length], width: 1.5, spanGaps: true, points: {show: !many},
    }))],
  }, data, fig);
  fig.addEventListener("dblclick", () => { entry.zoomed = false; });
}

const resizer = typeof ResizeObserver === "undefined" ? null : new ResizeObserver((items) => {
  for (const item of items) {
    const entry = charts.get(item.target.dataset.key);
    if (entry && entry.u) entry.u.setSize({width: chartWidth(item.target), height: 220});
  }
});

function figureFor(container, key, title, note) {
  let entry = charts.get(key);
  if (entry) return entry;
  const fig = document.createElement("figure");
  fig.className = "chart";
  fig.dataset.key = key;
  fig.dataset.title = title;
  const caption = document.createElement("figcaption");
  caption.textContent = title;
  if (note) {
    const muted = document.createElement("span");
    muted.className = "muted";
    muted.textContent = " " + note;
    caption.appendChild(muted);
  }
  fig.appendChild(caption);
  container.appendChild(fig);
  entry = {fig, u: null, chart: null, zoomed: false};
  charts.set(key, entry);
  if (resizer) resizer.observe(fig);
  return entry;
}

function show(container, key, title, chart, note) {
  const entry = figureFor(container, key, title, note);
  entry.chart = chart;
  draw(entry);
}

function drawServerCharts() {
  let n = 0;
  for (const fig of document.querySelectorAll("figure.chart[data-chart]")) {
    const chart = JSON.parse(fig.dataset.chart);
    chart.xlabel = "epoch";
    const key = fig.closest("#epoch-charts") ? "epoch-" + chart.title : "server-" + (n++) + "-" + chart.title;
    fig.dataset.key = key;
    const entry = {fig, u: null, chart, zoomed: false};
    charts.set(key, entry);
    if (resizer) resizer.observe(fig);
    draw(entry);
  }
}

function redrawAll() {
  for (const entry of charts.values()) if (entry.chart) draw(entry);
}

// Step rows grouped by scale: one chart (one y axis) per group.
const GROUPS = [
  ["loss", (k) => /loss/.test(k)],
  ["learning rate", (k) => /(^|_)lr$|learning_rate/.test(k)],
  ["samples/s", (k) => /samples_per_s|throughput|_per_s$/.test(k)],
  ["accuracy", (k) => /acc/.test(k)],
  ["memory (MB)", (k) => /mem/.test(k)],
];
const STEP_KEYS = new Set(["step", "time", "epoch"]);

function numeric(v) { return typeof v === "number" && isFinite(v) ? v : null; }

function drawStepCharts(rows, xAxis) {
  const container = document.getElementById("step-charts");
  if (!container || !rows.length) return;
  const keys = [];
  for (const row of rows) for (const k of Object.keys(row)) if (!STEP_KEYS.has(k) && numeric(row[k]) !== null && !keys.includes(k)) keys.push(k);
  const groups = [];
  const taken = new Set();
  for (const [title, test] of GROUPS) {
    const chosen = keys.filter((k) => !taken.has(k) && test(k));
    if (chosen.length) { groups.push([title, chosen]); chosen.forEach((k) => taken.add(k)); }
  }
  for (const k of keys) if (!taken.has(k)) groups.push([k, [k]]);
  const byTime = xAxis === "time";
  const ordered = rows.filter((r) => numeric(byTime ? r.time : r.step) !== null);
  const x = ordered.map((r) => (byTime ? r.time : r.step));
  for (const [title, chosen] of groups) {
    show(container, "step-" + title, title, {
      title, x, time: byTime, xlabel: byTime ? "" : "step",
      series: chosen.map((k) => ({label: k, values: ordered.map((r) => numeric(r[k]))})),
    }, "per step");
  }
}

function drawSystemCharts(rows) {
  const container = document.getElementById("system-charts");
  if (!container || !rows.length) return;
  const empty = document.getElementById("no-system");
  if (empty) empty.hidden = true;
  const nodes = [...new Set(rows.map((r) => String(r.node)))];
  const times = [...new Set(rows.map((r) => r.time).filter((t) => numeric(t) !== null))].sort((a, b) => a - b);
  const at = new Map(times.map((t, i) => [t, i]));
  const named = (base, node) => (nodes.length > 1 ? base + " " + node.slice(0, 12) : base);
  const series = {cpu: new Map(), mem: new Map(), gpu: new Map(), gmem: new Map()};
  const put = (group, label, time, value) => {
    if (!series[group].has(label)) series[group].set(label, new Array(times.length).fill(null));
    if (at.has(time)) series[group].get(label)[at.get(time)] = numeric(value);
  };
  for (const r of rows) {
    const node = String(r.node);
    put("cpu", named("cpu", node), r.time, r.cpu_percent);
    put("mem", named("used", node), r.time, numeric(r.mem_used_mb) === null ? null : r.mem_used_mb / 1024);
    for (const g of Array.isArray(r.gpus) ? r.gpus : []) {
      put("gpu", named("gpu" + g.index, node), r.time, g.util_percent);
      put("gmem", named("gpu" + g.index, node), r.time, numeric(g.mem_used_mb) === null ? null : g.mem_used_mb / 1024);
    }
  }
  const charts_ = [["cpu", "CPU %"], ["mem", "memory (GB)"], ["gpu", "GPU utilisation %"], ["gmem", "GPU memory (GB)"]];
  for (const [group, title] of charts_) {
    if (!series[group].size) continue;
    show(container, "system-" + group, title, {
      title, x: times, time: true,
      series: [...series[group]].map(([label, values]) => ({label, values})),
    });
  }
}

// ---- the log as a terminal shows it ----------------------------------------------------------------------------

const ESC = /\x1b\[([0-9;?]*)([A-Za-z])|\x1b\][^\x07]*\x07/g;
const WORKER = /^((?:\x1b\[[0-9;]*m)*)\(([A-Za-z_][\w.]*)?\s*pid=(\d+)(?:, ip=[^)]*)?\)((?:\x1b\[[0-9;]*m)*) ?/;
const SHORT_NAMES = {RayTrainWorker: "worker", TrainController: "controller", TrainTrainable: "trainable"};
const ERROR_LINE = /Traceback \(most recent call last\)|^\s*(?:[\w.]+\.)?\w*(?:Error|Exception)\b|\bERROR\b|\bFATAL\b/;

class Terminal {
  constructor(pre) { this.pre = pre; this.pending = ""; this.n = 0; this.firstError = null; }

  reset() { this.pre.textContent = ""; this.pending = ""; this.n = 0; this.firstError = null; hideError(); }

  write(text) {
    const atEnd = this.pre.scrollTop + this.pre.clientHeight >= this.pre.scrollHeight - 4;
    const lines = (this.pending + text).split("\n");
    this.pending = lines.pop();
    const out = document.createDocumentFragment();
    for (const line of lines) out.appendChild(this.line(line));
    this.pre.appendChild(out);
    if (atEnd) this.pre.scrollTop = this.pre.scrollHeight;
  }

  flush() { if (this.pending) { const rest = this.pending; this.pending = ""; this.write(rest + "\n"); } }

  line(raw) {
    this.n += 1;
    let text = raw.replace(/\r+$/, "");
    const cr = text.lastIndexOf("\r");  // a progress bar redrawn in place: its last state
    if (cr >= 0) text = text.slice(cr + 1);
    const span = document.createElement("span");
    span.className = "ln";
    span.id = "L" + this.n;
    const worker = WORKER.exec(text);
    if (worker) {
      const prefix = document.createElement("span");
      prefix.className = "wp";
      prefix.title = worker[0].replace(ESC, "").trim();
      prefix.textContent = (SHORT_NAMES[worker[2]] || worker[2] || "pid") + " " + worker[3] + " ";
      span.appendChild(prefix);
      text = text.slice(worker[0].length);
    }
    let classes = [];
    let at = 0;
    const emit = (piece) => {
      if (!piece) return;
      if (!classes.length) { span.appendChild(document.createTextNode(piece)); return; }
      const styled = document.createElement("span");
      styled.className = classes.join(" ");
      styled.textContent = piece;
      span.appendChild(styled);
    };
    ESC.lastIndex = 0;
    for (let m; (m = ESC.exec(text));) {
      emit(text.slice(at, m.index));
      at = ESC.lastIndex;
      if (m[2] !== "m") continue;  // cursor moves, clears: nothing to show
      for (const code of (m[1] || "0").split(";").map(Number)) {
        if (code === 0) classes = [];
        else if (code === 1) classes.push("a-b");
        else if (code === 2) classes.push("a-d");
        else if (code === 3) classes.push("a-i");
        else if (code === 4) classes.push("a-u");
        else if (code === 39) classes = classes.filter((c) => !/^a-\d+$/.test(c));
        else if ((code >= 30 && code <= 37) || (code >= 90 && code <= 97)) {
          classes = classes.filter((c) => !/^a-\d+$/.test(c));
          classes.push("a-" + code);
        } else if (code >= 41 && code <= 44) classes.push("a-bg" + code);
      }
    }
    emit(text.slice(at));
    span.appendChild(document.createTextNode("\n"));
    if (this.firstError === null && ERROR_LINE.test(span.textContent)) {
      this.firstError = this.n;
      showError(this.n, span.textContent.trim());
    }
    return span;
  }
}

function hideError() {
  const link = document.getElementById("first-error");
  if (link) link.hidden = true;
}

function showError(n, text) {
  const link = document.getElementById("first-error");
  if (!link) return;
  link.hidden = false;
  link.href = "#L" + n;
  link.textContent = "first error (line " + n + " shown): " + (text.length > 80 ? text.slice(0, 79) + "…" : text);
}

function jumpToError(event) {
  const link = event.currentTarget;
  const line = document.getElementById(link.getAttribute("href").slice(1));
  if (!line) return;
  event.preventDefault();
  const pre = document.getElementById("log");
  pre.scrollTop = line.offsetTop - pre.offsetTop - pre.clientHeight / 3;
  line.classList.add("hit");
}

let terminal = null;

async function fillLog() {
  const pre = document.getElementById("log");
  if (!pre) return;
  terminal = new Terminal(pre);
  const link = document.getElementById("first-error");
  if (link) link.addEventListener("click", jumpToError);
  let parts = "";
  try {
    const response = await fetch(pre.dataset.src, {credentials: "same-origin"});
    parts = response.headers.get("x-log-parts") || "";
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    for (;;) {
      const {done, value} = await reader.read();
      if (done) break;
      terminal.write(decoder.decode(value, {stream: true}));
    }
    terminal.flush();
    pre.scrollTop = pre.scrollHeight;
  } catch (err) {
    terminal.write("(log not readable: " + err + ")\n");
  }
  if (pre.dataset.live) {
    const source = new EventSource(pre.dataset.live + (parts ? "?skip=" + encodeURIComponent(parts) : ""));
    source.addEventListener("lines", (event) => terminal.write(event.data + "\n"));
    source.addEventListener("ended", () => { source.close(); markEnded(); });
    window.rtjobLogSource = source;
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
      terminal.reset();
      terminal.write(text);
      terminal.flush();
      pre.scrollTop = pre.scrollHeight - fromBottom;
    }
    const count = text.split("\n").length - 1;
    button.disabled = count < shown;
    if (count < shown) button.textContent = "the log's first line is shown";
  });
}

// ---- a run followed live --------------------------------------------------------------------------------------

// As the server's `ago` filter (ui/formats.py) says it, so a card's times read the same before and after a poll.
function ago(seconds) {
  const s = Date.now() / 1000 - seconds;
  if (s < 0) return "just now";
  for (const [size, unit] of [[86400, "d"], [3600, "h"], [60, "min"]]) if (s >= size) return Math.floor(s / size) + " " + unit + " ago";
  return Math.floor(s) + " s ago";
}

// The card's relative times ("started 27 s ago") move on each poll, not only when the card is drawn again.
function refreshAgo() {
  for (const el of document.querySelectorAll("#status-card time[data-ago]")) {
    const when = Date.parse(el.getAttribute("datetime"));
    if (!Number.isNaN(when)) el.textContent = ago(when / 1000);
  }
}

function setText(id, value) {
  const el = document.getElementById(id);
  if (el) el.textContent = value == null || value === "" ? "–" : String(value);
}

function markEnded() {
  const state = document.getElementById("live-state");
  if (state) state.textContent = "ended";
  document.body.dataset.live = "";
  document.body.dataset.ended = "1";
}

async function refreshCard() {
  const card = document.getElementById("status-card");
  const response = await fetch("/runs/" + encodeURIComponent(document.body.dataset.run) + "/card",
                               {credentials: "same-origin"});
  if (!response.ok) return;
  const doc = new DOMParser().parseFromString(await response.text(), "text/html");  // server-rendered, escaped
  card.replaceChildren(...doc.body.childNodes);
}

function followRun() {
  const run = document.body.dataset.run;
  if (!run || !document.getElementById("step-charts")) return;
  const xSelect = document.getElementById("x-axis");
  const smooth = document.getElementById("smoothing");
  let steps = [];
  let system = [];
  let stepsN = 0;
  let systemN = 0;
  let shownStatus = (document.getElementById("status") || {}).textContent;
  let epochsShown = JSON.stringify([...document.querySelectorAll("#epoch-charts figure")].map((f) => f.dataset.points));
  const redrawSteps = () => drawStepCharts(steps, xSelect ? xSelect.value : "step");
  if (xSelect) xSelect.addEventListener("change", () => {
    for (const [key, entry] of charts) if (key.startsWith("step-")) { entry.u && entry.u.destroy(); entry.u = null; }
    redrawSteps();
  });
  if (smooth) smooth.addEventListener("input", () => {
    smoothing = Number(smooth.value);
    setText("smoothing-value", smoothing.toFixed(2));
    redrawAll();
  });
  const tick = async () => {
    let ended = false;
    try {
      const url = "/api/runs/" + encodeURIComponent(run) + "/live?steps=" + stepsN + "&system=" + systemN;
      const response = await fetch(url, {credentials: "same-origin"});
      if (response.ok) {
        const live = await response.json();
        if (live.steps_n < stepsN || live.system_n < systemN) {  // a file started again: read it whole
          steps = []; system = []; stepsN = 0; systemN = 0;
          setTimeout(tick, 0);
          return;
        }
        stepsN = live.steps_n; systemN = live.system_n;
        if (live.steps.length) { steps = steps.concat(live.steps); redrawSteps(); }
        if (live.system.length) { system = system.concat(live.system); drawSystemCharts(system); }
        const epochs = JSON.stringify(live.epoch_charts.map((c) => String(c.x.length)));
        if (epochs !== epochsShown && live.epoch_charts.length) {
          epochsShown = epochs;
          const container = document.getElementById("epoch-charts");
          const none = document.getElementById("no-epochs");
          if (none) none.hidden = true;
          for (const chart of live.epoch_charts) { chart.xlabel = "epoch"; show(container, "epoch-" + chart.title, chart.title, chart, "per epoch"); }
        }
        setText("live-attempt", live.attempts > 1 ? live.attempt + " of " + live.attempts : live.attempt);
        setText("live-step", live.step);
        setText("live-epoch", live.epoch);
        const time = document.getElementById("live-time");
        if (time && typeof live.step_time === "number") {
          time.textContent = ago(live.step_time);
          time.title = new Date(live.step_time * 1000).toISOString().slice(0, 19) + "Z";
        }
        if (live.status !== shownStatus) { shownStatus = live.status; await refreshCard(); }
        refreshAgo();
        ended = live.ended;
      }
    } catch (err) { /* the server is restarting: try again */ }
    if (ended) {
      markEnded();
      if (window.rtjobLogSource) window.rtjobLogSource.close();
    }
    if (!ended && document.body.dataset.live) setTimeout(tick, POLL_MS);
  };
  tick();
}

// ---- the runs table refreshes itself --------------------------------------------------------------------------

function refreshRuns() {
  const table = document.getElementById("runs");
  if (!table || !table.dataset.refresh) return;
  const every = Number(table.dataset.refresh) * 1000;
  const tick = async () => {
    try {
      const response = await fetch(location.href, {credentials: "same-origin", headers: {accept: "text/html"}});
      if (response.ok) {
        const doc = new DOMParser().parseFromString(await response.text(), "text/html");
        const fresh = doc.querySelector("#runs tbody");
        const current = document.querySelector("#runs tbody");
        if (fresh && current) {
          const ticked = new Set([...current.querySelectorAll("input[name=run]:checked")].map((i) => i.value));
          for (const box of fresh.querySelectorAll("input[name=run]")) box.checked = ticked.has(box.value);
          current.replaceWith(document.adoptNode(fresh));
          const pager = doc.querySelector(".pager");
          const shown = document.querySelector(".pager");
          if (pager && shown) shown.replaceWith(document.adoptNode(pager));
        }
      }
    } catch (err) { /* try again */ }
    setTimeout(tick, every);
  };
  setTimeout(tick, every);
}

document.addEventListener("DOMContentLoaded", () => {
  drawServerCharts();
  fillLog();
  scrollBack();
  followRun();
  refreshRuns();
});
