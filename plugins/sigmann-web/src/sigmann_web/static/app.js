// Sigma dashboard: one tab per run, fed by Server-Sent Events from /api/events,
// steering through the JSON API (POST /api/control, /api/set, /api/predict, /api/watch).
"use strict";

const TOKEN = (() => {
  const given = new URLSearchParams(location.search).get("token");
  if (given) sessionStorage.setItem("sigma-token", given);
  return given || sessionStorage.getItem("sigma-token") || "";
})();
const MAX_POINTS = 2000; // chart points kept per run; older iteration points are thinned first
const COLOURS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#ca8a04", "#db2777"];
const STANDARD = new Set(["time", "event", "epoch", "iteration", "step", "cost", "learning_rate",
                          "iterations_per_s", "seconds"]);
const runs = new Map();
let shown = null;

const $ = (root, selector) => root.querySelector(selector);
const bind = (root, name) => $(root, `[data-bind="${name}"]`);
const number = (v, digits = 4) => v == null ? "—" : Math.abs(v) >= 1e4 || (v !== 0 && Math.abs(v) < 1e-3)
  ? v.toExponential(2) : v.toPrecision(digits).replace(/\.?0+$/, "");
const percent = v => v == null ? "—" : (100 * v).toFixed(1) + "%";
const tick = v => v == null ? "" : Math.abs(v) >= 1e4 || (v !== 0 && Math.abs(v) < 1e-3) ? v.toExponential(0) : String(+v.toPrecision(3));
// A log axis keeps its powers of ten only (ticks, labels and grid), every other one when there are many.
function decades(splits) {
  const powers = splits.filter(v => Math.abs(Math.log10(v) - Math.round(Math.log10(v))) < 1e-9);
  const step = powers.length > 6 ? 2 : 1;
  return splits.map(v => powers.includes(v) && Math.round(Math.log10(v)) % step === 0 ? v : null);
}
const percentTick = v => v == null ? "" : `${+(100 * v).toFixed(1)}%`;
const whole = v => v == null ? "—" : Math.round(v).toLocaleString("en-US");
function duration(seconds) {
  if (seconds == null || !isFinite(seconds)) return "—";
  const s = Math.round(seconds), h = Math.floor(s / 3600), m = Math.floor(s / 60) % 60;
  if (s < 60) return `${s} s`;
  return h ? `${h}:${String(m).padStart(2, "0")}:${String(s % 60).padStart(2, "0")}` : `${m}:${String(s % 60).padStart(2, "0")}`;
}

// -- talking to the server ------------------------------------------------------------------------
async function post(path, body) {
  const response = await fetch(path, {method: "POST", headers: {"Content-Type": "application/json", "X-Sigma-Token": TOKEN},
                                      body: JSON.stringify(body)});
  const answer = await response.json().catch(() => ({error: `${response.status} ${response.statusText}`}));
  if (!response.ok) throw new Error(answer.error || response.statusText);
  return answer;
}

let toastTimer = null;
// A sticky message (a stop's checkpoint and resume command) stays until clicked away; others fade.
function toast(text, isError = false, sticky = false) {
  const el = document.getElementById("toast");
  el.textContent = text;
  el.className = "toast" + (isError ? " error" : "") + (sticky ? " sticky" : "");
  el.title = sticky ? "click to close" : "";
  el.onclick = sticky ? () => { if (!String(getSelection())) el.hidden = true; } : null;  // selecting the command keeps it
  el.hidden = false;
  clearTimeout(toastTimer);
  if (!sticky) toastTimer = setTimeout(() => { el.hidden = true; }, isError ? 6000 : 3000);
}

function connect() {
  const status = document.getElementById("connection");
  const say = (cls, text) => { status.className = "connection " + cls; $(status, ".text").textContent = text; };
  const events = new EventSource("/api/events");
  events.onopen = () => say("live", "connected");
  events.onerror = () => {
    const ended = runs.size && [...runs.values()].every(run => !run.state.live);
    say(ended ? "" : "retry", ended ? "server stopped" : "reconnecting…");
  };
  events.onmessage = event => {
    const message = JSON.parse(event.data);
    if (message.type === "snapshot") message.runs.forEach(snapshot => upsert(snapshot));
    else if (message.type === "add") upsert(message);
    else if (message.type === "update" && runs.has(message.run)) runs.get(message.run).update(message);
  };
}

