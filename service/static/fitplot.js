// The live PSNR-by-step plot of the fit panel: an inline SVG drawn here (no chart library).
// x: step 0 … steps; y: PSNR in dB over the range seen so far. The progress events' PSNR is the
// training loss's (on the pixels the fit trains on), so the plot says "train PSNR". The points are mirrored on the
// SVG as data-points (how many) for the tests, and summarised in its aria-label.
const NS = "http://www.w3.org/2000/svg";
// PSNR as the service writes it (docs/training.md): a finite number of dB up to PSNR_CAP_DB, the cap an exact fit
// (a tiny image) reads, or null when a step had none.
export const PSNR_CAP_DB = 100;
export const psnrText = (v) => (typeof v !== "number" || !Number.isFinite(v) ? "–"
  : v >= PSNR_CAP_DB ? `≥ ${PSNR_CAP_DB} dB (exact)` : `${v.toFixed(2)} dB`);
const W = 300, H = 110;                       // viewBox units
const L = 30, R = 8, T = 10, B = 20;           // margins: axis labels left and below

function el(name, attrs = {}, text = null) {
  const e = document.createElementNS(NS, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (text !== null) e.textContent = text;
  return e;
}

export class PsnrPlot {
  constructor(svg) {
    this.svg = svg;
    svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
    this.clear();
  }

  clear(steps = null) {
    this.points = [];     // [step, psnr]
    this.steps = steps;
    this.draw();
  }

  add(step, psnr, steps) {
    if (typeof step !== "number" || typeof psnr !== "number" || !Number.isFinite(psnr)) return;
    if (steps) this.steps = steps;
    // Steps only go up: a resumed stream may repeat an event, a retried fit starts again.
    while (this.points.length && this.points[this.points.length - 1][0] >= step) this.points.pop();
    this.points.push([step, psnr]);
    this.draw();
  }

  draw() {
    const pts = this.points;
    const steps = this.steps || Math.max(1, ...pts.map((p) => p[0]));
    const ys = pts.map((p) => p[1]);
    let lo = ys.length ? Math.floor(Math.min(...ys)) : 0, hi = ys.length ? Math.ceil(Math.max(...ys)) : 30;
    if (hi - lo < 2) { lo -= 1; hi += 1; }
    const x = (s) => L + (W - L - R) * (s / steps);
    const y = (v) => T + (H - T - B) * (1 - (v - lo) / (hi - lo));
    const kids = [
      el("line", { x1: L, y1: T, x2: L, y2: H - B, class: "axis" }),
      el("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, class: "axis" }),
      el("text", { x: L - 4, y: T + 4, "text-anchor": "end", class: "tick" }, `${hi}`),
      el("text", { x: L - 4, y: H - B, "text-anchor": "end", class: "tick" }, `${lo}`),
      el("text", { x: L + 4, y: T + 4, class: "tick" }, "train PSNR, dB"),
      el("text", { x: L, y: H - 4, class: "tick" }, "0"),
      el("text", { x: (L + W - R) / 2, y: H - 4, "text-anchor": "middle", class: "tick" }, "step"),
      el("text", { x: W - R, y: H - 4, "text-anchor": "end", class: "tick" }, `${steps}`),
    ];
    if (pts.length) {
      const coords = pts.map(([s, v]) => `${x(s).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
      kids.push(el("polyline", { points: coords, class: "line" }));
      for (const [s, v] of pts) kids.push(el("circle", { cx: x(s).toFixed(1), cy: y(v).toFixed(1), r: 1.8, class: "dot" }));
    }
    this.svg.replaceChildren(...kids);
    this.svg.dataset.points = String(pts.length);
    const last = pts[pts.length - 1];
    this.svg.setAttribute("aria-label", last
      ? `train PSNR by step: ${last[1].toFixed(2)} dB at step ${last[0]} of ${steps}`
      : "train PSNR by step: no points yet");
  }
}
