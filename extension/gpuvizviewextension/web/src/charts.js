// Per-GPU small multiples with uPlot: one row per GPU, one chart per
// signal group, every chart on the same time scale [from, to] with the
// cursor synced across all of them. Each signal is drawn as its min–max
// band per column with the mean as a line, so downsampling never hides a
// peak.
import uPlot from "uplot";
import { SIGNAL_COLOR, alpha } from "./colors.js";
import { fmtBytes, fmtClock, pct, esc } from "./format.js";

const GiB = 1024 ** 3;
export const CHARTS = [
  { key: "util", title: "Util · SM · tensor · DRAM", signals: ["utilization", "sm_activity", "tensor_activity", "dram_activity"],
    names: ["util", "SM", "tensor", "DRAM"], y: () => [0, 1], tick: (v) => Math.round(v * 100) + "%", read: pct },
  { key: "memory", title: "Memory used / total", signals: ["memory_used_bytes"], names: ["used"], scale: 1 / GiB,
    ref: (g) => g.memory_total_bytes / GiB, y: (g) => [0, (g.memory_total_bytes || 0) / GiB * 1.05 || null],
    tick: (v) => v.toFixed(0) + "G", read: (v) => (v === null ? "–" : v.toFixed(1) + " GiB") },
  { key: "power", title: "Power / limit", signals: ["power_w"], names: ["power"], ref: (g) => g.power_limit_w,
    y: (g) => [0, (g.power_limit_w || 0) * 1.08 || null], tick: (v) => v.toFixed(0) + "W", read: (v) => (v === null ? "–" : v.toFixed(0) + " W") },
  { key: "temperature", title: "Temperature", signals: ["temperature_c"], names: ["temp"],
    y: null, span: 10, tick: (v) => v.toFixed(0) + "°", read: (v) => (v === null ? "–" : v.toFixed(0) + " °C") },
  { key: "clock", title: "SM clock · throttled", signals: ["sm_clock_mhz"], names: ["SM clock"], shade: true,
    y: null, span: 300, tick: (v) => v.toFixed(0), read: (v) => (v === null ? "–" : v.toFixed(0) + " MHz") },
  { key: "io", title: "PCIe / NVLink", signals: ["pcie_rx_bytes_per_s", "pcie_tx_bytes_per_s", "nvlink_rx_bytes_per_s", "nvlink_tx_bytes_per_s"],
    names: ["PCIe rx", "PCIe tx", "NVL rx", "NVL tx"], y: null, tick: (v) => (v >= 1e9 ? +(v / 1e9).toFixed(1) + "G" : v >= 1e6 ? +(v / 1e6).toFixed(0) + "M" : +(v / 1e3).toFixed(0) + "k"), read: (v) => (v === null ? "–" : fmtBytes(v) + "/s") },
];

const AXIS = { stroke: "#8d96a7", font: "10px system-ui, sans-serif", grid: { stroke: "rgba(255,255,255,0.06)", width: 1 },
  ticks: { stroke: "rgba(255,255,255,0.12)", width: 1, size: 3 } };

// spacing is the usual distance, in columns, between a series' samples:
// signals read once per collection interval (utilisation, memory,
// temperature, clocks: 10 s by default) fill one column in ten, signals on
// the sampling clock every column. Lines bridge nulls up to 2.5 spacings;
// longer runs of nulls are gaps, drawn as gaps.
export function spacing(a) {
  const d = [];
  let last = -1;
  for (let i = 0; i < a.length; i++) {
    if (a[i] === null || a[i] === undefined) continue;
    if (last >= 0) d.push(i - last);
    last = i;
  }
  if (!d.length) return 1;
  d.sort((x, y) => x - y);
  return Math.max(1, d[d.length >> 1]);
}

// lastAt is the newest value at or before i, no older than hold columns.
export function lastAt(a, i, hold) {
  if (!a) return null;
  for (let j = i; j >= 0 && j > i - hold; j--) if (a[j] !== null && a[j] !== undefined) return a[j];
  return null;
}

export class GPUCharts {
  constructor(root, head, store, onCursor) {
    this.root = root; this.head = head; this.store = store; this.onCursor = onCursor;
    this.rows = []; // {gpu, el, charts: [{def, el, u, sig, readout}]}
    this.sync = uPlot.sync("gpuviz");
    this.headDrawn = false;
  }

