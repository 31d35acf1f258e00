// Request lanes: one per GPU, every recent request a bar from its start to
// its end split into queue / prefill / decode, coloured by bottleneck.
// Overlapping requests are packed greedily into sub-lanes (first sub-lane
// where the bar fits); what does not fit in the lane's MAX sub-lanes is
// drawn as a density strip under them (concurrent requests per pixel), so
// dozens of concurrent requests never overlap into an unreadable smear.
//
// Bars sit on a track positioned from a fixed origin; each update only
// moves the track, adds the new requests and removes those out of range.
import { LABELS, labelColor, labelText } from "./colors.js";
import { fmtJ, fmtMs, fmtClock, esc, pct } from "./format.js";
import { GUTTER, showTip } from "./heatmap.js";

const SUB_H = 6; // px per sub-lane (5 bar + 1 gap)
const DENSITY_H = 9;

export class Lanes {
  constructor(root, sub, legend, tip, store, onSelect) {
    legend.innerHTML = `<span><i class="q"></i>queue</span><span><i style="background:#4e9bd6;box-shadow:inset 0 -1px 0 rgba(255,255,255,.55)"></i>prefill</span>` +
      `<span><i class="d" style="background:#4e9bd6"></i>decode</span><span>(colour: the phase's bottleneck)</span>` +
      LABELS.filter((l) => l !== "idle" && l !== "unknown").map((l) => `<span><i style="background:${labelColor(l)}"></i>${esc(labelText(l))}</span>`).join("") +
      `<span><i style="background:rgba(170,185,210,.8)"></i>density: requests beyond the sub-lanes</span><span>hover: tokens, energy · click: details</span>`;
    this.root = root; this.sub = sub; this.tip = tip; this.store = store; this.onSelect = onSelect;
    this.lanes = new Map(); // gpu id -> lane (GPUs of one engine share one)
    this.list = [];
    this.key = "";
    this.selected = null;
    root.addEventListener("mousemove", (e) => this.hover(e));
    root.addEventListener("mouseleave", () => { this.tip.hidden = true; });
    root.addEventListener("click", (e) => {
      const bar = e.target.closest(".request-bar");
      if (!bar) return;
      const q = this.store.requests.get(Number(bar.dataset.seq));
      if (q) this.select(q);
    });
  }

  // groups puts GPUs that serve exactly the same requests (one engine over
  // them, tensor-parallel or owning the node) in one lane; every other GPU
  // has its own. Identical lanes would repeat the same bars.
  groups() {
    const s = this.store, keyOf = new Map(), mixed = new Set();
    for (const q of s.requests.values()) {
      const k = (q.gpus || []).join(" ");
      for (const id of q.gpus || []) {
        if (!keyOf.has(id)) keyOf.set(id, k);
        else if (keyOf.get(id) !== k) mixed.add(id);
      }
    }
    const out = [], done = new Set();
    for (const g of s.gpus) {
      if (done.has(g.id)) continue;
      const k = keyOf.get(g.id);
      const ids = k && !mixed.has(g.id) ? k.split(" ") : [g.id];
      const members = s.gpus.filter((x) => ids.includes(x.id) && !done.has(x.id) && keyOf.get(x.id) === k && !mixed.has(x.id));
      const grp = members.length > 1 && members.length === ids.length ? members : [g];
      for (const x of grp) done.add(x.id);
      out.push(grp);
    }
    return out;
  }

  // subs is how many sub-lanes a lane of n GPUs gets: about 400 px of bars
  // shared out by GPUs.
  subs(n) {
    const total = Math.max(1, this.store.gpus.length);
    return Math.max(4, Math.min(64, Math.floor((400 * n) / total / SUB_H)));
  }

