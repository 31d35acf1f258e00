// Number and time formatting.
export function fmtJ(j) {
  if (j === null || j === undefined || !isFinite(j)) return "–";
  if (Math.abs(j) >= 1e6) return (j / 1e6).toFixed(2) + " MJ";
  if (Math.abs(j) >= 1e3) return (j / 1e3).toFixed(2) + " kJ";
  if (Math.abs(j) >= 10) return j.toFixed(0) + " J";
  if (Math.abs(j) >= 1) return j.toFixed(2) + " J";
  return (j * 1e3).toFixed(0) + " mJ";
}
export function fmtBytes(b) {
  if (b === null || b === undefined) return "–";
  const u = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  while (Math.abs(b) >= 1000 && i < u.length - 1) { b /= 1000; i++; }
  return (b >= 100 ? b.toFixed(0) : b >= 10 ? b.toFixed(1) : b.toFixed(2)) + " " + u[i];
}
export function fmtMs(ms) {
  if (ms < 1000) return ms.toFixed(0) + " ms";
  if (ms < 60000) return (ms / 1000).toFixed(ms < 10000 ? 2 : 1) + " s";
  return Math.floor(ms / 60000) + " min " + Math.round((ms % 60000) / 1000) + " s";
}
const pad = (n) => String(n).padStart(2, "0");
export function fmtClock(ms) {
  const d = new Date(ms);
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}
export function esc(s) {
  return String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}
export const pct = (x) => (x === null || x === undefined ? "–" : (x * 100).toFixed(x < 0.1 ? 1 : 0) + "%");
