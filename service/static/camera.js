// The viewer's camera: which part of the model's unit square the canvas shows.
//
// State: centre c = (cx, cy) in model coordinates (x right, y down, [0,1]²), zoom z, rotation θ
// in degrees (counter-clockwise on screen), and the image's shape (ax, ay) = (W, H) / max(W, H)
// of its native W×H pixels (1, 1 for a square model). Pixels are square on screen, so the camera
// works in square units (max(W, H) image pixels each): D = diag(ax, ay) maps a model step to one.
// At zoom 1 the whole image fits the canvas; s = min(Wc/ax, Hc/ay)·z canvas pixels per square unit.
//
// The server is asked for the frame [cx − Wc/2s·ax, cy − Hc/2s·ay, …] with the transform
// {rotate: θ, center: c}. It samples the model at F⁻¹q = c + D⁻¹R(−θ)D(q − c) (rotation in square
// pixels, service/render/transform.py), so canvas pixel P shows  c + D⁻¹·R(−θ)·(P − C)/s,
// C = (Wc/2, Hc/2). With y down, R(θ) = [[cos θ, sin θ], [−sin θ, cos θ]]. For an odd nearest
// quarter turn the server reads the viewport in the turned image's units (its render frame), so
// the viewport sent is the frame turned back (`viewportOf`).

export const MIN_ZOOM = 0.25;
export const MAX_ZOOM = 4096;

// A camera at zoom 1 on a model of native size [W, H] (null: square).
export function initialCamera(size = null) {
  const [w, h] = Array.isArray(size) && size[0] > 0 && size[1] > 0 ? size : [1, 1];
  const m = Math.max(w, h);
  return { cx: 0.5, cy: 0.5, zoom: 1, rotation: 0, ax: w / m, ay: h / m };
}

const shape = (cam) => [cam.ax ?? 1, cam.ay ?? 1];

const rad = (deg) => (deg * Math.PI) / 180;
const clamp = (v, lo, hi) => Math.min(hi, Math.max(lo, v));

// Canvas pixels per square unit (max(W, H) image pixels).
export function pixelsPerUnit(cam, W, H) {
  const [ax, ay] = shape(cam);
  return Math.min(W / ax, H / ay) * cam.zoom;
}

// D⁻¹·R(−θ)·v : a canvas direction → a model direction.
function toModel(cam, vx, vy) {
  const t = rad(cam.rotation);
  const c = Math.cos(t), s = Math.sin(t);
  const [ax, ay] = shape(cam);
  return [(c * vx - s * vy) / ax, (s * vx + c * vy) / ay];
}

// The server's render frame rule (service/render/transform.py render_frame), inverted: for an odd
// nearest quarter turn (ties turn up) of a W×H model the viewport is read in the turned image's
// units about the image centre, frame = 0.5 + (viewport − 0.5)·(H/W, W/H); so viewport =
// 0.5 + (frame − 0.5)·(W/H, H/W).
export function viewportOf(cam, [x0, y0, x1, y1]) {
  const [ax, ay] = shape(cam);
  const q = ((Math.floor(cam.rotation / 90 + 0.5) % 4) + 4) % 4;
  if (ax === ay || q % 2 === 0) return [x0, y0, x1, y1];
  const fx = ax / ay, fy = ay / ax;
  return [0.5 + (x0 - 0.5) * fx, 0.5 + (y0 - 0.5) * fy, 0.5 + (x1 - 0.5) * fx, 0.5 + (y1 - 0.5) * fy];
}

// The model point under canvas pixel (px, py).
export function modelPointAt(cam, W, H, px, py) {
  const k = pixelsPerUnit(cam, W, H);
  const [dx, dy] = toModel(cam, (px - W / 2) / k, (py - H / 2) / k);
  return [cam.cx + dx, cam.cy + dy];
}

