// The fleet heatmap: GPUs × time on a canvas, coloured by utilisation
// (mean per column) or by the bottleneck label holding the column longest.
import { LABELS, labelColor, labelText, ramp } from "./colors.js";
import { fmtClock, pct, esc } from "./format.js";
import { spacing, lastAt } from "./charts.js";

export const GUTTER = 96; // px left of every time axis (GPU names)

export class Heatmap {
  constructor(canvas, legend, tip, store) {
    this.canvas = canvas; this.legend = legend; this.tip = tip; this.store = store;
    this.mode = "utilization";
    this.cursor = null;
    canvas.addEventListener("mousemove", (e) => this.hover(e));
    canvas.addEventListener("mouseleave", () => { this.tip.hidden = true; });
  }

  setMode(m) { this.mode = m; this.drawLegend(); this.draw(); }

  rowH() { return Math.max(8, Math.min(18, Math.floor(150 / Math.max(1, this.store.gpus.length)))); }

  drawLegend() {
    if (this.mode === "utilization") {
      const stops = [0, 0.25, 0.5, 0.75, 1].map((v) => `${ramp(v)} ${v * 100}%`).join(",");
      this.legend.innerHTML = `<span>utilisation (mean per column)</span><span class="ramp" style="background:linear-gradient(90deg,${stops})"></span><span>0% … 100%</span><span><i style="background:#1a1e26;border:1px solid #333"></i>no data</span>`;
    } else {
      this.legend.innerHTML = `<span>bottleneck holding each column longest:</span>` +
        LABELS.map((l) => `<span><i style="background:${labelColor(l)}"></i>${esc(labelText(l))}</span>`).join("");
    }
  }

  draw() {
    const s = this.store, cv = this.canvas, r = s.resp;
    if (!r) return;
    const dpr = window.devicePixelRatio || 1;
    const W = cv.parentElement.clientWidth, rh = this.rowH(), H = rh * s.gpus.length + 18;
    if (cv.width !== Math.round(W * dpr) || cv.height !== Math.round(H * dpr)) {
      cv.width = Math.round(W * dpr); cv.height = Math.round(H * dpr);
      cv.style.width = W + "px"; cv.style.height = H + "px";
    }
    const ctx = cv.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, W, H);
    const pw = W - GUTTER, span = r.to - r.from;
    const xOf = (t) => GUTTER + ((t - r.from) / span) * pw;
    ctx.font = "11px system-ui, sans-serif";
    ctx.textBaseline = "middle";
    let drawn = 0;
    s.gpus.forEach((g, gi) => {
      const y = gi * rh;
      ctx.fillStyle = "#b9c0cc";
      ctx.fillText(`GPU ${g.index ?? "?"}`, 4, y + rh / 2);
      ctx.fillStyle = "#1a1e26";
      ctx.fillRect(GUTTER, y, pw, rh - 1);
      const u = s.series[g.id]?.utilization?.mean || [];
      const lab = s.labels[g.id] || [];
      // Utilisation read once per collection interval colours the columns
      // up to its next sample (as far as 2.5 spacings, then no data).
      const hold = Math.ceil(spacing(u) * 2.5);
      for (let i = 0; i < s.time.length; i++) {
        const v = this.mode === "utilization" ? lastAt(u, i, hold) : lab[i];
        if (v === null || v === undefined) continue;
        const x0 = Math.max(GUTTER, xOf(s.time[i])), x1 = Math.min(W, xOf(s.time[i] + s.step));
        if (x1 <= x0) continue;
        ctx.fillStyle = this.mode === "utilization" ? ramp(v) : labelColor(v);
        ctx.fillRect(x0, y, x1 - x0 + 0.5, rh - 1);
        drawn++;
      }
    });
    cv.dataset.cells = String(drawn);
    // time axis
    const y0 = rh * s.gpus.length;
    ctx.fillStyle = "#8d96a7";
    ctx.strokeStyle = "rgba(255,255,255,0.25)";
    const tickMs = niceTick(span / Math.max(1, pw / 90));
    ctx.textAlign = "center";
    for (let t = Math.ceil(r.from / tickMs) * tickMs; t <= r.to; t += tickMs) {
      const x = xOf(t);
      ctx.beginPath(); ctx.moveTo(x, y0); ctx.lineTo(x, y0 + 4); ctx.stroke();
      if (x - 26 >= GUTTER && x + 26 <= W) ctx.fillText(fmtClock(t), x, y0 + 11);
    }
    ctx.textAlign = "start";
    if (this.cursor !== null && this.cursor >= r.from) {
      const x = xOf(this.cursor);
      ctx.strokeStyle = "rgba(255,255,255,0.8)";
      ctx.beginPath(); ctx.moveTo(x + 0.5, 0); ctx.lineTo(x + 0.5, y0); ctx.stroke();
    }
  }

  setCursor(t) { this.cursor = t; this.draw(); }

  hover(e) {
    const s = this.store, r = s.resp;
    if (!r) return;
    const rect = this.canvas.getBoundingClientRect();
    const x = e.clientX - rect.left, y = e.clientY - rect.top, rh = this.rowH();
    const gi = Math.floor(y / rh), pw = rect.width - GUTTER;
    if (x < GUTTER || gi < 0 || gi >= s.gpus.length) { this.tip.hidden = true; return; }
    const t = r.from + ((x - GUTTER) / pw) * (r.to - r.from);
    let i = -1;
    for (let j = 0; j < s.time.length; j++) if (s.time[j] <= t && t < s.time[j] + s.step) { i = j; break; }
    if (i < 0) { this.tip.hidden = true; return; }
    const g = s.gpus[gi];
    const u = s.series[g.id]?.utilization;
    const hold = u ? Math.ceil(spacing(u.mean) * 2.5) : 1;
    let k = i;
    while (u && k > i - hold && k > 0 && (u.mean[k] === null || u.mean[k] === undefined)) k--;
    const uv = u && u.mean[k] !== null && u.mean[k] !== undefined ? `${pct(u.mean[k])} (min ${pct(u.min[k])}, max ${pct(u.max[k])}${k !== i ? `, read ${fmtClock(s.time[k])}` : ""})` : "no data";
    this.tip.innerHTML = `<b>GPU ${g.index ?? "?"}</b> · ${fmtClock(s.time[i])}<br>utilisation ${uv}<br>bottleneck: ${esc(labelText(s.labels[g.id]?.[i]))}`;
    showTip(this.tip, e);
  }
}

export function niceTick(ms) {
  for (const c of [1e3, 2e3, 5e3, 10e3, 15e3, 30e3, 60e3, 120e3, 300e3, 600e3, 900e3, 1800e3]) if (c >= ms) return c;
  return 3600e3;
}

export function showTip(tip, e) {
  tip.hidden = false;
  const w = tip.offsetWidth, h = tip.offsetHeight;
  let x = e.clientX + 14, y = e.clientY + 14;
  if (x + w > window.innerWidth - 4) x = e.clientX - w - 14;
  if (y + h > window.innerHeight - 4) y = e.clientY - h - 14;
  tip.style.left = Math.max(4, x) + "px";
  tip.style.top = Math.max(4, y) + "px";
}
