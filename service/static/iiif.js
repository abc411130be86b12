// /iiif.html?id=NAME: the image model as a IIIF Image API 3.0 service in OpenSeadragon (vendored).
// Tiles come from /iiif/3/NAME/…; info.json gives the model's native size and aspect, and the model
// renders each tile at its own coordinates. Past the native size the tile source adds levels at 2×,
// 4×, … native whose tiles are IIIF upscaled (`^`) requests, rendered by the model (iiif-levels.js);
// the readout says how far past native the view is and which tiles it shows.
//
// For the tests and viewer_sharp (bench/tiles.py): #osd carries data-state (loading, open, failed),
// data-image-zoom (device px per native image px), data-tile-scale (level px per native px of the
// tiles drawn), data-sharp (views fully drawn so far); each fully drawn view also leaves a
// performance mark "inr-sharp": the moment the last tile of a settled view is drawn.
//
// A restricted image (IIIF Authorization Flow 2.0, docs/access.md): its info.json names the auth services. The
// page shows what this browser may see (#osd data-access: public, full, substitute or restricted): the whole
// image, or the probe's substitute (a public version of limited size) or nothing, with "Log in", which opens the
// access service's window and shows the image again once it closes; "Log out" POSTs to the logout service (its GET
// is only a page with a button). Every request of the page, tiles included, waits out a key's quota (a 429 with
// Retry-After) and goes again (api.js's `send`).
import { listModels, logout as logOut, send } from "./api.js";
import { MIN_PIXEL_RATIO, nativeTileSource, tileScale } from "./iiif-levels.js";

const $ = (sel) => document.querySelector(sel);
const params = new URLSearchParams(location.search);
const MAX_MAGNIFIED = 4;  // screen px per native px reachable even where the service allows no upscaling
let viewer = null;
let source = null;        // the tile source with levels past native (null: OpenSeadragon's own)

function say(text) { $("#message").textContent = text; }

const fixed = (v) => v.toFixed(v < 10 ? 2 : 1);

function readout() {
  if (!viewer || !viewer.world.getItemCount()) return;
  const item = viewer.world.getItemAt(0);
  // device px per native IIIF px (OpenSeadragon's image coordinates are the native pixels)
  const zoom = item.viewportToImageZoom(viewer.viewport.getZoom(true)) * OpenSeadragon.pixelDensityRatio;
  const size = item.getContentSize();
  const scale = tileScale(zoom, source);
  const parts = [`${size.x}×${size.y} px (native)`, `${fixed(zoom)} screen px per image pixel`];
  if (zoom > 1.005) {
    const magnified = zoom / scale;
    parts.push(scale > 1 ? `past native: tiles rendered by the model at ${scale}× native` : "past native");
    const from = scale === 1 ? "native" : `${scale}×`;
    if (magnified > 1.005) parts.push(`magnified ${fixed(magnified)}× from the ${from} tiles`);
  }
  $("#readout").textContent = parts.join(" · ");
  const osd = $("#osd").dataset;
  osd.imageZoom = String(zoom);
  osd.tileScale = String(scale);
  osd.pastNative = String(zoom > 1.005);
}

// A view is sharp when OpenSeadragon has stopped animating and every tile it wants is drawn.
let animating = false, sharpViews = 0, wasSharp = false;
function checkSharp() {
  const item = viewer && viewer.world.getItemAt(0);
  const sharp = Boolean(item && !animating && item.getFullyLoaded());
  if (sharp && !wasSharp) {
    sharpViews += 1;
    $("#osd").dataset.sharp = String(sharpViews);
    performance.mark("inr-sharp", { detail: { views: sharpViews, zoom: Number($("#osd").dataset.imageZoom) } });
  }
  wasSharp = sharp;
}

// A tile source whose tiles are fetched through `send` (a 429 waits for its Retry-After and the tile is asked
// again) rather than by an <img>, which would just fail; OpenSeadragon gets the tile's bytes as a blob.
function retrying(tiles) {
  if (!tiles) return tiles;
  tiles.downloadTileStart = (job) => {
    const controller = new AbortController();
    job.userData.request = controller;   // OpenSeadragon's downloadTileAbort calls its abort()
    send(job.src, { signal: controller.signal, credentials: "same-origin" })
      .then(async (r) => {
        if (!r.ok) { job.fail(`[tile] ${r.status} ${r.statusText}`, null); return; }
        // the bytes, then a Blob (Response.blob() would leave DevTools and the tests no copy of the body)
        job.finish(new Blob([await r.arrayBuffer()], { type: r.headers.get("Content-Type") || "" }), null, "rasterBlob");
      })
      .catch((e) => { if (e.name !== "AbortError") job.fail(`[tile] ${e.message}`, null); });
  };
  return tiles;
}

async function tileSourceFor(info) {
  try {
    const r = await send(info);
    if (r.ok) return retrying(nativeTileSource(await r.json(), info));
  } catch (_) { /* OpenSeadragon fetches it again and reports the failure */ }
  return null;
}