// The /render request fields for this camera on a W×H canvas.
export function renderFields(cam, W, H) {
  const k = pixelsPerUnit(cam, W, H);
  const [ax, ay] = shape(cam);
  const hw = W / (2 * k * ax), hh = H / (2 * k * ay);
  const fields = { viewport: viewportOf(cam, [cam.cx - hw, cam.cy - hh, cam.cx + hw, cam.cy + hh]) };
  if (cam.rotation !== 0) fields.transform = { rotate: cam.rotation, center: [cam.cx, cam.cy] };
  return fields;
}

// Horizontal strips [r0, r1) of a W×H render, each at most `maxSamples` model samples
// (W · rows · supersample²), so no single request is large; top to bottom.
export function strips(W, H, supersample, maxSamples) {
  const rows = Math.max(1, Math.floor(maxSamples / (W * supersample * supersample)));
  const out = [];
  for (let r0 = 0; r0 < H; r0 += rows) out.push([r0, Math.min(H, r0 + rows)]);
  return out;
}

// The viewport of rows [r0, r1) of an H-row render of `viewport`: same pixel centres.
export function stripViewport([x0, y0, x1, y1], H, r0, r1) {
  const dy = (y1 - y0) / H;
  return [x0, y0 + r0 * dy, x1, y0 + r1 * dy];
}

function withCentre(cam, cx, cy) {
  return { ...cam, cx: clamp(cx, 0, 1), cy: clamp(cy, 0, 1) };
}

// Drag by (dx, dy) canvas pixels: the model moves with the pointer.
export function pan(cam, W, H, dx, dy) {
  const k = pixelsPerUnit(cam, W, H);
  const [mx, my] = toModel(cam, dx / k, dy / k);
  return withCentre(cam, cam.cx - mx, cam.cy - my);
}

// Zoom by `factor` keeping the model point under canvas pixel (px, py) fixed.
export function zoomAt(cam, W, H, px, py, factor) {
  const zoom = clamp(cam.zoom * factor, MIN_ZOOM, MAX_ZOOM);
  const k0 = pixelsPerUnit(cam, W, H), k1 = pixelsPerUnit({ ...cam, zoom }, W, H);
  const [mx, my] = toModel(cam, (px - W / 2) * (1 / k0 - 1 / k1), (py - H / 2) * (1 / k0 - 1 / k1));
  return withCentre({ ...cam, zoom }, cam.cx + mx, cam.cy + my);
}

// Rotation is kept in (−180°, 180°], the slider's range.
export function rotateTo(cam, degrees) {
  const r = ((((degrees + 180) % 360) + 360) % 360) - 180;
  return { ...cam, rotation: r === -180 ? 180 : r };
}

// Canvas transform [a, b, c, d, e, f] that redraws an image rendered for camera `from` on a
// W1×H1 canvas where it belongs under camera `to` on a W2×H2 canvas: P₂ = A·P₁ + b with
// A = (s₂/s₁)·R(θ₂ − θ₁) and b = C₂ + s₂·R(θ₂)·D(c₁ − c₂) − A·C₁.
export function reprojection(from, W1, H1, to, W2, H2) {
  const s1 = pixelsPerUnit(from, W1, H1), s2 = pixelsPerUnit(to, W2, H2);
  const d = rad(to.rotation - from.rotation), t2 = rad(to.rotation);
  const r = s2 / s1;
  const A = [[r * Math.cos(d), r * Math.sin(d)], [-r * Math.sin(d), r * Math.cos(d)]];
  const [ax, ay] = shape(to);
  const ux = (from.cx - to.cx) * ax, uy = (from.cy - to.cy) * ay;
  const ex = W2 / 2 + s2 * (Math.cos(t2) * ux + Math.sin(t2) * uy) - (A[0][0] * W1 / 2 + A[0][1] * H1 / 2);
  const ey = H2 / 2 + s2 * (-Math.sin(t2) * ux + Math.cos(t2) * uy) - (A[1][0] * W1 / 2 + A[1][1] * H1 / 2);
  return [A[0][0], A[1][0], A[0][1], A[1][1], ex, ey];
}