  build(groups) {
    this.root.textContent = "";
    this.lanes.clear();
    this.list = [];
    this.key = "";
    groups = groups || this.store.gpus.map((g) => [g]);
    this.groupKey = groups.map((gr) => gr.map((g) => g.id).join(" ")).join("|");
    for (const gr of groups) {
      const max = this.subs(gr.length);
      const el = document.createElement("div");
      el.className = "lane";
      el.dataset.gpu = gr[0].id;
      el.dataset.gpus = gr.map((g) => g.id).join(" ");
      const name = gr.length === 1 ? `GPU ${gr[0].index}` : gpuRange(gr);
      el.innerHTML = `<div class="lane-label"><b>${esc(name)}</b>${gr.length > 1 ? `<span>one engine, ${gr.length} GPUs</span>` : ""}<span class="more"></span></div>` +
        `<div class="lane-body"><div class="track"></div><canvas class="density"></canvas></div>`;
      this.root.appendChild(el);
      const body = el.querySelector(".lane-body");
      const L = { gr, el, body, track: body.firstChild, density: body.lastChild, more: el.querySelector(".more"),
        subs: Array.from({ length: max }, () => []), overflow: new Map(), placed: new Map(), shown: 0 };
      this.height(L, 4);
      for (const g of gr) this.lanes.set(g.id, L);
      this.list.push(L);
    }
    this.cursorEl = document.createElement("div");
    this.cursorEl.className = "lane-cursor";
    this.cursorEl.hidden = true;
    this.root.appendChild(this.cursorEl);
  }

  // update lays out the store's requests; a new range or width lays out
  // everything again.
  update() {
    const s = this.store, r = s.resp;
    if (!r) return;
    const groups = this.groups();
    if (groups.map((gr) => gr.map((g) => g.id).join(" ")).join("|") !== this.groupKey) this.build(groups);
    if (!this.list.length) return;
    const width = this.list[0].body.clientWidth || 1;
    const key = `${r.to - r.from}|${width}`;
    if (key !== this.key || (r.from - this.origin) / this.msPerPx > 200000) {
      this.key = key;
      this.origin = r.from;
      this.msPerPx = (r.to - r.from) / width;
      for (const L of this.list) {
        L.track.textContent = "";
        L.subs = L.subs.map(() => []);
        L.overflow.clear(); L.placed.clear(); L.shown = 0;
      }
    }
    // Remove what the store dropped.
    for (const L of this.list) {
      for (const [seq, p] of L.placed) {
        if (s.requests.has(seq)) continue;
        p.el.remove();
        const a = L.subs[p.sub], i = a.indexOf(p);
        if (i >= 0) a.splice(i, 1);
        L.placed.delete(seq);
      }
      for (const seq of L.overflow.keys()) if (!s.requests.has(seq)) L.overflow.delete(seq);
    }
    // Add the new ones, earliest start first (greedy interval packing).
    const fresh = [];
    for (const q of s.requests.values()) {
      for (const id of q.gpus || []) {
        const L = this.lanes.get(id);
        if (L && !L.placed.has(q.seq) && !L.overflow.has(q.seq)) { fresh.push(q); break; }
      }
    }
    fresh.sort((a, b) => a.start - b.start || a.seq - b.seq);
    const gap = this.msPerPx * 2;
    for (const q of fresh) {
      for (const id of q.gpus || []) {
        const L = this.lanes.get(id);
        if (!L || L.placed.has(q.seq) || L.overflow.has(q.seq)) continue;
        const it = { q, s: q.start - gap, e: Math.max(q.end, q.start + this.msPerPx) + gap, el: null, sub: -1 };
        let done = false;
        for (let k = 0; k < L.subs.length && !done; k++) {
          const a = L.subs[k], i = insertAt(a, it.s);
          if ((i > 0 && a[i - 1].e > it.s) || (i < a.length && a[i].s < it.e)) continue;
          a.splice(i, 0, it);
          it.sub = k;
          it.el = this.bar(q, k);
          L.track.appendChild(it.el);
          L.placed.set(q.seq, it);
          done = true;
        }
        if (!done) L.overflow.set(q.seq, q);
      }
    }
    const shift = (r.from - this.origin) / this.msPerPx;
    let maxConc = 0, bars = 0;
    for (const L of this.list) {
      L.track.style.transform = `translateX(${-shift}px)`;
      const used = L.subs.filter((a) => a.length).length;
      // The lane grows to the sub-lanes in use (never shrinks while the
      // range stays, so it does not jump once a second).
      if (used > L.shown) this.height(L, used);
      L.el.dataset.sublanes = String(used);
      L.el.dataset.overflow = String(L.overflow.size);
      L.more.textContent = L.overflow.size ? `+${L.overflow.size} in density` : "";
      maxConc = Math.max(maxConc, this.density(L));
      bars += L.placed.size;
    }
    this.sub.textContent = `${s.requests.size} requests in range · bars split queue / prefill / decode, coloured by bottleneck · ` +
      `GPUs of one engine share a lane · beyond a lane's sub-lanes the rest is a density strip` + (maxConc ? ` (up to ${maxConc} more at once)` : "");
    this.root.dataset.bars = String(bars);
  }

