// The continuous-resolution viewer: a canvas that shows an image model through /render.
//
// Every view change (wheel, pinch, drag, rotation, resize) first redraws the last image
// reprojected to the new camera (instant, blurry), then, once input settles, asks the
// service for a low-resolution preview of the new viewport and then for the sharp render
// at the canvas's device-pixel size, in strips of at most a million samples each. A newer
// change aborts the requests still in flight.
//
// State for tests and the readout is mirrored on the canvas: data-state (pending, loading,
// preview, sharp, error), data-renders (sharp renders shown so far), data-viewport, data-zoom.
// Each sharp render also leaves a performance mark "inr-sharp" (detail: renders, ms) at the moment its
// last strip is drawn to the canvas, which viewer_sharp (bench/tiles.py) times against navigation and input.
import * as camera from "./camera.js";
import { render } from "./api.js";

const PREVIEW_DIVISOR = 4;  // the preview has 1/4 of the width and height
const SETTLE_MS = 80;       // wait for a burst of wheel events to end before requesting
const WHEEL_RATE = 0.0015;  // zoom factor per wheel pixel: exp(−deltaY · rate)
const STRIP_SAMPLES = 1e6;  // model samples per sharp request; larger views go in strips

export class Viewer {
  constructor(canvas, { onChange = () => {}, onError = () => {} } = {}) {
    this.canvas = canvas;
    this.ctx = canvas.getContext("2d");
    this.onChange = onChange;
    this.onError = onError;
    this.model = null;
    this.camera = camera.initialCamera();
    this.frame = null;        // {bitmap, camera, W, H, sharp}: the last image received
    this.controller = null;   // AbortController of the requests in flight
    this.timer = null;
    this.pointers = new Map();
    this.renders = 0;
    this.lastMs = null;
    this.bindInput();
    new ResizeObserver(() => this.resize()).observe(canvas);
    this.resize();
  }

  get width() { return this.canvas.width; }
  get height() { return this.canvas.height; }

  // Device pixels per CSS pixel, as the canvas is actually laid out.
  get ratio() { return this.canvas.clientWidth ? this.canvas.width / this.canvas.clientWidth : 1; }

  // The model's native [W, H] pixels (GET /v1/models/NAME width/height), or null when it records none.
  get nativeSize() {
    const m = this.model;
    if (m && m.width > 0 && m.height > 0) return [m.width, m.height];
    const source = m?.metadata?.source;
    const size = source?.native_size || source?.size;
    return Array.isArray(size) && size.length === 2 ? size : null;
  }

  setModel(model) {
    this.model = model;
    if (!model) delete this.canvas.dataset.state;  // nothing shown: no render state either
    this.camera = camera.initialCamera(this.nativeSize);
    this.frame = null;
    this.renders = 0;
    this.update();
  }

  setCamera(next) {
    this.camera = next;
    this.update();
  }

  resize() {
    const dpr = window.devicePixelRatio || 1;
    const W = Math.max(1, Math.round(this.canvas.clientWidth * dpr));
    const H = Math.max(1, Math.round(this.canvas.clientHeight * dpr));
    if (W === this.canvas.width && H === this.canvas.height) return;
    this.canvas.width = W;
    this.canvas.height = H;
    this.update();
  }

  update() {
    this.canvas.dataset.zoom = String(this.camera.zoom);
    this.paint();
    this.schedule();
    this.onChange(this);
  }

  paint() {
    const { ctx, width: W, height: H } = this;
    ctx.setTransform(1, 0, 0, 1, 0, 0);
    ctx.clearRect(0, 0, W, H);
    const f = this.frame;
    if (!f) return;
    ctx.imageSmoothingEnabled = true;
    ctx.imageSmoothingQuality = "high";
    ctx.setTransform(...camera.reprojection(f.camera, f.W, f.H, this.camera, W, H));
    ctx.drawImage(f.bitmap, 0, 0, f.W, f.H);
    ctx.setTransform(1, 0, 0, 1, 0, 0);
  }

  schedule() {
    this.controller?.abort();
    this.controller = null;
    clearTimeout(this.timer);
    if (!this.model) return;
    this.canvas.dataset.state = "pending";
    this.timer = setTimeout(() => this.fetchStages(), SETTLE_MS);
  }

  setState(state) {
    this.canvas.dataset.state = state;
    this.onChange(this);
  }

