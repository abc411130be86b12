// /iiif.html?id=NAME: the image model as a IIIF Image API 3.0 service in OpenSeadragon (vendored).
// Tiles come from /iiif/3/NAME/…; info.json gives the model's native size and aspect, and the model
// renders each tile at its own coordinates. Past the native size (1 screen px per image px)
// OpenSeadragon magnifies its deepest tiles (maxZoomPixelRatio); the readout says how far.
import { listModels } from "./api.js";

const $ = (sel) => document.querySelector(sel);
const params = new URLSearchParams(location.search);
let viewer = null;

function say(text) { $("#message").textContent = text; }

function readout() {
  if (!viewer || !viewer.world.getItemCount()) return;
  const item = viewer.world.getItemAt(0);
  const imageZoom = item.viewportToImageZoom(viewer.viewport.getZoom(true));  // screen px per IIIF px
  const size = item.getContentSize();
  const parts = [`${size.x}×${size.y} px (native)`, `${imageZoom.toFixed(3)} screen px per image pixel`];
  if (imageZoom > 1) parts.push("past native: magnified");
  $("#readout").textContent = parts.join(" · ");
  $("#osd").dataset.imageZoom = String(imageZoom);
}

function show(name) {
  const info = `iiif/3/${encodeURIComponent(name)}/info.json`;
  $("#info").href = info;
  $("#mirador").href = `mirador.html?id=${encodeURIComponent(name)}`;  // its manifest.json in Mirador
  if (viewer) viewer.destroy();
  $("#osd").dataset.state = "loading";
  viewer = OpenSeadragon({
    element: $("#osd"),
    prefixUrl: "vendor/openseadragon/images/",
    tileSources: info,
    drawer: "canvas",            // a 2D canvas, so the tests can read its pixels
    crossOriginPolicy: "Anonymous",
    maxZoomPixelRatio: 4,        // up to 4 screen px per native image px (OpenSeadragon magnifies past 1)
    showNavigator: true,
    immediateRender: false,
  });
  viewer.addHandler("open", () => { $("#osd").dataset.state = "open"; readout(); });
  viewer.addHandler("open-failed", (e) => { $("#osd").dataset.state = "failed"; say(`cannot open ${info}: ${e.message}`); });
  viewer.addHandler("animation", readout);
  viewer.addHandler("animation-finish", readout);
  viewer.addHandler("tile-load-failed", (e) => say(`tile failed: ${e.message || e.tile.getUrl()}`));
  window.iiifViewer = viewer;    // for the tests and the console
}

async function start() {
  let models;
  try {
    models = (await listModels()).filter((m) => m.task === "image" && (m.status || "ready") === "ready");
  } catch (e) {
    say(`cannot list models: ${e.message}`);
    return;
  }
  const select = $("#model");
  select.replaceChildren(...models.map((m) => new Option(m.name, m.name)));
  select.disabled = models.length === 0;
  const wanted = params.get("id");
  const name = wanted || (models[0] && models[0].name);
  if (!name) { say("no image model is loaded"); return; }
  if (models.some((m) => m.name === name)) select.value = name;
  select.addEventListener("change", () => {
    history.replaceState(null, "", `?id=${encodeURIComponent(select.value)}`);
    show(select.value);
  });
  show(name);
}

start();