  build() {
    for (const r of this.rows) for (const c of r.charts) if (c.u) c.u.destroy();
    this.rows = [];
    this.root.textContent = "";
    if (!this.headDrawn) {
      this.head.innerHTML = `<div></div>` + CHARTS.map((d) => `<div class="chart-title">${esc(d.title)}<span class="keys">${
        d.signals.map((s, i) => `<i style="background:${SIGNAL_COLOR[s]}"></i>${esc(d.names[i])}`).join(" ")}${
        d.ref ? ` <i class="dash"></i>${d.key === "memory" ? "total" : "limit"}` : ""}${
        d.shade ? ` <i style="background:rgba(232,71,74,.55)"></i>power <i style="background:rgba(181,101,29,.7)"></i>thermal` : ""}</span></div>`).join("");
      this.headDrawn = true;
    }
    const gpus = this.store.gpus;
    gpus.forEach((g, gi) => {
      const el = document.createElement("div");
      el.className = "gpu-row";
      el.dataset.gpu = g.id;
      el.innerHTML = `<div class="gpu-label"><b>GPU ${g.index ?? "?"}</b><span class="name" title="${esc(g.name || "")}">${esc(g.name || "")}</span><span class="uuid" title="${esc(g.id)}">…${esc((g.uuid || g.id).slice(-10))}</span></div>`;
      const charts = CHARTS.map((def) => {
        const c = document.createElement("div");
        c.className = "chart";
        c.dataset.chart = def.key;
        c.dataset.gpu = g.id;
        c.dataset.points = "0";
        c.innerHTML = `<div class="readout"></div><div class="plot"></div>`;
        el.appendChild(c);
        return { def, el: c, u: null, sig: "", readout: c.firstChild, last: gi === gpus.length - 1 };
      });
      this.root.appendChild(el);
      this.rows.push({ gpu: g, el, charts });
    });
    this.update();
  }

  // update gives every chart the store's current columns.
  update() {
    const s = this.store, x = s.time.map((t) => t / 1000);
    for (const row of this.rows) {
      const ser = s.series[row.gpu.id] || {};
      for (const c of row.charts) {
        const present = c.def.signals.filter((k) => ser[k]);
        const sig = present.join(",");
        const data = [x];
        let points = 0;
        const k = c.def.scale || 1;
        const sc = (a) => (k === 1 ? a : a.map((v) => (v === null ? null : v * k)));
        c.hold = [];
        for (const name of present) {
          const m = ser[name];
          data.push(sc(m.min), sc(m.max), sc(m.mean));
          for (const v of m.mean) if (v !== null) points++;
          c.hold.push(spacing(m.mean));
        }
        if (c.def.ref) {
          const rv = c.def.ref(row.gpu);
          data.push(x.map(() => (rv ? rv : null)));
        }
        c.throttle = c.def.shade ? [ser.power_throttled, ser.thermal_throttled] : null;
        if (!c.u || c.sig !== sig) {
          if (c.u) c.u.destroy();
          c.sig = sig;
          c.present = present;
          c.u = this.make(c, row.gpu, present, data);
        } else {
          c.u.setData(data);
        }
        c.el.dataset.points = String(points);
        c.el.dataset.signals = sig;
      }
    }
    this.readAll(null);
  }