function upsert(snapshot) {
  let run = runs.get(snapshot.run);
  if (!run) {
    run = new Run(snapshot);
    runs.set(snapshot.run, run);
    if (!shown) show(snapshot.run);
  } else {
    run.load(snapshot);
  }
  renderTabs();
  document.getElementById("banner").hidden = !!TOKEN || ![...runs.values()].some(r => r.state.live);
}

function show(name) {
  shown = name;
  for (const [key, run] of runs) run.el.classList.toggle("active", key === name);
  document.getElementById("empty").hidden = true;
  renderTabs();
  runs.get(name).resize();
}

function renderTabs() {
  const tabs = document.getElementById("tabs");
  tabs.replaceChildren(...[...runs.values()].map(run => {
    const button = document.createElement("button");
    button.type = "button";
    button.className = run.name === shown ? "active" : "";
    const dot = document.createElement("span");
    dot.className = `dot ${run.state.state || ""}`;
    button.append(dot, run.name);
    button.onclick = () => show(run.name);
    return button;
  }));
}

// -- charts ----------------------------------------------------------------------------------------
class Chart {
  // onZoom(start, end): a drag selected the x range [start, end], or a double click undid it (null, null);
  // a chart given one shows the x range in its `range` (null: all of it), whatever data it is given.
  constructor(el, {x, y = {}, format, axis, whole = false, onZoom = null}) {
    this.el = el;
    this.labels = null;
    this.spec = {x, y, format, axis, whole};
    this.onZoom = onZoom;
    this.range = null;
  }
  // series: [{label, values, dash, width, stepped}], xs: shared x values; a stepped series holds each value until the next
  // (a setting changes at a step: a slope between two records would show values it never had)
  draw(xs, series, log = false) {
    const dense = series.some(s => s.points && s.values.filter(v => v != null).length > 80); // markers would clutter
    const labels = series.map(s => s.label).join("\n") + (log ? " log" : "") + (dense ? " dense" : "");
    if (this.plot && labels !== this.labels) { this.plot.destroy(); this.plot = null; }
    this.labels = labels;
    if (!series.length) return;
    const data = [xs, ...series.map(s => s.values)];
    if (!this.plot) {
      const {x, y, format, axis, whole} = this.spec;
      const only = log ? {filter: (u, splits) => decades(splits)} : {};
      const opts = {
        width: Math.max(this.el.clientWidth, 200), height: this.el.clientHeight - 34,
        scales: {x: {time: false}, y: {...y, ...(log ? {distr: 3} : {})}},
        axes: [{label: x, size: 38, labelSize: 16, grid: {stroke: "#f0f1f3"}, ticks: {stroke: "#e5e7eb"},
                ...(whole ? {incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 1e4, 2e4, 5e4, 1e5]} : {})},
               {size: 60, grid: {stroke: "#f0f1f3", ...only}, ticks: {stroke: "#e5e7eb", ...only}, ...only,
                values: (u, v) => v.map(axis || tick)}],
        series: [{label: x}, ...series.map(s => ({label: s.label, stroke: s.colour, width: s.width || 1.6, dash: s.dash,
                                                   spanGaps: true, ...(s.stepped ? {paths: uPlot.paths.stepped({align: 1})} : {}), points: {show: !!s.points && !dense, size: 5}, value: (u, v) => v == null ? "—" : (format || number)(v)}))],
        cursor: {drag: {x: true, y: false}},
        legend: {live: true},
      };
      if (this.onZoom) {
        opts.hooks = {setSelect: [u => {
          if (u.select.width > 0) this.onZoom(u.posToVal(u.select.left, "x"), u.posToVal(u.select.left + u.select.width, "x"));
        }]};
        opts.cursor.bind = {dblclick: () => () => { this.onZoom(null, null); return null; }};
      }
      this.plot = new uPlot(opts, data, this.el);
      if (this.range) this.plot.setScale("x", this.range);
      return;
    }
    if (this.onZoom) {
      this.plot.setData(data, !this.range);
      if (this.range) this.plot.setScale("x", this.range);
      return;
    }
    const shownXs = this.plot.data[0];
    const zoomed = shownXs.length > 1 && (this.plot.scales.x.min > shownXs[0] || this.plot.scales.x.max < shownXs[shownXs.length - 1]);
    this.plot.setData(data, !zoomed);
  }
  resize() {
    if (this.plot && this.el.clientWidth) this.plot.setSize({width: this.el.clientWidth, height: this.el.clientHeight - 34});
  }
}