  height(L, n) {
    L.shown = Math.max(4, Math.min(L.subs.length, n));
    L.body.style.height = L.shown * SUB_H + DENSITY_H + "px";
  }

  bar(q, sub) {
    const el = document.createElement("div");
    el.className = "request-bar";
    if (this.selected === q.seq) el.classList.add("selected");
    el.dataset.traceId = q.trace_id;
    el.dataset.seq = String(q.seq);
    el.dataset.bottleneck = q.bottleneck || "unknown";
    const dur = Math.max(1, q.end - q.start);
    el.style.left = ((q.start - this.origin) / this.msPerPx).toFixed(1) + "px";
    el.style.width = Math.max(1, dur / this.msPerPx).toFixed(1) + "px";
    el.style.top = sub * SUB_H + "px";
    const phases = q.phases && q.phases.length ? q.phases : [{ name: "inference", start: q.start, end: q.end, bottleneck: q.bottleneck }];
    for (const p of phases) {
      const c = document.createElement("div");
      c.className = "phase";
      c.dataset.phase = p.name;
      c.style.left = (((p.start - q.start) / dur) * 100).toFixed(2) + "%";
      c.style.width = (((p.end - p.start) / dur) * 100).toFixed(2) + "%";
      if (p.name !== "queue") c.style.background = labelColor(p.bottleneck || q.bottleneck);
      el.appendChild(c);
    }
    return el;
  }

  // density draws the overflow: how many requests beyond the sub-lanes run
  // at each pixel; it returns the most at once.
  density(L) {
    const r = this.store.resp, cv = L.density;
    const W = L.body.clientWidth, dpr = window.devicePixelRatio || 1;
    if (cv.width !== Math.round(W * dpr)) { cv.width = Math.round(W * dpr); cv.height = Math.round(DENSITY_H * dpr); cv.style.width = W + "px"; }
    const ctx = cv.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, W, DENSITY_H);
    if (!L.overflow.size) return 0;
    const cnt = new Int32Array(W + 1);
    for (const q of L.overflow.values()) {
      const a = Math.max(0, Math.floor((q.start - r.from) / this.msPerPx)), b = Math.min(W, Math.ceil((q.end - r.from) / this.msPerPx));
      if (b < 0 || a > W) continue;
      cnt[a]++; cnt[Math.max(a + 1, b)]--;
    }
    let c = 0, max = 0;
    const col = new Int32Array(W);
    for (let x = 0; x < W; x++) { c += cnt[x]; col[x] = c; if (c > max) max = c; }
    for (let x = 0; x < W; x++) {
      if (!col[x]) continue;
      ctx.fillStyle = `rgba(170,185,210,${0.25 + 0.75 * (col[x] / max)})`;
      ctx.fillRect(x, 1, 1, DENSITY_H - 2);
    }
    return max;
  }

  setCursor(t) {
    const r = this.store.resp;
    if (!this.cursorEl) return;
    if (t === null || !r || !this.list.length) { this.cursorEl.hidden = true; return; }
    const L = this.list[0];
    const x = GUTTER + ((t - r.from) / (r.to - r.from)) * L.body.clientWidth;
    this.cursorEl.hidden = false;
    this.cursorEl.style.left = x + "px";
  }

  hover(e) {
    const bar = e.target.closest && e.target.closest(".request-bar");
    if (!bar) { this.tip.hidden = true; return; }
    const q = this.store.requests.get(Number(bar.dataset.seq));
    if (!q) return;
    const ph = e.target.closest(".phase");
    const tok = (q.input_tokens ?? "–") + " in / " + (q.output_tokens ?? "–") + " out";
    this.tip.innerHTML = `<b>${esc(q.model || q.family || "request")}</b> · ${fmtMs(q.end - q.start)}<br>` +
      `tokens ${esc(tok)}<br>energy ${fmtJ(q.energy_j)} · ${fmtJ(q.energy_per_token_j)}/token<br>` +
      `bottleneck <i class="sw" style="background:${labelColor(q.bottleneck)}"></i>${labelShare(q)}<br>` +
      (q.phases || []).map((p) => `<span class="${ph && ph.dataset.phase === p.name ? "hl" : ""}">${esc(p.name)} ${fmtMs(p.end - p.start)} · ${labelShare(p)}${p.energy_j ? " · " + fmtJ(p.energy_j) : ""}</span>`).join("<br>") +
      `<br><span class="dim">click for details · trace ${esc(q.trace_id.slice(0, 8))}…</span>`;
    showTip(this.tip, e);
  }

  select(q) {
    this.selected = q ? q.seq : null;
    for (const el of this.root.querySelectorAll(".request-bar.selected")) el.classList.remove("selected");
    if (q) for (const el of this.root.querySelectorAll(`.request-bar[data-seq="${q.seq}"]`)) el.classList.add("selected");
    this.onSelect(q);
  }
}

