// The page's copy of the view: columns merged by start time as `since`
// increments arrive, requests merged by sequence number as `requests_after`
// increments arrive, and whatever falls out of the range dropped.
export class Store {
  constructor() { this.reset(); }

  reset() {
    this.resp = null;      // the latest response, less its arrays
    this.gpus = [];
    this.time = [];
    this.series = {};      // gpu id -> signal -> {min,max,mean}
    this.labels = {};      // gpu id -> [label|null]
    this.requests = new Map(); // seq -> request
    this.seq = undefined;  // newest request sequence number seen
    this.step = 0;
  }

  // The query for the next poll: the whole range first, then increments
  // from the oldest column that may still change (final_ms: labels are
  // frozen, and samples arrive, behind the newest column).
  params() {
    const p = {};
    if (this.time.length) {
      let since = this.time[this.time.length - 1];
      const fin = this.resp && this.resp.final_ms;
      if (typeof fin === "number" && fin < since) since = Math.max(fin, this.time[0]);
      p.since = since;
    }
    if (this.seq !== undefined) p.requests_after = this.seq;
    return p;
  }

  // merge takes one response; it returns what changed: "gpus" when the GPU
  // set is new (the layout must be rebuilt), else "data".
  merge(r) {
    let changed = "data";
    // The layout follows the GPUs and what their labels and limits show
    // (index and name arrive with the first nvidia.gpu.info).
    const sig = (gs) => gs.map((g) => [g.id, g.index, g.name, g.memory_total_bytes, g.power_limit_w].join(",")).join("|");
    if (!this.resp || sig(r.gpus) !== sig(this.gpus) || r.step_ms !== this.step) {
      if (this.resp && r.step_ms !== this.step) { this.time = []; this.series = {}; this.labels = {}; }
      changed = "gpus";
    }
    this.gpus = r.gpus;
    this.step = r.step_ms;
    const { time, series, labels, requests, ...rest } = r;
    this.resp = rest;

    // Columns: replace from the first returned start on, append the rest.
    let at = this.time.length;
    if (time.length) {
      at = lowerBound(this.time, time[0]);
    }
    this.time.splice(at, this.time.length - at, ...time);
    for (const g of r.gpus) {
      const mine = this.series[g.id] || (this.series[g.id] = {});
      const theirs = series[g.id] || {};
      for (const sig of Object.keys(theirs)) {
        if (!mine[sig]) {
          // A signal first seen now: null for the columns before.
          mine[sig] = { min: new Array(at).fill(null), max: new Array(at).fill(null), mean: new Array(at).fill(null) };
        }
      }
      for (const sig of Object.keys(mine)) {
        const t = theirs[sig];
        for (const k of ["min", "max", "mean"]) {
          const a = mine[sig][k];
          a.length = Math.min(a.length, at);
          while (a.length < at) a.push(null);
          if (t) a.push(...t[k]);
          else for (let i = 0; i < time.length; i++) a.push(null);
        }
      }
      const la = this.labels[g.id] || (this.labels[g.id] = []);
      la.length = Math.min(la.length, at);
      while (la.length < at) la.push(null);
      la.push(...((labels && labels[g.id]) || new Array(time.length).fill(null)));
    }
    // Drop columns that ended before the range.
    const drop = lowerBound(this.time, r.from - this.step + 1);
    if (drop > 0) {
      this.time.splice(0, drop);
      for (const id of Object.keys(this.series)) {
        for (const s of Object.values(this.series[id])) { s.min.splice(0, drop); s.max.splice(0, drop); s.mean.splice(0, drop); }
        this.labels[id].splice(0, drop);
      }
    }
    for (const id of Object.keys(this.series)) if (!r.gpus.some((g) => g.id === id)) { delete this.series[id]; delete this.labels[id]; }

    // Requests: add the new ones, drop those that ended before the range.
    // A sequence behind ours is a source registered anew (the collector
    // restarted): its numbers start again, so what we hold is another
    // source's and its requests up to ours were not sent. Start over: the
    // next poll asks for every request in the range.
    const rs = r.requests_seq;
    if (rs !== undefined && rs !== null && this.seq !== undefined && rs < this.seq) {
      this.requests.clear();
      this.seq = undefined;
      return changed;
    }
    for (const q of requests || []) this.requests.set(q.seq, q);
    if (rs !== undefined && rs !== null) this.seq = rs;
    for (const [seq, q] of this.requests) if (q.end < r.from) this.requests.delete(seq);
    return changed;
  }
}

export function lowerBound(a, x) {
  let lo = 0, hi = a.length;
  while (lo < hi) {
    const m = (lo + hi) >> 1;
    if (a[m] < x) lo = m + 1; else hi = m;
  }
  return lo;
}