function smooth(values, weight) {
  // TensorBoard's debiased exponential moving average
  let last = 0, n = 0;
  return values.map(v => {
    if (v == null) return null;
    n += 1;
    last = last * weight + (1 - weight) * v;
    return last / (1 - Math.pow(weight, n));
  });
}

// -- one run ------------------------------------------------------------------------------------------
class Run {
  constructor(snapshot) {
    this.name = snapshot.run;
    this.el = document.getElementById("run-template").content.firstElementChild.cloneNode(true);
    this.el.dataset.run = this.name;
    document.getElementById("runs").append(this.el);
    const onZoom = (start, end) => this.zoom(start, end);
    this.charts = {
      cost: new Chart($(this.el, '[data-chart="cost"]'), {x: "step", onZoom}),
      accuracy: new Chart($(this.el, '[data-chart="accuracy"]'), {x: "epoch", format: percent, axis: percentTick, whole: true}),
      rate: new Chart($(this.el, '[data-chart="rate"]'), {x: "step", onZoom}),
      values: new Chart($(this.el, '[data-chart="values"]'), {x: "step", onZoom}),
    };
    this.detail = null; // a zoomed step range and its records, downsampled by the server: {start, end, records}
    this.wire();
    this.load(snapshot);
    new ResizeObserver(() => this.resize()).observe($(this.el, ".charts"));
  }

  load(snapshot) {
    this.info = snapshot.info || {};
    this.records = snapshot.records || [];
    this.state = snapshot.state || {};
    this.settings = {...this.state.settings};
    this.weights = snapshot.weights;
    this.renderInfo();
    this.renderSettings();
    this.render();
    this.renderWeights();
  }

  update(message) {
    if (message.reset) this.records = [];
    this.records.push(...(message.records || []));
    if (this.records.length > MAX_POINTS) this.thin();
    if (message.weights) { this.weights = message.weights; this.renderWeights(); }
    const wasLive = this.state.live;
    this.state = message.state;
    if (wasLive && !this.state.live) this.renderSettings();
    this.render();
    renderTabs();
  }

  thin() {
    const half = Math.floor(this.records.length / 2);
    this.records = this.records.slice(0, half).filter((r, i) => r.event === "epoch" || i % 2 === 0).concat(this.records.slice(half));
  }

  resize() { Object.values(this.charts).forEach(chart => chart.resize()); }

  // The server keeps about 1,000 points of each series for the whole run, so a zoomed range asks it for that
  // range's own points (GET /api/history?start=&end=); a double click goes back to the whole run.
  async zoom(start, end) {
    const detail = this.detail = start == null ? null : {start, end, records: null};
    for (const chart of [this.charts.cost, this.charts.rate, this.charts.values]) chart.range = detail && {min: start, max: end};
    if (detail) {
      const query = new URLSearchParams({run: this.name, start: Math.floor(start), end: Math.ceil(end)});
      const answer = await fetch(`/api/history?${query}`).then(response => response.json()).catch(() => ({}));
      if (this.detail !== detail) return; // zoomed elsewhere meanwhile
      detail.records = answer.records || null;
    }
    this.renderCharts();
  }

  // -- controls -----------------------------------------------------------------------------------
  wire() {
    const el = this.el;
    el.addEventListener("click", event => {
      const action = event.target.closest("[data-action]")?.dataset.action;
      if (!action || event.target.closest("button")?.disabled) return;
      if (action === "clear") return this.clearDrawing();
      const state = this.state.state;
      const body = {
        toggle: {action: state === "running" ? "pause" : this.state.step ? "resume" : "start"},
        step: {action: "step"}, reset: {action: "reset"}, "stop-save": {action: "stop", save: true},
        extend: {action: "extend", epochs: parseInt($(el, '[data-field="extend"]').value, 10)},
      }[action];
      this.act("/api/control", body, action === "stop-save" ? answer => toast(answer.message, false, true) : undefined);
    });
    $(el, '[data-field="smoothing"]').addEventListener("input", () => this.render());
    $(el, '[data-field="log"]').addEventListener("change", () => this.render());
    $(el, '[data-form="watch"]').addEventListener("submit", event => {
      event.preventDefault();
      const input = $(el, '[data-field="watch"]');
      this.act("/api/watch", {key: input.value.trim()}, answer => {
        toast(`charting ${answer.keys.length} value${answer.keys.length === 1 ? "" : "s"}: ${answer.keys.join(", ")}`);
        input.value = "";
      });
    });
    this.wireDrawing();
  }

