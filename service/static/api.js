// The service's HTTP API as used by the page. Every call takes an AbortSignal so a
// superseded request can be cancelled; errors carry the service's {"error": …} message.

export class ApiError extends Error {
  constructor(status, message, retryAfter = null) {
    super(message);
    this.status = status;
    this.retryAfter = retryAfter;   // seconds, from a 429's or 503's Retry-After
  }
}

async function checked(response) {
  if (response.ok) return response;
  let message = `${response.status} ${response.statusText}`;
  try {
    const body = await response.json();
    if (body && body.error) message = body.error;
  } catch (_) { /* not JSON */ }
  const retry = Number.parseFloat(response.headers.get("Retry-After"));
  throw new ApiError(response.status, message, Number.isFinite(retry) ? retry : null);
}

// A key's quota of requests a second (docs/access.md, "Quotas") is answered 429 with Retry-After. `send` is fetch
// that honours it: the page sends nothing more until then (every request waits, so parallel ones do not each hit
// the limit again), and the request goes again, at most RETRIES times. A wait longer than MAX_WAIT_S (a fit quota's
// day) is not waited for: the 429 is the answer. A 503 with Retry-After (the service busy or draining) likewise.
export const RETRIES = 6;
export const MAX_WAIT_S = 30;
let quietUntil = 0;  // performance.now() before which the page sends nothing

function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) { reject(signal.reason ?? new DOMException("aborted", "AbortError")); return; }
    const timer = setTimeout(() => { signal?.removeEventListener("abort", stop); resolve(); }, ms);
    const stop = () => { clearTimeout(timer); reject(signal.reason ?? new DOMException("aborted", "AbortError")); };
    signal?.addEventListener("abort", stop, { once: true });
  });
}

export async function send(url, init = {}) {
  for (let attempt = 0; ; attempt++) {
    // each held request adds a little spread, so that those held together do not all arrive in the same instant
    for (let hold; (hold = quietUntil - performance.now()) > 0;) await sleep(hold + Math.random() * 200, init.signal);
    const r = await fetch(url, init);
    if ((r.status !== 429 && r.status !== 503) || attempt >= RETRIES) return r;
    const wait = Number.parseFloat(r.headers.get("Retry-After"));
    if (!Number.isFinite(wait) || wait > MAX_WAIT_S) return r;
    quietUntil = Math.max(quietUntil, performance.now() + Math.max(wait, 0.25) * 1000);
  }
}

// The service's links are absolute paths ("/v1/…"); the page asks relative to itself, so it also
// works behind a proxy that serves the service under a prefix.
export const relative = (url) => url.replace(/^\//, "");

// GET /v1/models: one page of summaries (name, task, status), by name; `q` keeps the names that contain it.
// `more`: the repository has more than the page (search to find the others).
export async function listModels({ q = "", limit = 200, signal } = {}) {
  const query = new URLSearchParams({ limit: String(limit), ...(q ? { q } : {}) });
  const body = await (await checked(await send(`v1/models?${query}`, { signal }))).json();
  return { models: Array.isArray(body) ? body : body.models, more: Boolean(body.next), login: body.login || null };
}

// GET /v1/models/{name}: the detail of one model (its size, metadata, versions).
export async function modelDetail(name, signal) {
  return (await checked(await send(`v1/models/${encodeURIComponent(name)}`, { signal }))).json();
}

const enc = encodeURIComponent;

// POST /v1/models/{name}/render → an ImageBitmap of exactly width×height pixels.
export async function render(name, fields, signal) {
  const r = await checked(await send(`v1/models/${enc(name)}/render`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ format: "png", background: "transparent", ...fields }),
    signal,
  }));
  const blob = await r.blob();
  return createImageBitmap(blob);
}

// POST /v1/models/{name}/classify with one PNG upload → {label, probabilities, input}, where
// input is the 28×28 array the model saw after the service's MNIST-style preprocessing.
export async function classifyPng(name, pngBlob, signal) {
  const form = new FormData();
  form.append("files", pngBlob, "drawing.png");
  const url = `v1/models/${enc(name)}/classify?include_input=true`;
  const r = await checked(await send(url, { method: "POST", body: form, signal }));
  const body = await r.json();
  return body.predictions[0];
}

