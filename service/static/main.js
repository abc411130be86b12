// Wires the page together: model list → viewer, model panel and digit pad; the fit panel adds
// models to the list.
import { listModels, modelDetail } from "./api.js";
import { DigitPad } from "./digits.js";
import { FitPanel } from "./fit.js";
import { showModel } from "./panel.js";
import { Viewer } from "./viewer.js";

const $ = (sel) => document.querySelector(sel);
const params = new URLSearchParams(location.search);

function readout(v) {
  const detail = v.detail();
  const parts = [
    `${v.width}×${v.height} px`,
    `zoom ${v.camera.zoom.toFixed(2)}×`,
    `${Math.round(v.camera.rotation)}°`,
  ];
  if (detail !== null) parts.push(`${detail.toFixed(detail < 10 ? 2 : 1)} px per image pixel`);
  const state = v.canvas.dataset.state;
  if (state === "sharp") say("#view-message", "");   // a render failure is over once one succeeds
  if (state === "sharp" && v.lastMs !== null) parts.push(`sharp in ${Math.round(v.lastMs)} ms`);
  else if (state) parts.push(state);
  $("#readout").textContent = parts.join(" · ");
  $("#rotation").value = String(Math.round(v.camera.rotation));
  $("#rotation-value").textContent = `${Math.round(v.camera.rotation)}°`;
}

function fillSelect(select, models) {
  select.replaceChildren(...models.map((m) => new Option(`${m.name}`, m.name)));
  select.disabled = models.length === 0;
}

function say(where, text) {
  $(where).textContent = text;
}

async function start() {
  const viewer = new Viewer($("#view"), {
    onChange: readout,
    onError: (e) => say("#view-message", `render failed: ${e.message}`),
  });
  const pad = new DigitPad($("#pad"), $("#chart"), $("#seen"), {
    onResult: (p) => say("#pad-message", `looks like a ${p.label} (${(100 * Math.max(...p.probabilities)).toFixed(1)}%)`),
    onError: (e) => say("#pad-message", `classify failed: ${e.message}`),
  });
  $("#pad-clear").addEventListener("click", () => { pad.clear(); say("#pad-message", "draw a digit"); });
  $("#rotation").addEventListener("input", (e) => viewer.rotateTo(Number(e.target.value)));
  $("#zoom-in").addEventListener("click", () => viewer.zoomBy(2));
  $("#zoom-out").addEventListener("click", () => viewer.zoomBy(0.5));
  $("#reset").addEventListener("click", () => viewer.reset());

  let images = [], digits = [], shown = 0;
  const pickImage = async (remember = false) => {
    const name = $("#model").value, ticket = ++shown;
    const m = name ? await modelDetail(name).catch(() => null) : null;
    if (ticket !== shown) return;    // another pick came meanwhile
    showModel($("#panel"), m);
    say("#view-message", m ? "" : "no image model is loaded");
    if (m) viewer.setModel(m);
    $("#iiif-link").href = m ? `iiif.html?id=${encodeURIComponent(m.name)}` : "iiif.html";
    if (m && remember) {             // /?model=NAME (also a finished fit's "viewer" link) opens it again
      params.set("model", m.name);
      history.replaceState(null, "", `?${params}`);
    }
  };
  const pickDigits = async () => {
    const name = $("#digit-model").value;
    const m = name ? await modelDetail(name).catch(() => null) : null;
    say("#pad-message", m ? "draw a digit" : "no digit model is loaded");
    pad.setModel(m);
  };
  $("#model").addEventListener("change", () => pickImage(true));
  $("#digit-model").addEventListener("change", pickDigits);

  // (Re)list the models (a page; `q` searches the names); keep each picker's choice where it is still listed, or
  // take `image`, found by its name when it is not on the page.
  let loginUrl = null;  // the access service, when the service has API keys (GET /v1/models says)
  const refresh = async (image = null, q = "") => {
    const { models, more, login } = await listModels({ q });
    $("#login").hidden = $("#logout").hidden = !login;  // only where the service has keys (docs/access.md)
    loginUrl = login;
    if (image && !models.some((m) => m.name === image)) {
      models.push(...(await listModels({ q: image })).models.filter((m) => m.name === image));
    }
    const keep = [image || $("#model").value, $("#digit-model").value];
    const ready = models.filter((m) => (m.status || "ready") === "ready");
    images = ready.filter((m) => m.task === "image");
    digits = ready.filter((m) => m.task === "digits");
    fillSelect($("#model"), images);
    fillSelect($("#digit-model"), digits);
    if (images.some((m) => m.name === keep[0])) $("#model").value = keep[0];
    if (digits.some((m) => m.name === keep[1])) $("#digit-model").value = keep[1];
    const failed = models.filter((m) => !ready.includes(m));
    const notes = failed.length ? [`not loaded: ${failed.map((m) => m.name).join(", ")}`] : [];
    if (more) notes.push("more models: search by name");
    say("#models-message", notes.join("; "));
  };
  // Log in (the IIIF access service's window) or out: the restricted models this browser may see come and go.
  const relist = async () => { await refresh(); await pickImage(true); };
  $("#login").addEventListener("click", () => {
    const w = window.open(`${loginUrl}?origin=${encodeURIComponent(location.origin)}`, "inr-login");
    const timer = setInterval(() => { if (!w || w.closed) { clearInterval(timer); relist(); } }, 200);
  });
  $("#logout").addEventListener("click", async () => { await fetch("iiif/auth/logout"); await relist(); });
  let typing = null;
  $("#model-search").addEventListener("input", (e) => {
    clearTimeout(typing);
    typing = setTimeout(async () => {
      await refresh(null, e.target.value.trim());
      await pickImage(true);
    }, 250);
  });

  // A finished fit: its model (served by now) goes into the picker and the viewer.
  new FitPanel($("#fit"), {
    onModel: async (name) => {
      await refresh(name);
      if ($("#model").value !== name) throw new Error(`${name} is not among the served image models`);
      await pickImage(true);
    },
  });

  try {
    await refresh(params.get("model"));
  } catch (e) {
    say("#view-message", `cannot list models: ${e.message}`);
    return;
  }
  await Promise.all([pickImage(), pickDigits()]);
}

start();