  async act(path, body, done) {
    try {
      const answer = await post(path, {run: this.name, ...body});
      if (answer.state) { this.state = answer.state; this.render(); }
      if (done) done(answer); else if (answer.message) toast(answer.message);
      return answer;
    } catch (error) {
      toast(error.message, true);
    }
  }

  // -- rendering -----------------------------------------------------------------------------------
  render() {
    const s = this.state, el = this.el;
    const live = !!s.live, steer = live && !!TOKEN;
    const badge = bind(el, "state");
    badge.textContent = s.state || "—";
    badge.className = "badge " + (s.state || "");
    const toggle = $(el, '[data-action="toggle"]');
    toggle.textContent = s.state === "running" ? "Pause" : s.step ? "Resume" : "Start";
    toggle.disabled = !steer;
    $(el, '[data-action="step"]').disabled = !steer || s.state !== "paused";
    for (const name of ["reset", "stop-save", "extend"]) $(el, `[data-action="${name}"]`).disabled = !steer;
    $(el, ".buttons").hidden = !this.info.handler; // runs read from files cannot be steered
    const perEpoch = s.iterations_per_epoch || 0;
    const inEpoch = perEpoch ? s.iteration % perEpoch : 0;
    const current = s.epoch + (inEpoch || (s.state === "running" && s.epoch < s.epochs) ? 1 : 0);
    bind(el, "epoch").textContent = s.epochs ? `${whole(Math.min(Math.max(current, 1), s.epochs))} / ${whole(s.epochs)}` : whole(s.epoch);
    bind(el, "iteration").textContent = perEpoch ? `${inEpoch || (s.step ? perEpoch : 0)} / ${perEpoch}` : whole(s.iteration);
    bind(el, "step").textContent = whole(s.step);
    bind(el, "speed").textContent = s.iterations_per_s ? `${whole(s.iterations_per_s)} it/s` : "—";
    bind(el, "eta").textContent = s.state === "running" ? duration(s.eta_s) : "—";
    bind(el, "cost").textContent = number(s.cost);
    const accuracy = Object.entries(s.latest_epoch || {}).find(([k]) => k.endsWith(".accuracy"));
    bind(el, "accuracy").textContent = accuracy ? percent(accuracy[1]) : "—";
    const total = (s.epochs || 0) * perEpoch;
    bind(el, "progress").style.width = total ? `${Math.min(100, 100 * (s.epoch * perEpoch + inEpoch) / total)}%` : "0";
    Object.assign(this.settings, s.settings);
    const optimiser = $(el, '[data-fact="Optimiser"]');
    if (optimiser) optimiser.textContent = this.optimiser();
    this.renderSettingValues();
    this.renderImages();
    this.renderCharts();
  }

