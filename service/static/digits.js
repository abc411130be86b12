// The digit pad: draw with mouse, pen or touch; each finished stroke is uploaded as a PNG
// to the classify endpoint (the service crops, scales and centres it MNIST-style) and the
// ten probabilities are drawn as a bar chart. A newer stroke aborts the request in flight. What the
// model declines as no digit (label null, with a reason) shows as "not a digit", no bar highlighted.
import { classifyPng } from "./api.js";

const LINE_WIDTH = 0.075;  // of the pad's side; about an MNIST stroke after scaling to 20 px

export class DigitPad {
  constructor(canvas, chart, seen, { onResult = () => {}, onError = () => {} } = {}) {
    this.canvas = canvas;
    this.chart = chart;
    this.seen = seen;         // a 28×28 canvas: what the model saw after preprocessing
    this.ctx = canvas.getContext("2d");
    this.onResult = onResult;
    this.onError = onError;
    this.model = null;
    this.controller = null;
    this.last = null;
    this.inked = false;
    this.bars = buildChart(chart);
    this.bindInput();
    this.clear();
  }

  setModel(model) {
    this.model = model;
    if (this.inked) this.classify();
  }

  clear() {
    this.controller?.abort();
    const { ctx, canvas } = this;
    ctx.fillStyle = "#000";
    ctx.fillRect(0, 0, canvas.width, canvas.height);
    this.inked = false;
    this.canvas.dataset.state = "empty";
    this.show(null);
  }

  bindInput() {
    const c = this.canvas;
    const at = (e) => [e.offsetX * (c.width / c.clientWidth), e.offsetY * (c.height / c.clientHeight)];
    c.addEventListener("pointerdown", (e) => {
      e.preventDefault();
      c.setPointerCapture(e.pointerId);
      this.last = at(e);
      this.stroke(this.last, this.last);
    });
    c.addEventListener("pointermove", (e) => {
      if (!this.last) return;
      const p = at(e);
      this.stroke(this.last, p);
      this.last = p;
    });
    const end = () => {
      if (!this.last) return;
      this.last = null;
      this.classify();
    };
    c.addEventListener("pointerup", end);
    c.addEventListener("pointercancel", end);
  }

  stroke(a, b) {
    const { ctx, canvas } = this;
    ctx.strokeStyle = "#fff";
    ctx.lineWidth = LINE_WIDTH * canvas.width;
    ctx.lineCap = "round";
    ctx.lineJoin = "round";
    ctx.beginPath();
    ctx.moveTo(...a);
    ctx.lineTo(...b);
    ctx.stroke();
    this.inked = true;
  }

  async classify() {
    if (!this.model || !this.inked) return;
    this.controller?.abort();
    const controller = new AbortController();
    this.controller = controller;
    this.canvas.dataset.state = "classifying";
    try {
      const blob = await new Promise((resolve) => this.canvas.toBlob(resolve, "image/png"));
      const prediction = await classifyPng(this.model.name, blob, controller.signal);
      this.show(prediction);
      this.canvas.dataset.state = prediction.label === null ? "rejected" : "classified";
      this.onResult(prediction);
    } catch (err) {
      if (err.name === "AbortError") return;
      this.canvas.dataset.state = "error";
      this.onError(err);
    }
  }

  show(prediction) {
    showInput(this.seen, prediction?.input);
    const probs = prediction ? prediction.probabilities : new Array(10).fill(0);
    const label = prediction?.label ?? null;
    this.chart.dataset.label = !prediction ? "" : label === null ? "not a digit" : String(label);
    this.chart.classList.toggle("rejected", prediction !== null && label === null);
    this.bars.forEach(({ row, bar, value }, d) => {
      bar.style.width = `${(100 * probs[d]).toFixed(1)}%`;
      value.textContent = prediction ? `${(100 * probs[d]).toFixed(1)}%` : "";
      row.classList.toggle("top", label !== null && d === label);
    });
  }
}

function showInput(canvas, input) {
  const ctx = canvas.getContext("2d");
  const pixels = ctx.createImageData(28, 28);
  for (let i = 0; i < 28 * 28; i++) {
    const v = input ? Math.round(255 * input[Math.floor(i / 28)][i % 28]) : 0;
    pixels.data.set([v, v, v, 255], 4 * i);
  }
  ctx.putImageData(pixels, 0, 0);
}

function buildChart(chart) {
  chart.replaceChildren();
  return Array.from({ length: 10 }, (_, d) => {
    const row = document.createElement("div");
    row.className = "bar-row";
    const label = document.createElement("span");
    label.className = "bar-label";
    label.textContent = String(d);
    const track = document.createElement("span");
    track.className = "bar-track";
    const bar = document.createElement("span");
    bar.className = "bar";
    track.append(bar);
    const value = document.createElement("span");
    value.className = "bar-value";
    row.append(label, track, value);
    chart.append(row);
    return { row, bar, value };
  });
}
