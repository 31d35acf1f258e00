// gpuviz live view: polls /api/v1/view once a second with `since` and
// `requests_after`, merges the increments and redraws.
import "uplot/dist/uPlot.min.css";
import "./style.css";
import { Store } from "./store.js";
import { GPUCharts } from "./charts.js";
import { Heatmap } from "./heatmap.js";
import { Lanes, details } from "./lanes.js";
import { renderSummary } from "./summary.js";
import { fmtClock, esc } from "./format.js";

const $ = (id) => document.getElementById(id);
const state = {
  source: null,
  range: 300,
  template: "",
  gen: 0,      // bumps on source or range change: late answers are ignored
  timer: 0,
  failures: 0,
};
const store = new Store();
const tip = $("tip");
let selected = null;

const charts = new GPUCharts($("chart-rows"), $("chart-head"), store, (t) => { heat.setCursor(t); lanes.setCursor(t); });
const heat = new Heatmap($("heatmap"), $("heat-legend"), tip, store);
const lanes = new Lanes($("lanes"), $("lane-sub"), $("lane-legend"), tip, store, (q) => {
  selected = q;
  details($("details"), q, state.template, store.gpus);
});

function readHash() {
  const h = new URLSearchParams(location.hash.slice(1));
  if (h.get("range")) state.range = Number(h.get("range")) || 300;
  if (h.get("source")) state.source = h.get("source");
  if (h.get("heat") === "labels") heat.mode = "labels";
}
function writeHash() {
  const h = new URLSearchParams({ source: state.source || "", range: String(state.range), heat: heat.mode });
  history.replaceState(null, "", "#" + h.toString());
}

function columns() {
  // About one column per heatmap pixel, at most 600: step_ms is then 1 s
  // up to 5 minutes and 2 s at 15.
  const w = $("heatmap-wrap").clientWidth || 1200;
  return Math.max(10, Math.min(600, Math.floor(w - 96)));
}

function setStatus(text, cls) {
  const s = $("status");
  s.textContent = text;
  s.className = "status " + (cls || "");
}

// A fetch not answered in time is given up and retried: a connection left
// hanging (a laptop's sleep, a VPN change) stopped the poll loop with the
// status still green. A whole view (no `since`) may be tens of MB.
const answerWithinMs = 20000, wholeViewWithinMs = 60000;

async function getJSON(url, withinMs = answerWithinMs) {
  const resp = await fetch(url, { cache: "no-store", signal: AbortSignal.timeout(withinMs) });
  let body = null;
  try { body = await resp.json(); } catch { body = null; }
  if (!resp.ok) throw new Error((body && body.error) || `${resp.status} ${resp.statusText}`);
  return body;
}

function sourceText(x) {
  return `${x.id} · ${x.gpus} GPU${x.gpus === 1 ? "" : "s"}${x.simulated ? " · simulated" : ""}`;
}

async function loadSources() {
  try {
    const s = await getJSON("api/v1/sources");
    state.sourcesAt = Date.now();
    state.template = s.trace_url_template || "";
    const sel = $("source");
    sel.innerHTML = (s.sources || []).map((x) => `<option value="${esc(x.id)}">${esc(sourceText(x))}</option>`).join("");
    if (!s.sources || !s.sources.length) { setStatus("no source yet: no gpuviz processor has registered", "warn"); return false; }
    if (!state.source || !s.sources.some((x) => x.id === state.source)) state.source = s.sources[0].id;
    sel.value = state.source;
    return true;
  } catch (e) {
    setStatus("sources: " + e.message, "err");
    return false;
  }
}

function restart() {
  state.gen++;
  clearTimeout(state.timer);
  store.reset();
  selected = null;
  details($("details"), null, "");
  lanes.selected = null;
  for (const b of document.querySelectorAll("#range button")) b.classList.toggle("on", Number(b.dataset.range) === state.range);
  for (const b of document.querySelectorAll("#heat-mode button")) b.classList.toggle("on", b.dataset.mode === heat.mode);
  writeHash();
  poll();
}