// The training preview if the service serves it; else the model rendered whole, at most PREVIEW_SIDE pixels along
// its longer side (a photo's native size may be past the service's INR_MAX_RENDER_PIXELS: a render it refuses).
export const PREVIEW_SIDE = 1024;
export function previewOf(model) {
  if (model.preview_url) return { url: model.preview_url, caption: "training preview" };
  const size = model.metadata?.source?.size;
  if (!Array.isArray(size)) return null;
  const scale = Math.min(1, PREVIEW_SIDE / Math.max(size[0], size[1]));
  const [w, h] = size.map((v) => Math.max(1, Math.round(v * scale)));
  const what = scale < 1 ? `the model rendered whole at ${w}×${h} (native ${size[0]}×${size[1]})`
    : `the model rendered at its training size, ${w}×${h}`;
  return { url: `v1/models/${enc(model.name)}/render?width=${w}&height=${h}`, caption: what };
}

// POST /v1/fits with the panel's form (file, preset, size, steps, name) → the job record (202).
// `onUpload(loaded, total)` follows the upload's bytes: XMLHttpRequest, because fetch reports no upload
// progress, and an upload may be gigabytes. Errors as `checked` gives them.
export function startFit(form, signal, onUpload = () => {}) {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("POST", "v1/fits");
    xhr.responseType = "json";
    xhr.upload.addEventListener("progress", (e) => { if (e.lengthComputable) onUpload(e.loaded, e.total); });
    xhr.upload.addEventListener("load", (e) => { if (e.lengthComputable) onUpload(e.total, e.total); });
    xhr.addEventListener("load", () => {
      if (xhr.status >= 200 && xhr.status < 300) { resolve(xhr.response); return; }
      const message = xhr.response?.error || `${xhr.status} ${xhr.statusText}`;
      const retry = Number.parseFloat(xhr.getResponseHeader("Retry-After"));
      reject(new ApiError(xhr.status, message, Number.isFinite(retry) ? retry : null));
    });
    xhr.addEventListener("error", () => reject(new ApiError(0, "the upload failed: the connection to the service was lost")));
    xhr.addEventListener("abort", () => reject(new DOMException("the upload was aborted", "AbortError")));
    signal?.addEventListener("abort", () => xhr.abort());
    xhr.send(form);
  });
}

// GET (or DELETE, to cancel) one of a job's links → the job record.
export async function fitRecord(url, method = "GET", signal) {
  const r = await checked(await send(relative(url), { method, signal }));
  return r.json();
}

// Wait until the service serves `name` at `version` or later: a new model appears once the service's
// repository poll picks it up. GET /v1/models (no 404s for the console while it is not there yet),
// then GET /v1/models/{name} for its version. Throws when it failed to load or time runs out.
export async function modelWhenReady(name, version, { signal, timeoutMs = 120_000, everyMs = 500 } = {}) {
  const until = performance.now() + timeoutMs;
  for (;;) {
    const { models } = await listModels({ q: name, signal });
    const s = models.find((x) => x.name === name);
    if (s?.status === "failed") throw new ApiError(500, `the model ${name} failed to load: ${s.error}`);
    if (s?.status === "ready") {
      const m = await (await checked(await send(`v1/models/${enc(name)}`, { signal }))).json();
      if (m.status === "ready" && (version == null || (m.version ?? 0) >= version)) return m;
    }
    if (performance.now() > until) {
      throw new ApiError(504, `${name} was not served within ${Math.round(timeoutMs / 1000)} s: is the service ` +
                              "in poll mode (--model-control-mode poll)?");
    }
    await new Promise((done) => setTimeout(done, everyMs));
    signal?.throwIfAborted();
  }
}

// GET /iiif/auth/whoami: who this browser is to the service ({sub, name, scopes}; sub null: no one).
export async function whoami(signal) {
  return (await checked(await send("iiif/auth/whoami", { signal }))).json();
}

// POST to the logout service (its GET is only the page with the button; docs/access.md).
export async function logout(url = "iiif/auth/logout") {
  await checked(await send(url, { method: "POST" }));
}

// Show `url` in `img` through `send` (an image's own request would just break on a 429), as an object URL.
export async function showImage(img, url, signal) {
  img.dataset.src = url;
  const blob = await (await checked(await send(url, { signal }))).blob();
  if (img.dataset.src !== url) return;  // another image was asked for meanwhile
  if (img.src.startsWith("blob:")) URL.revokeObjectURL(img.src);
  img.src = URL.createObjectURL(blob);
}