  renderCharts() {
    const el = this.el, live = !!this.state.live;
    const records = this.detail?.records || this.records; // what the step charts show
    const steps = [...new Set(records.map(r => r.step))].sort((a, b) => a - b);
    const at = new Map(steps.map((step, i) => [step, i]));
    const column = (filter, key) => {
      const values = new Array(steps.length).fill(null);
      for (const r of records) if (filter(r) && r[key] != null) values[at.get(r.step)] = r[key];
      return values;
    };
    const iteration = r => r.event === "iteration", epoch = r => r.event === "epoch";
    const raw = column(iteration, "cost");
    const weight = parseFloat($(el, '[data-field="smoothing"]').value);
    const heldOut = [...new Set(this.records.filter(epoch).flatMap(r => Object.keys(r)))].filter(k => k.endsWith(".accuracy")).map(k => k.slice(0, -9));
    const cost = [];
    if (raw.some(v => v != null)) {
      cost.push({label: "training", values: raw, colour: "rgba(37,99,235,0.25)", width: 1});
      cost.push({label: `smoothed (${weight.toFixed(2)})`, values: smooth(raw, weight), colour: COLOURS[0], width: 2});
    }
    cost.push({label: "epoch mean", values: column(epoch, "cost"), colour: "#1e3a8a", points: true, width: 1.5});
    heldOut.forEach((name, i) => cost.push({label: name, values: column(epoch, `${name}.cost`), colour: COLOURS[1 + i], dash: [6, 4], points: true}));
    const log = $(el, '[data-field="log"]').checked;
    if (log) cost.forEach(s => { s.values = s.values.map(v => v > 0 ? v : null); }); // a log axis has no 0
    this.charts.cost.draw(steps, records.length ? cost : [], log);

    const epochs = this.records.filter(epoch);
    const accuracy = [];
    heldOut.forEach((name, i) => {
      const keys = [`${name}.accuracy`, ...Object.keys(epochs[epochs.length - 1] || {}).filter(k => k.startsWith(`${name}.top`))];
      keys.forEach((key, j) => accuracy.push({label: key.endsWith(".accuracy") ? `${name} top-1` : key.replace(".top", " top-"),
                                             values: epochs.map(r => r[key] ?? null), colour: COLOURS[(i * 3 + j) % COLOURS.length], points: true}));
    });
    this.charts.accuracy.draw(epochs.map(r => r.epoch), accuracy);

    this.charts.rate.draw(steps, records.length ? [{label: "learning rate", values: column(() => true, "learning_rate"), colour: COLOURS[2], width: 2, stepped: true}] : []);

    const extra = [...new Set(records.flatMap(r => Object.keys(r)))].filter(k => !STANDARD.has(k) && !/\.(accuracy|cost|top\d+)$/.test(k));
    this.charts.values.draw(steps, extra.map((key, i) => ({label: key, values: column(() => true, key), colour: COLOURS[i % COLOURS.length], width: 1.6})));
    $(el, '[data-panel="values"]').hidden = !live && !extra.length;
    $(el, '[data-form="watch"]').hidden = !live;
  }

  renderInfo() {
    const info = this.info, el = this.el;
    const facts = [];
    if (info.handler) {
      facts.push(["Handler", `${info.handler} (${info.dtype})`], ["Optimiser", this.optimiser()],
                 ["Parameters", whole(info.network.parameters)], ["Epochs planned", whole(info.epochs)],
                 ["Batches per epoch", whole(info.iterations_per_epoch)], ["Held out", (info.validation || []).join(", ") || "—"]);
      if (info.image) facts.push(["Input", `${info.image[0]}×${info.image[1]} image (values ${number(info.input_range[0])} to ${number(info.input_range[1])}), ${info.classes} classes`]);
    } else {
      facts.push(["Source", info.source || "—"], ["Epochs", whole(info.epochs)], ["Batches per epoch", whole(info.iterations_per_epoch)],
                 ["Ended", info.ended || "—"]);
    }
    bind(el, "facts").replaceChildren(...facts.flatMap(([k, v]) => {
      const value = Object.assign(document.createElement("dd"), {textContent: v});
      value.dataset.fact = k;
      return [Object.assign(document.createElement("dt"), {textContent: k}), value];
    }));
    const layers = info.network?.layers || [];
    $(el, "table.network").hidden = !layers.length;
    bind(el, "layers").replaceChildren(...layers.map(layer => {
      const row = document.createElement("tr");
      const shapes = Object.values(layer.parameters).map(shape => shape.join("×")).join(" + ");
      for (const [text, cls] of [[layer.name], [layer.type], [layer.shape.join("×") || "scalar"],
                                 [layer.count ? `${whole(layer.count)}` : "—", "num"]]) {
        const cell = Object.assign(document.createElement("td"), {textContent: text});
        if (cls) cell.className = cls;
        if (cls && shapes) cell.title = shapes;
        row.append(cell);
      }
      return row;
    }));
    $(el, '[data-panel="draw"]').hidden = !info.image;
  }