// labelShare names a request's or a phase's bottleneck and how much of its
// GPU time the label held ("memory bound 80%").
function labelShare(x) {
  return esc(labelText(x.bottleneck)) + (x.bottleneck_share ? ` <b class="share">${pct(x.bottleneck_share)}</b>` : "");
}

function gpuRange(gr) {
  const ix = gr.map((g) => g.index).sort((a, b) => a - b);
  const contiguous = ix.every((v, i) => i === 0 || v === ix[i - 1] + 1);
  return contiguous ? `GPU ${ix[0]}–${ix[ix.length - 1]}` : `GPU ${ix.join(",")}`;
}

function insertAt(a, s) {
  let lo = 0, hi = a.length;
  while (lo < hi) { const m = (lo + hi) >> 1; if (a[m].s < s) lo = m + 1; else hi = m; }
  return lo;
}

export function details(panel, q, template, gpus) {
  if (!q) { panel.hidden = true; panel.textContent = ""; return; }
  const id = esc(q.trace_id);
  const url = template && template.split("{trace_id}").join(encodeURIComponent(q.trace_id)).split("{span_id}").join(encodeURIComponent(q.span_id || ""));
  const link = url ? `<a href="${esc(url)}" target="_blank" rel="noopener">${id}</a>` : `<code>${id}</code>`;
  const row = (k, v) => `<tr><th>${k}</th><td>${v}</td></tr>`;
  panel.innerHTML = `<header><b>Request</b><button class="close" title="close">×</button></header>` +
    `<div class="trace" data-trace-id="${id}"><span class="dim">trace</span> ${link}</div>` +
    (template ? "" : `<div class="dim small">no trace UI configured (trace_url_template)</div>`) +
    `<table>` +
    row("model", esc(q.model || "–")) + row("family", esc(q.family || "–")) +
    row("span", `<code>${esc(q.span_id || "–")}</code>`) +
    row("GPUs", (q.gpus || []).map((id) => { const g = (gpus || []).find((x) => x.id === id); return `<span title="${esc(id)}">${g ? "GPU " + (g.index ?? "?") : esc(id)}</span>`; }).join(", ")) +
    row("time", `${fmtClock(q.start)} → ${fmtClock(q.end)} (${fmtMs(q.end - q.start)})`) +
    row("tokens", `${q.input_tokens ?? "–"} in · ${q.output_tokens ?? "–"} out`) +
    row("energy", `${fmtJ(q.energy_j)} · ${fmtJ(q.energy_per_token_j)}/token`) +
    row("bottleneck", `<i class="sw" style="background:${labelColor(q.bottleneck)}"></i>${labelShare(q)}`) +
    (q.simulated ? row("data", `<b class="simtag">simulated</b>`) : "") +
    `</table><table class="phases"><tr><th>phase</th><th>time</th><th>bottleneck</th><th>energy</th></tr>` +
    (q.phases || []).map((p) => `<tr data-phase="${esc(p.name)}"><td>${esc(p.name)}</td><td>${fmtMs(p.end - p.start)}</td><td><i class="sw" style="background:${labelColor(p.bottleneck)}"></i>${labelShare(p)}</td><td>${fmtJ(p.energy_j)}</td></tr>`).join("") +
    `</table>`;
  panel.hidden = false;
}