  // Low-resolution preview, then the sharp render; both for one snapshot of the camera. They
  // are drawn into a sheet of the canvas's size: the preview scaled up, then each sharp strip
  // over it as it arrives.
  async fetchStages() {
    const controller = new AbortController();
    this.controller = controller;
    const name = this.model.name, cam = this.camera, W = this.width, H = this.height;
    const fields = camera.renderFields(cam, W, H);
    this.canvas.dataset.viewport = fields.viewport.map((v) => v.toFixed(6)).join(",");
    const sheet = document.createElement("canvas");
    sheet.width = W;
    sheet.height = H;
    const ctx = sheet.getContext("2d");
    try {
      this.setState("loading");
      const pw = Math.max(1, Math.ceil(W / PREVIEW_DIVISOR)), ph = Math.max(1, Math.ceil(H / PREVIEW_DIVISOR));
      const preview = await render(name, { width: pw, height: ph, ...fields }, controller.signal);
      ctx.imageSmoothingQuality = "high";
      ctx.drawImage(preview, 0, 0, W, H);
      this.frame = { bitmap: sheet, camera: cam, W, H, sharp: false };
      this.paint();
      this.setState("preview");
      const t0 = performance.now();
      await this.sharpen(name, cam, W, H, fields, controller.signal, (bitmap, r0) => {
        ctx.clearRect(0, r0, W, bitmap.height);
        ctx.drawImage(bitmap, 0, r0);
        this.paint();
      });
      this.frame.sharp = true;
      this.lastMs = performance.now() - t0;
      this.renders += 1;
      this.canvas.dataset.renders = String(this.renders);
      performance.mark("inr-sharp", { detail: { renders: this.renders, ms: this.lastMs } });
      this.setState("sharp");
    } catch (err) {
      if (err.name === "AbortError") return;  // superseded by a newer view
      this.setState("error");
      this.onError(err);
    } finally {
      if (this.controller === controller) this.controller = null;
    }
  }

  // The sharp render in strips requested together. Below the native resolution 2×2
  // supersampling anti-aliases; if the service refuses it (a 4xx naming its limit), the
  // strips still in flight are cancelled and the plain render is fetched instead. A key over its
  // requests-a-second quota (429) is waited for in api.js's `send`, the same request sent again.
  async sharpen(name, cam, W, H, fields, signal, draw) {
    for (let ss = this.detail(cam) < 1 ? 2 : 1; ; ss = 1) {
      const local = new AbortController();
      const cancel = () => local.abort();
      signal.addEventListener("abort", cancel);
      try {
        await Promise.all(camera.strips(W, H, ss, STRIP_SAMPLES).map(async ([r0, r1]) => {
          const viewport = camera.stripViewport(fields.viewport, H, r0, r1);
          draw(await render(name, { ...fields, width: W, height: r1 - r0, supersample: ss, viewport }, local.signal),
               r0);
        }));
        return;
      } catch (err) {
        local.abort();
        if (signal.aborted) throw new DOMException("superseded", "AbortError");
        if (ss === 1 || !(err.status >= 400 && err.status < 500) || err.status === 429) throw err;  // 429: a quota
      } finally {
        signal.removeEventListener("abort", cancel);
      }
    }
  }

  // Screen pixels per native image pixel (a square unit is max(W, H) of them): above 1 the model is
  // asked for detail beyond its data.
  detail(cam = this.camera) {
    const size = this.nativeSize;
    return size ? camera.pixelsPerUnit(cam, this.width, this.height) / Math.max(...size) : null;
  }

  zoomBy(factor, px = this.width / 2, py = this.height / 2) {
    this.setCamera(camera.zoomAt(this.camera, this.width, this.height, px, py, factor));
  }

  rotateTo(degrees) {
    this.setCamera(camera.rotateTo(this.camera, degrees));
  }

  reset() {
    this.setCamera(camera.initialCamera(this.nativeSize));
  }

  bindInput() {
    const c = this.canvas;
    const at = (e) => [e.offsetX * this.ratio, e.offsetY * this.ratio];
    c.addEventListener("wheel", (e) => {
      e.preventDefault();
      const scale = e.deltaMode === 1 ? 40 : e.deltaMode === 2 ? 800 : 1;
      this.zoomBy(Math.exp(-e.deltaY * scale * WHEEL_RATE), ...at(e));
    }, { passive: false });
    c.addEventListener("dblclick", (e) => this.zoomBy(e.shiftKey ? 0.5 : 2, ...at(e)));
    c.addEventListener("pointerdown", (e) => {
      c.setPointerCapture(e.pointerId);
      this.pointers.set(e.pointerId, at(e));
    });
    c.addEventListener("pointermove", (e) => this.pointerMove(e.pointerId, at(e)));
    const up = (e) => this.pointers.delete(e.pointerId);
    c.addEventListener("pointerup", up);
    c.addEventListener("pointercancel", up);
  }

  // One pointer pans; two pointers pinch-zoom about their midpoint and pan with it.
  pointerMove(id, p) {
    const prev = this.pointers.get(id);
    if (!prev) return;
    const others = [...this.pointers].filter(([k]) => k !== id).map(([, v]) => v);
    this.pointers.set(id, p);
    const W = this.width, H = this.height;
    if (others.length === 0) {
      this.setCamera(camera.pan(this.camera, W, H, p[0] - prev[0], p[1] - prev[1]));
      return;
    }
    const o = others[0];
    const d0 = Math.hypot(prev[0] - o[0], prev[1] - o[1]), d1 = Math.hypot(p[0] - o[0], p[1] - o[1]);
    const m0 = [(prev[0] + o[0]) / 2, (prev[1] + o[1]) / 2], m1 = [(p[0] + o[0]) / 2, (p[1] + o[1]) / 2];
    let next = camera.pan(this.camera, W, H, m1[0] - m0[0], m1[1] - m0[1]);
    if (d0 > 0 && d1 > 0) next = camera.zoomAt(next, W, H, m1[0], m1[1], d1 / d0);
    this.setCamera(next);
  }
}