  make(c, gpu, present, data) {
    const def = c.def, store = this.store;
    const series = [{}];
    const bands = [];
    // Gaps narrower than 2.5 sample spacings are bridged (see spacing).
    const gaps = (i) => (u, sidx, i0, i1, found) => {
      const span = u.scales.x.max - u.scales.x.min;
      const px = span > 0 ? ((2.5 * (c.hold[i] || 1) * store.step) / 1000 / span) * u.bbox.width : 0;
      return found.filter((g) => g[1] - g[0] > px);
    };
    present.forEach((name, i) => {
      const col = SIGNAL_COLOR[name];
      const base = 1 + i * 3;
      series.push({ stroke: "transparent", width: 0, points: { show: false }, gaps: gaps(i) });
      series.push({ stroke: "transparent", width: 0, points: { show: false }, gaps: gaps(i) });
      series.push({ stroke: col, width: name === "utilization" ? 1.6 : 1.2, points: { show: false }, gaps: gaps(i) });
      bands.push({ series: [base + 1, base], fill: alpha(col, present.length > 1 ? 0.16 : 0.28) });
    });
    if (def.ref) series.push({ stroke: "#c8ccd4", width: 1, dash: [4, 3], points: { show: false } });
    const w = Math.max(120, c.el.clientWidth || 200);
    const opts = {
      width: w, height: c.last ? 86 : 62,
      padding: [4, 4, 0, 0],
      legend: { show: false },
      cursor: { sync: { key: this.sync.key, setSeries: false }, drag: { x: false, y: false, setScale: false }, points: { show: false }, y: false },
      select: { show: false },
      scales: {
        x: { time: true, range: () => [store.resp.from / 1000, store.resp.to / 1000] },
        y: { range: def.y ? (u, lo, hi) => { const r = def.y(gpu); return [r[0] ?? lo, r[1] ?? hi]; } : (u, lo, hi) => {
          if (lo === null || hi === null) return [0, 1];
          // At least def.span wide, so a flat signal's noise is not blown up.
          const mid = (lo + hi) / 2, half = Math.max((hi - lo) * 0.55, (def.span || 0) / 2) || Math.abs(hi) * 0.05 || 1;
          return [Math.max(0, mid - half), mid + half]; } },
      },
      axes: [
        { ...AXIS, show: c.last, size: 22, space: 64, values: (u, vs) => vs.map((v) => fmtClock(v * 1000)) },
        { ...AXIS, size: 38, space: 22, values: (u, vs) => vs.map(def.tick) },
      ],
      series, bands,
      hooks: {
        drawClear: def.shade ? [(u) => this.shade(u, c)] : [],
        setCursor: [(u) => this.onSetCursor(u, c)],
      },
    };
    return new uPlot(opts, data, c.el.lastChild);
  }

  // shade paints the columns where the GPU was throttled: power red,
  // thermal brown, stronger the larger the share of the column.
  shade(u, c) {
    const [p, t] = c.throttle || [];
    if (!p && !t) return;
    const ctx = u.ctx, { top, height } = u.bbox, step = this.store.step / 1000;
    const xs = u.data[0];
    ctx.save();
    for (let i = 0; i < xs.length; i++) {
      const x0 = u.valToPos(xs[i], "x", true), x1 = u.valToPos(xs[i] + step, "x", true);
      const pv = p && p.max[i], tv = t && t.max[i];
      if (pv > 0) { ctx.fillStyle = `rgba(232,71,74,${0.18 + 0.5 * (p.mean[i] || 0)})`; ctx.fillRect(x0, top, Math.max(1, x1 - x0), height); }
      if (tv > 0) { ctx.fillStyle = `rgba(181,101,29,${0.25 + 0.5 * (t.mean[i] || 0)})`; ctx.fillRect(x0, top + height / 2, Math.max(1, x1 - x0), height / 2); }
    }
    ctx.restore();
  }

  onSetCursor(u, c) {
    const idx = u.cursor.idx;
    this.readOne(c, idx);
    if (c === this.rows[0]?.charts[0]) {
      const left = u.cursor.left;
      this.onCursor(left >= 0 && idx !== null && idx !== undefined ? u.data[0][idx] * 1000 : null);
    }
  }

  readOne(c, idx) {
    if (!c.u) return;
    const d = c.u.data, n = d[0].length;
    const i = idx === null || idx === undefined ? n - 1 : idx;
    const parts = c.present.map((name, j) => {
      const v = lastAt(d[3 + j * 3], i, c.hold ? c.hold[j] * 2.5 : 1);
      return `<span style="color:${SIGNAL_COLOR[name]}">${esc(c.def.read(v ?? null))}</span>`;
    });
    if (c.throttle && c.throttle[0] && c.throttle[0].mean[i] > 0) parts.push(`<span class="thr">power ${pct(c.throttle[0].mean[i])}</span>`);
    if (c.throttle && c.throttle[1] && c.throttle[1].mean[i] > 0) parts.push(`<span class="thr">thermal ${pct(c.throttle[1].mean[i])}</span>`);
    if (!c.present.length) parts.push(`<span class="none">not reported</span>`);
    c.readout.innerHTML = parts.join(" ");
  }

  readAll(idx) {
    for (const r of this.rows) for (const c of r.charts) this.readOne(c, idx);
  }

  resize() {
    for (const r of this.rows) for (const c of r.charts) if (c.u) c.u.setSize({ width: Math.max(120, c.el.clientWidth), height: c.last ? 86 : 62 });
  }
}
