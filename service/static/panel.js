// The model panel: what the image model is and how well it fits, from GET /v1/models.
import { previewOf, showImage } from "./api.js";
import { psnrText as db } from "./fitplot.js";

const fmt = (v, digits) => (typeof v === "number" ? v.toFixed(digits) : "–");

function encodingText(e) {
  if (!e) return "–";
  const parts = [e.name];
  if (e.name === "gaussian") parts.push(`σ=${e.scale}`, `${e.features} features`);
  else if (e.name === "positional") parts.push(`${e.levels} levels`, `max freq ${fmt(e.max_freq, 1)}`);
  else if (e.name === "sine") parts.push(`${e.features} features`, `bandwidth ${fmt(e.bandwidth, 1)}`);
  return parts.join(", ");
}

function architectureText(a, whole) {
  if (!a) return "–";
  const parts = [a.model ?? "?"];
  if (a.depth) parts.push(`depth ${a.depth}`);
  if (a.width) parts.push(`width ${a.width}`);
  if (a.model === "sinekan" && a.grid_size) parts.push(`grid ${a.grid_size}`);
  // a block model's architecture is its overview's: its parameters are those of every file (metadata `whole`)
  const parameters = whole?.parameters ?? a.parameters;
  if (parameters) parts.push(`${parameters.toLocaleString("en")} parameters${whole ? ` in ${whole.files} files` : ""}`);
  return parts.join(", ");
}

const megabytes = (n) => (n >= 1e6 ? `${(n / 1e6).toFixed(2)} MB` : `${(n / 1e3).toFixed(1)} kB`);

// The model's bytes at rest, per native pixel, beside the file it was fitted from (metadata source.bytes, uploads).
export function sizeText(m, size) {
  const bytes = m.whole?.bytes ?? m.export?.bytes;
  if (typeof bytes !== "number" || bytes <= 0) return "–";
  const parts = [megabytes(bytes)];
  if (size) parts[0] += ` (${(bytes / (size[0] * size[1])).toFixed(2)} B/px)`;
  const upload = m.source?.bytes;
  if (typeof upload === "number" && upload > 0) {
    parts.push(`the uploaded file ${megabytes(upload)}: ${(bytes / upload).toFixed(2)}×`);
  }
  return parts.join(" · ");
}

// PSNR over all pixels first (a block model's is a lower bound: its blocks' weighted errors), then the training
// pixels' and the held-out pixels' where they differ from it, then SSIM: the same rows for one model and blocks.
function qualityRows(metrics, protocol) {
  const full = metrics.full_psnr ?? (protocol === "full" ? metrics.train_psnr : null);
  const rows = [["PSNR", typeof full === "number"
    ? `${db(full)} over all pixels${metrics.full_psnr_is ? " (at least: the blocks' errors)" : ""}` : "–"]];
  if (metrics.test_psnr != null) {
    rows.push(["Train PSNR", db(metrics.train_psnr)], ["Test PSNR", `${db(metrics.test_psnr)} (pixels it did not train on)`]);
  }
  rows.push(["SSIM", fmt(metrics.ssim, 4)]);
  return rows;
}

export function modelRows(model) {
  const m = { ...(model.metadata || {}), metrics: model.metrics };
  const metrics = m.metrics || {};
  // the native pixel grid (GET /v1/models/NAME width/height: source.native_size or source.size)
  const size = model.width > 0 && model.height > 0 ? [model.width, model.height] : m.source?.size;
  return [
    ["Model", model.name],
    ["Status", [model.status, model.provider].filter(Boolean).join(" · ")],
    ["Architecture", architectureText(m.architecture, m.whole)],
    ["Encoding", encodingText(m.encoding || m.architecture?.encoding)],
    ["Native size", size ? `${size[0]}×${size[1]} px${m.source?.image ? ` of ‘${m.source.image}’` : ""}` : "–"],
    ["File", sizeText(m, size)],
    ...qualityRows(metrics, m.training?.protocol),
  ];
}

export function showModel(panel, model) {
  const list = panel.querySelector("dl");
  list.replaceChildren();
  if (!model) return;
  for (const [k, v] of modelRows(model)) {
    const dt = document.createElement("dt");
    dt.textContent = k;
    const dd = document.createElement("dd");
    dd.textContent = v;
    list.append(dt, dd);
  }
  const description = panel.querySelector(".description");
  description.textContent = model.description || "";
  const figure = panel.querySelector("figure");
  const preview = previewOf(model);
  figure.hidden = !preview;
  if (preview) {
    const img = figure.querySelector("img");
    showImage(img, preview.url).catch(() => { img.src = preview.url; });  // the browser's own try shows why
    figure.querySelector("figcaption").textContent = preview.caption;
  }
}
