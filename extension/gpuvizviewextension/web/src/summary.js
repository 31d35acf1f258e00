// The summary strip: GPU-time share by bottleneck over the range, energy
// per request and per token percentiles, and what is anomalous now.
import { LABELS, labelColor, labelText } from "./colors.js";
import { fmtJ, fmtClock, pct, esc } from "./format.js";

export function renderSummary(el, store) {
  const r = store.resp;
  if (!r) return;
  const sm = r.summary || {};
  const share = sm.bottleneck_share || {};
  const keys = [...LABELS.filter((l) => share[l] > 0), ...Object.keys(share).filter((l) => !LABELS.includes(l) && share[l] > 0)];
  const bar = keys.map((l) => `<span class="seg-${esc(l)}" style="width:${(share[l] * 100).toFixed(2)}%;background:${labelColor(l)}" title="${esc(labelText(l))} ${pct(share[l])}"></span>`).join("");
  const legend = keys.sort((a, b) => share[b] - share[a]).map((l) => `<span><i style="background:${labelColor(l)}"></i>${esc(labelText(l))} <b>${pct(share[l])}</b></span>`).join("");
  const p = (o, f) => (o ? `<b>${f(o.p50)}</b> <span class="dim">p50</span> · ${f(o.p90)} <span class="dim">p90</span> · ${f(o.p99)} <span class="dim">p99</span>` : "–");
  const an = sm.anomalies || [];
  const gpuName = (id) => { const g = store.gpus.find((x) => x.id === id); return g ? `GPU ${g.index ?? "?"}` : id; };
  el.innerHTML =
    `<div class="card share"><h3>GPU time by bottleneck <span class="dim">last ${Math.round((r.to - r.from) / 60000)} min</span></h3><div class="sharebar">${bar || '<span class="empty">no data</span>'}</div><div class="legend">${legend}</div></div>` +
    `<div class="card"><h3>Energy per request</h3><div class="big">${p(sm.energy_per_request_j, fmtJ)}</div><div class="dim">${sm.requests ?? 0} requests</div></div>` +
    `<div class="card"><h3>Energy per token</h3><div class="big">${p(sm.energy_per_token_j, fmtJ)}</div><div class="dim">output tokens</div></div>` +
    `<div class="card anomalies ${an.length ? "hot" : ""}" id="anomalies"><h3>Anomalies now</h3>${an.length ? an.map((a) =>
      `<div class="anomaly" data-kind="${esc(a.kind)}"><i style="background:${labelColor(a.kind)}"></i>${a.text ? esc(a.text) : `<b>${esc(gpuName(a.gpu))}</b> ${esc(labelText(a.kind))}`} <span class="dim">since ${fmtClock(a.since)}</span></div>`).join("") : '<div class="ok">none</div>'}</div>`;
}