  // The optimiser and its hyperparameters as last seen: a value edited live replaces the one it started with (and
  // stays once the run ends, when the server no longer sends the settings).
  optimiser() {
    const hyper = {...this.info.hyperparameters};
    for (const [key, value] of Object.entries(this.settings)) if (key.startsWith("optimiser.")) hyper[key.slice(10)] = value;
    return `${this.info.optimiser}: ${Object.entries(hyper).map(([k, v]) => `${k} ${typeof v === "number" ? number(v) : v}`).join(", ")}`;
  }

  // -- settings ------------------------------------------------------------------------------------
  renderSettings() {
    const el = this.el, settable = this.info.settable || {};
    const panel = $(el, '[data-panel="settings"]');
    panel.hidden = !this.state.live || !Object.keys(settable).length;
    if (panel.hidden) return;
    bind(el, "settings").replaceChildren(...Object.entries(settable).map(([key, rule]) => {
      const box = document.createElement("div");
      box.className = "setting";
      box.dataset.key = key;
      const label = key.startsWith("optimiser.") ? key.slice(10).replaceAll("_", " ") : `dropout p (${key.split(".")[2]})`;
      box.innerHTML = `<label><span></span><span class="key"></span></label><div class="row"><input type="number" step="any"><button type="button">Apply</button></div><div class="error" hidden></div>`;
      box.querySelector("label span").textContent = label;
      box.querySelector(".key").textContent = rule.rule.replace("number ", "");
      const input = box.querySelector("input"), error = box.querySelector(".error");
      if (rule.min != null) input.min = rule.min;
      if (rule.max != null) input.max = rule.max;
      input.addEventListener("input", () => { input.dataset.dirty = "1"; });
      const apply = async () => {
        const value = Number(input.value);
        if (input.value.trim() === "" || !Number.isFinite(value)) return this.settingError(box, "enter a number");
        try {
          const answer = await post("/api/set", {run: this.name, key, value});
          delete input.dataset.dirty;
          this.settingError(box, "");
          toast(answer.message);
          this.state = answer.state;
          this.render();
        } catch (failure) {
          this.settingError(box, failure.message);
        }
      };
      box.querySelector("button").onclick = apply;
      input.addEventListener("keydown", event => { if (event.key === "Enter") apply(); });
      box.querySelector("button").disabled = !TOKEN;
      return box;
    }));
    this.renderSettingValues();
  }

  settingError(box, message) {
    const error = box.querySelector(".error");
    error.textContent = message;
    error.hidden = !message;
    box.querySelector("input").classList.toggle("invalid", !!message);
  }

  renderSettingValues() {
    for (const box of this.el.querySelectorAll(".setting")) {
      const input = box.querySelector("input"), value = (this.state.settings || {})[box.dataset.key];
      if (value != null && !input.dataset.dirty && document.activeElement !== input) input.value = String(value);
    }
  }

  // -- weights -------------------------------------------------------------------------------------
  renderWeights() {
    const el = this.el, weights = this.weights;
    $(el, '[data-panel="weights"]').hidden = !weights;
    if (!weights) return;
    const [h, w] = weights.shape;
    const values = new Int8Array(Uint8Array.from(atob(weights.tiles), c => c.charCodeAt(0)).buffer);
    bind(el, "weights-layer").textContent = weights.layer;
    bind(el, "tiles").replaceChildren(...Array.from({length: weights.count}, (_, n) => {
      const canvas = Object.assign(document.createElement("canvas"), {width: w, height: h});
      const context = canvas.getContext("2d"), image = context.createImageData(w, h);
      values.subarray(n * h * w, (n + 1) * h * w).forEach((v, i) => {
        const t = Math.abs(v) / 127, base = v >= 0 ? [220, 38, 38] : [37, 99, 235];
        image.data.set([255 + (base[0] - 255) * t, 255 + (base[1] - 255) * t, 255 + (base[2] - 255) * t, 255], i * 4);
      });
      context.putImageData(image, 0, 0);
      return canvas;
    }));
  }

