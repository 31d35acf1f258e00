// Colours shared by the heatmap, the request lanes and the summary.
export const LABELS = ["compute_bound", "memory_bound", "memory_capacity", "interconnect_bound",
  "power_throttled", "thermal_throttled", "host_bound", "idle", "unknown"];

export const LABEL_COLOR = {
  compute_bound: "#f28e2b",
  memory_bound: "#4e9bd6",
  memory_capacity: "#b07aa1",
  interconnect_bound: "#59c2b5",
  power_throttled: "#e8474a",
  thermal_throttled: "#b5651d",
  host_bound: "#e9c93b",
  idle: "#4a5160",
  unknown: "#8a8f99",
};

export const labelText = (l) => (l || "no data").replace(/_/g, " ");
export const labelColor = (l) => LABEL_COLOR[l] || LABEL_COLOR.unknown;

// Utilisation 0..1: a perceptual ramp (viridis stops).
const RAMP = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
export function ramp(x) {
  x = Math.max(0, Math.min(1, x)) * (RAMP.length - 1);
  const i = Math.min(RAMP.length - 2, Math.floor(x)), f = x - i;
  const a = RAMP[i], b = RAMP[i + 1];
  return `rgb(${Math.round(a[0] + (b[0] - a[0]) * f)},${Math.round(a[1] + (b[1] - a[1]) * f)},${Math.round(a[2] + (b[2] - a[2]) * f)})`;
}

export const SIGNAL_COLOR = {
  utilization: "#e6e6e6",
  sm_activity: "#4e9bd6",
  tensor_activity: "#f28e2b",
  dram_activity: "#b07aa1",
  memory_used_bytes: "#59c2b5",
  power_w: "#e9c93b",
  temperature_c: "#ff7f6e",
  sm_clock_mhz: "#9ecae9",
  pcie_rx_bytes_per_s: "#59c2b5",
  pcie_tx_bytes_per_s: "#2f7f74",
  nvlink_rx_bytes_per_s: "#c39bd3",
  nvlink_tx_bytes_per_s: "#8e5ea2",
};

export function alpha(hex, a) {
  const n = parseInt(hex.slice(1), 16);
  return `rgba(${n >> 16},${(n >> 8) & 255},${n & 255},${a})`;
}
