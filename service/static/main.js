// Wires the page together: model list → viewer, model panel and digit pad; the fit panel adds
// models to the list; the session's "Log in" or "Log out" (session.js) lists again what this browser may see.
// `/?model=NAME` opens that model, or says why not (restricted: log in; no such model), never another in its place.
import { listModels, modelDetail } from "./api.js";
import { DigitPad } from "./digits.js";
import { FitPanel } from "./fit.js";
import { showModel } from "./panel.js";
import { Session } from "./session.js";
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

// Why the model NAME cannot be shown, from GET /v1/models/NAME's refusal. The API answers a restricted model's name
// 401 (403 to a key without its scope) and an unknown one 404 (docs/access.md, "What a 401 tells"): the page tells
// no more than that.
function refusal(name, err, session) {
  if (err.status === 401) return `${name} is restricted: ${session.loginUrl ? "log in to see it" : "it needs a token"}`;
  if (err.status === 403) return `${name} is restricted: the key you are logged in with may not see it`;
  if (err.status === 404) return `no such model: ${name}`;
  return `cannot open ${name}: ${err.message}`;
}

async function start() {
  const viewer = new Viewer($("#view"), {
    onChange: readout,
    onError: (e) => say("#view-message", `render failed: ${e.message}`),
  });
  const pad = new DigitPad($("#pad"), $("#chart"), $("#seen"), {
    onResult: (p) =>
      say(
        "#pad-message",
        p.label === null
          ? `not a digit: ${p.reason}`
          : `looks like a ${p.label} (${(100 * Math.max(...p.probabilities)).toFixed(1)}%)`,
      ),
    onError: (e) => say("#pad-message", `classify failed: ${e.message}`),
  });
  $("#pad-clear").addEventListener("click", () => { pad.clear(); say("#pad-message", "draw a digit"); });
  $("#rotation").addEventListener("input", (e) => viewer.rotateTo(Number(e.target.value)));
  $("#zoom-in").addEventListener("click", () => viewer.zoomBy(2));
  $("#zoom-out").addEventListener("click", () => viewer.zoomBy(0.5));
  $("#reset").addEventListener("click", () => viewer.reset());

  const session = new Session({ login: $("#login"), logout: $("#logout"), who: $("#who") }, {
    onChange: () => relist(),
    onError: (e) => say("#view-message", `log in or out failed: ${e.message}`),
  });

  let images = [], digits = [], shown = 0;
  // Show the picker's model, or `name` that is not among the listed ones: then why it is not (and no model).
  const pickImage = async (remember = false, name = $("#model").value) => {
    const ticket = ++shown;
    let m = null, why = name ? "" : "no image model is loaded";
    if (name) m = await modelDetail(name).catch((e) => { why = refusal(name, e, session); return null; });
    if (m && (m.task !== "image" || (m.status || "ready") !== "ready")) {
      why = m.task !== "image" ? `${name} is not an image model` : `${name} is not loaded: ${m.error || m.status}`;
      m = null;
    }
    if (ticket !== shown) return;    // another pick came meanwhile
    showModel($("#panel"), m);
    if (!m) { $("#model").value = ""; viewer.setModel(null); }  // never another model in its place
    say("#view-message", why);
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
  // take `image`, found by its name when it is not on the page. The access service's URL where the service has keys.
  const refresh = async (image = null, q = "") => {
    const { models, more, login } = await listModels({ q });
    session.loginUrl = login;
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
  // The model asked for (/?model=NAME, or the picker's), shown when listed, else why it is not.
  const wanted = () => params.get("model") || $("#model").value;
  const open = (name) => {
    if (!images.some((m) => m.name === name)) return pickImage(true, name);
    $("#model").value = name;
    return pickImage(true);
  };
  // After a log in or out: the restricted models this browser may see come and go.
  async function relist() { const name = wanted(); await refresh(name); await open(name); }
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
  await session.update(session.loginUrl);
  const name = params.get("model");
  await Promise.all([name ? open(name) : pickImage(), pickDigits()]);
}

start();
