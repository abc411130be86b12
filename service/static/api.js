// The service's HTTP API as used by the page. Every call takes an AbortSignal so a
// superseded request can be cancelled; errors carry the service's {"error": …} message.

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

async function checked(response) {
  if (response.ok) return response;
  let message = `${response.status} ${response.statusText}`;
  try {
    const body = await response.json();
    if (body && body.error) message = body.error;
  } catch (_) { /* not JSON */ }
  throw new ApiError(response.status, message);
}

// GET /v1/models lists one summary per model; the detail of each comes from its own URL.
export async function listModels(signal) {
  const r = await checked(await fetch("v1/models", { signal }));
  const body = await r.json();
  const summaries = Array.isArray(body) ? body : body.models;
  return Promise.all(summaries.map(async (s) => {
    if (!s.url) return s;
    const d = await fetch(s.url.replace(/^\//, ""), { signal });
    return d.ok ? d.json() : s;
  }));
}

const enc = encodeURIComponent;

// POST /v1/models/{name}/render → an ImageBitmap of exactly width×height pixels.
export async function render(name, fields, signal) {
  const r = await checked(await fetch(`v1/models/${enc(name)}/render`, {
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
  const r = await checked(await fetch(url, { method: "POST", body: form, signal }));
  const body = await r.json();
  return body.predictions[0];
}

// The training preview if the service serves it; else the model rendered at its training size
// (the same pixels preview.png holds: the fitted network at training resolution).
export function previewOf(model) {
  if (model.preview_url) return { url: model.preview_url, caption: "training preview" };
  const size = model.metadata?.source?.size;
  if (!Array.isArray(size)) return null;
  const [w, h] = size;
  return { url: `v1/models/${enc(model.name)}/render?width=${w}&height=${h}`,
           caption: `the model rendered at its training size, ${w}×${h}` };
}