async function poll() {
  const gen = state.gen;
  if (!state.source && !(await loadSources())) {
    // A restart while the sources were asked for has its own poll going.
    if (gen === state.gen) state.timer = setTimeout(poll, 2000);
    return;
  }
  if (gen !== state.gen) return;
  const q = new URLSearchParams({ source: state.source, range: String(state.range), columns: String(columns()) });
  const inc = store.params();
  for (const [k, v] of Object.entries(inc)) q.set(k, String(v));
  const t0 = performance.now();
  try {
    const r = await getJSON("api/v1/view?" + q.toString(), "since" in inc ? answerWithinMs : wholeViewWithinMs);
    if (gen !== state.gen) return;
    apply(r, performance.now() - t0);
    state.failures = 0;
  } catch (e) {
    if (gen !== state.gen) return;
    state.failures++;
    setStatus(`no answer (${e.message}); retrying`, "err");
  }
  // Sources register at their processor's Start, before their GPUs are
  // known: list them again every 15 s (new sources, GPU counts). Where the
  // source shown has gone and another was picked, that one's history is
  // fetched from the start: the store's increments were the old one's.
  if (gen === state.gen && Date.now() - (state.sourcesAt || 0) > 15000) {
    const shown = state.source;
    await loadSources();
    if (gen === state.gen && state.source !== shown) { restart(); return; }
  }
  if (gen === state.gen) state.timer = setTimeout(poll, Math.min(1000 * 2 ** Math.min(state.failures, 3), 8000));
}

function apply(r, ms) {
  const t0 = performance.now();
  if (r.trace_url_template !== undefined) state.template = r.trace_url_template;
  const changed = store.merge(r);
  document.body.classList.toggle("simulated", !!r.simulated);
  $("sim-banner").hidden = !r.simulated;
  if (changed === "gpus") { charts.build(); lanes.build(); heat.drawLegend(); }
  else charts.update();
  heat.draw();
  lanes.update();
  renderSummary($("summary"), store);
  const opt = [...$("source").options].find((o) => o.value === r.source);
  if (opt) opt.textContent = sourceText({ id: r.source, gpus: store.gpus.length, simulated: r.simulated });
  $("fleet-sub").textContent = `${store.gpus.length} GPUs × ${store.time.length} columns of ${store.step / 1000} s`;
  const draw = performance.now() - t0;
  setStatus(`live · ${fmtClock(r.now)} · ${Math.round(ms)} ms`, "ok");
  $("status").dataset.drawMs = draw.toFixed(1);
  $("status").title = `answer ${Math.round(ms)} ms, drawing ${draw.toFixed(1)} ms`;
  if (selected && !store.requests.has(selected.seq)) { selected = null; details($("details"), null, ""); }
}

function init() {
  readHash();
  $("range").addEventListener("click", (e) => {
    const b = e.target.closest("button");
    if (!b) return;
    state.range = Number(b.dataset.range);
    restart();
  });
  $("heat-mode").addEventListener("click", (e) => {
    const b = e.target.closest("button");
    if (!b) return;
    heat.setMode(b.dataset.mode);
    for (const x of document.querySelectorAll("#heat-mode button")) x.classList.toggle("on", x === b);
    writeHash();
  });
  $("source").addEventListener("change", (e) => { state.source = e.target.value; restart(); });
  $("details").addEventListener("click", (e) => { if (e.target.closest(".close")) lanes.select(null); });
  document.addEventListener("keydown", (e) => { if (e.key === "Escape") lanes.select(null); });
  let rt = 0;
  window.addEventListener("resize", () => {
    clearTimeout(rt);
    rt = setTimeout(() => { charts.resize(); heat.draw(); lanes.update(); }, 100);
  });
  window.addEventListener("hashchange", () => {
    readHash();
    $("source").value = state.source;
    heat.drawLegend();
    restart();
  });
  loadSources().then(() => restart());
}

init();