// What this browser may see of the image, and its auth services (none for a public image).
async function access(info) {
  let r, doc = null;
  try { r = await send(info); doc = await r.json(); } catch (_) { return { kind: "public" }; }
  const probe = (doc.service || []).find((s) => s.type === "AuthProbeService2");
  if (!probe) return { kind: "public", doc: r.ok ? doc : null };
  const active = (probe.service || []).find((s) => s.type === "AuthAccessService2" && s.profile === "active");
  const logout = active && (active.service || []).find((s) => s.type === "AuthLogoutService2");
  const full = r.ok && (doc.maxWidth || doc.width) >= doc.width;
  if (full) return { kind: "full", active, logout, doc };
  let substitute = null;
  try { substitute = ((await (await send(probe.id)).json()).substitute || [])[0] || null; } catch (_) { /* none */ }
  return { kind: substitute ? "substitute" : "restricted", active, logout, substitute };
}

function authButtons(name, seen) {
  const login = $("#login"), logout = $("#logout");
  login.hidden = !(seen.active && seen.kind !== "full");
  logout.hidden = !(seen.logout && seen.kind === "full");
  login.onclick = () => {
    const w = window.open(`${seen.active.id}?origin=${encodeURIComponent(location.origin)}`, "inr-login");
    const timer = setInterval(() => { if (!w || w.closed) { clearInterval(timer); show(name); } }, 200);
  };
  logout.onclick = async () => {
    try { await logOut(seen.logout.id); } catch (e) { say(`log out failed: ${e.message}`); return; }
    show(name);
  };
}

async function show(name) {
  const info = `iiif/3/${encodeURIComponent(name)}/info.json`;
  $("#info").href = info;
  $("#mirador").href = `mirador.html?id=${encodeURIComponent(name)}`;  // its manifest.json in Mirador
  if (viewer) viewer.destroy();
  viewer = null;
  $("#osd").dataset.state = "loading";
  const seen = await access(info);
  $("#osd").dataset.access = seen.kind;
  authButtons(name, seen);
  say({
    substitute: "A public version of limited size: log in to see the whole image.",
    restricted: "This image is restricted: log in to see it.",
  }[seen.kind] || "");
  if (seen.kind === "restricted") { $("#osd").dataset.state = "failed"; return; }
  // the information read once: the tile source is made from it (OpenSeadragon fetches it only without one)
  source = seen.kind === "substitute" ? null : seen.doc ? retrying(nativeTileSource(seen.doc, info))
    : await tileSourceFor(info);
  const deepest = source ? 2 ** source.extraLevels : 1;
  animating = false; sharpViews = 0; wasSharp = false;
  viewer = OpenSeadragon({
    element: $("#osd"),
    prefixUrl: "vendor/openseadragon/images/",
    tileSources: seen.kind === "substitute" ? { type: "image", url: seen.substitute.id } : source || info,
    drawer: "canvas",            // a 2D canvas, so the tests can read its pixels
    crossOriginPolicy: "Anonymous",
    minPixelRatio: MIN_PIXEL_RATIO,
    // up to the deepest upscaled level at 1 screen px per level px (or magnified, without upscaling)
    maxZoomPixelRatio: Math.max(deepest, MAX_MAGNIFIED),
    showNavigator: true,
    immediateRender: false,
  });
  viewer.addHandler("open", () => {
    $("#osd").dataset.state = "open";
    readout();
    viewer.world.getItemAt(0).addHandler("fully-loaded-change", checkSharp);
  });
  viewer.addHandler("open-failed", (e) => { $("#osd").dataset.state = "failed"; say(`cannot open ${info}: ${e.message}`); });
  viewer.addHandler("animation-start", () => { animating = true; checkSharp(); });
  viewer.addHandler("animation", readout);
  viewer.addHandler("animation-finish", () => { animating = false; readout(); checkSharp(); });
  viewer.addHandler("tile-load-failed", (e) => say(`tile failed: ${e.message || e.tile.getUrl()}`));
  window.iiifViewer = viewer;    // for the tests and the console
}

async function start() {
  let models;
  try {
    const wanted = params.get("id") || "";
    const page = (await listModels()).models;
    if (wanted && !page.some((m) => m.name === wanted)) page.push(...(await listModels({ q: wanted })).models);
    models = page.filter((m) => m.task === "image" && (m.status || "ready") === "ready");
  } catch (e) {
    say(`cannot list models: ${e.message}`);
    return;
  }
  const select = $("#model");
  select.replaceChildren(...models.map((m) => new Option(m.name, m.name)));
  select.disabled = models.length === 0;
  const name = params.get("id") || (models[0] && models[0].name);
  if (!name) { say("no image model is loaded"); return; }
  if (models.some((m) => m.name === name)) select.value = name;
  select.addEventListener("change", () => {
    history.replaceState(null, "", `?id=${encodeURIComponent(select.value)}`);
    show(select.value);
  });
  show(name);
}

start();