  // -- published images ----------------------------------------------------------------------------
  // Each run value naming a PNG in the run's folder (the dream hook's grid, say), served by GET /api/image; an
  // image's address carries its modification time, so a rewritten one is loaded again and an unchanged one not.
  renderImages() {
    const images = this.state.images || {}, names = Object.keys(images);
    $(this.el, '[data-panel="images"]').hidden = !names.length;
    const box = bind(this.el, "images");
    const figures = new Map([...box.children].map(figure => [figure.dataset.value, figure]));
    box.replaceChildren(...names.map(name => {
      const figure = figures.get(name) || document.createElement("figure");
      if (!figure.dataset.value) {
        figure.dataset.value = name;
        figure.append(Object.assign(document.createElement("img"), {alt: name}), document.createElement("figcaption"));
      }
      const query = new URLSearchParams({run: this.name, value: name, v: images[name].modified});
      const img = figure.querySelector("img"), source = `/api/image?${query}`;
      if (img.getAttribute("src") !== source) img.src = source;
      figure.querySelector("figcaption").textContent = `${name}: ${images[name].path.split("/").pop()}`;
      return figure;
    }));
  }

  // -- draw a digit --------------------------------------------------------------------------------
  wireDrawing() {
    const canvas = $(this.el, '[data-canvas="draw"]');
    const context = canvas.getContext("2d");
    let drawing = false, last = null, timer = null;
    this.strokes = []; // what the server prepares as MNIST's digits were: each stroke [x0, y0, x1, y1, ...]
    const point = event => {
      const box = canvas.getBoundingClientRect();
      return [(event.clientX - box.left) * canvas.width / box.width, (event.clientY - box.top) * canvas.height / box.height];
    };
    const stroke = to => {
      context.strokeStyle = "#111827";
      context.lineCap = context.lineJoin = "round";
      context.lineWidth = 12; // for the eye only: the server inks the strokes with a pen sized to the digit's box
      context.beginPath();
      context.moveTo(...(last || to));
      context.lineTo(...to);
      context.stroke();
      last = to;
      this.strokes[this.strokes.length - 1].push(...to.map(v => Math.round(v * 10) / 10));
    };
    canvas.addEventListener("pointerdown", event => {
      if (!TOKEN) return toast("drawing needs the token: open the address sigma printed (with ?token=…)", true);
      drawing = true;
      last = null;
      this.strokes.push([]);
      canvas.setPointerCapture(event.pointerId);
      stroke(point(event));
    });
    canvas.addEventListener("pointermove", event => {
      if (!drawing) return;
      stroke(point(event));
      if (!timer) timer = setTimeout(() => { timer = null; this.predict(); }, 150);
    });
    const end = () => { if (drawing) { drawing = false; this.predict(); } };
    canvas.addEventListener("pointerup", end);
    canvas.addEventListener("pointercancel", end);
  }

  clearDrawing() {
    const canvas = $(this.el, '[data-canvas="draw"]');
    canvas.getContext("2d").clearRect(0, 0, canvas.width, canvas.height);
    this.strokes = [];
    $(this.el, '[data-canvas="preview"]').getContext("2d").clearRect(0, 0, 64, 64);
    bind(this.el, "bars").innerHTML = '<p class="hint">Draw with the mouse; the network\'s class probabilities appear here.</p>';
  }

  async predict() {
    // The server scales, boxes and centres the strokes as MNIST's digits were (sigmann_web/drawing.py) and
    // answers with the image the network saw, shown beside the pad.
    if (!this.strokes.length) return;
    const answer = await this.act("/api/predict", {strokes: this.strokes}, () => {});
    if (!answer) return;
    const [h, w] = this.info.image;
    const preview = $(this.el, '[data-canvas="preview"]');
    preview.width = w; preview.height = h;
    const context = preview.getContext("2d"), image = context.createImageData(w, h);
    answer.pixels.flat().forEach((v, i) => image.data.set([255 - 255 * v, 255 - 255 * v, 255 - 255 * v, 255], i * 4));
    context.putImageData(image, 0, 0);
    const bars = bind(this.el, "bars");
    bars.replaceChildren(...answer.probabilities.map((p, digit) => {
      const row = document.createElement("div");
      row.className = "barrow" + (digit === answer.predicted ? " top" : "");
      row.innerHTML = '<span class="label"></span><div class="track"><div class="fill"></div></div><span class="pct"></span>';
      row.querySelector(".label").textContent = digit;
      row.querySelector(".fill").style.width = `${100 * p}%`;
      row.querySelector(".pct").textContent = percent(p);
      return row;
    }));
  }
}

document.getElementById("banner").textContent =
  "Read-only: to steer the run, open the address sigma printed at start-up (it ends in ?token=…).";
connect();
