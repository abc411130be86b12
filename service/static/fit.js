// The "Fit your own image" panel: upload an image to POST /v1/fits, follow the job's Server-Sent
// Events (progress bar with ETA, PSNR-by-step plot, a preview that sharpens), cancel with DELETE,
// and when the fit succeeds wait until the service serves the new model and open it in the viewer.
//
// The panel's state is mirrored on its root as data-state for the tests: idle, submitting, queued,
// running, succeeded, loading-model, ready, failed, cancelled, error; while submitting, data-uploaded is the
// percentage of the file sent; a job fitted in blocks shows its pieces (data-pieces: done/total). One model or blocks,
// the job's progress events carry the same fields (the service sums a job's pieces into them).
import { fitRecord, modelWhenReady, relative, startFit } from "./api.js";
import { PsnrPlot, psnrText as db } from "./fitplot.js";

const FINAL = ["succeeded", "failed", "cancelled"];
const TYPES = ["queued", "started", "progress", "retrying", "split", ...FINAL];
const enc = encodeURIComponent;
const KEY = "inr-fit-job";   // sessionStorage: the running job's URL, so a reload follows it again

function errorText(err) {
  let text = err.message || String(err);
  if (err.status === 429 && err.retryAfter != null && !/retry|try again/i.test(text)) {
    text += ` (try again in ${Math.ceil(err.retryAfter)} s)`;
  }
  if (err.status === 403) text += " — this service keeps fits to clients with its key, which this page does not have";
  return text;
}

function bytesText(n) {
  if (n < 1 << 20) return `${Math.max(1, Math.round(n / 1024))} KB`;
  return n < 1 << 30 ? `${(n / (1 << 20)).toFixed(1)} MB` : `${(n / (1 << 30)).toFixed(2)} GB`;
}

// A finished job's quality, the same for one model and blocks: PSNR over all pixels, the held-out pixels' where
// some were held out, and SSIM.
export function qualityText(record) {
  const m = record.metrics || {};
  const parts = [`PSNR ${db(m.full_psnr ?? record.psnr)} over all pixels`];
  if (m.test_psnr != null) parts.push(`test PSNR ${db(m.test_psnr)} (the pixels it did not train on)`);
  if (typeof m.ssim === "number") parts.push(`SSIM ${m.ssim.toFixed(4)}`);
  return parts.join(" · ");
}

function etaText(s) {
  if (typeof s !== "number" || !Number.isFinite(s) || s <= 0) return "";
  const t = Math.ceil(s);
  return t < 60 ? `about ${t} s left` : `about ${Math.floor(t / 60)} min ${t % 60} s left`;
}

export class FitPanel {
  // onModel(name): open the (now served) model in the viewer; may return a promise.
  constructor(root, { onModel = () => {} } = {}) {
    const $ = (sel) => root.querySelector(sel);
    this.root = root;
    this.onModel = onModel;
    this.form = $("form");
    this.fields = $("fieldset");
    this.file = $("input[type=file]");
    this.fileName = $(".drop-name");
    this.job = $(".fit-job");
    this.bar = $("progress");
    this.stepText = $(".fit-step");
    this.eta = $(".fit-eta");
    this.preview = $(".fit-preview img");
    this.previewCaption = $(".fit-preview figcaption");
    this.plot = new PsnrPlot($(".fit-plot"));
    this.cancelButton = $(".fit-cancel");
    this.zoomLink = $(".fit-zoom");
    this.message = $(".fit-message");
    this.record = null;
    this.source = null;
    this.trainPsnr = null;
    this.etaFrom = null;
    this.cancelling = false;   // a cancel was asked for: the fit ends at its worker's next check, no ETA
    this.previews = 0;
    this.bind();
    this.setState("idle");
    this.resume();
  }

  // After a reload: the job this tab started, if it is still going (its finished state is shown too).
  async resume() {
    const url = sessionStorage.getItem(KEY);
    if (!url) return;
    try {
      const record = await fitRecord(url);
      if (FINAL.includes(record.state)) sessionStorage.removeItem(KEY);
      else this.follow(record);
    } catch (_) {
      sessionStorage.removeItem(KEY);   // gone (a new store, an unknown id): nothing to follow
    }
  }

  bind() {
    this.form.addEventListener("submit", (e) => { e.preventDefault(); this.submit(); });
    this.file.addEventListener("change", () => this.showFile());
    this.cancelButton.addEventListener("click", () => this.cancel());
    this.preview.addEventListener("load", () => {
      this.previews += 1;
      this.preview.dataset.loaded = String(this.previews);
    });
    // Drop anywhere on the panel; the file goes into the file input, so the form sends it as chosen.
    const over = (on) => (e) => { e.preventDefault(); if (!this.busy) this.root.classList.toggle("dragover", on); };
    this.root.addEventListener("dragenter", over(true));
    this.root.addEventListener("dragover", over(true));
    this.root.addEventListener("dragleave", (e) => { if (!this.root.contains(e.relatedTarget)) over(false)(e); });
    this.root.addEventListener("drop", (e) => {
      over(false)(e);
      if (this.busy || !e.dataTransfer?.files.length) return;
      this.file.files = e.dataTransfer.files;
      this.showFile();
    });
  }

  get busy() { return this.fields.disabled; }

  setState(state) {
    this.root.dataset.state = state;
  }

  say(text, error = false) {
    this.message.textContent = text;
    this.message.classList.toggle("error", error);
  }

  showFile() {
    const f = this.file.files[0];
    this.fileName.textContent = f ? `${f.name} (${Math.max(1, Math.round(f.size / 1024))} KB)` : "";
  }

  setBusy(busy) {
    this.fields.disabled = busy;
    this.cancelButton.hidden = !busy;
    this.cancelButton.disabled = false;
  }

  async submit() {
    const file = this.file.files[0];
    if (!file) { this.say("choose or drop an image first", true); this.file.focus(); return; }
    const form = new FormData();
    form.append("file", file, file.name);
    for (const key of ["preset", "size", "steps", "name"]) {
      const value = String(this.form.elements[key].value).trim();
      if (value) form.append(key, value);
    }
    this.stop();
    this.waiting?.abort();             // a previous job's wait for its model is no longer wanted
    this.refollows = 0;
    this.setBusy(true);
    this.cancelButton.hidden = true;   // nothing to cancel until the job exists
    delete this.root.dataset.uploaded;
    delete this.root.dataset.pieces;
    this.zoomLink.hidden = true;
    this.setState("submitting");
    this.say(`uploading ${file.name}…`);
    const jobShown = !this.job.hidden;   // the upload's bar shows the job's part of the panel; a refusal hides it again
    try {
      this.follow(await startFit(form, undefined, (loaded, total) => this.uploaded(loaded, total)));
    } catch (err) {
      this.job.hidden = !jobShown;
      this.setBusy(false);
      this.setState("error");
      this.say(errorText(err), true);
    }
  }

  // The upload's progress, on the bar, before the job exists.
  uploaded(loaded, total) {
    const percent = total ? Math.floor((100 * loaded) / total) : 100;
    this.job.hidden = false;
    this.bar.max = total || 1;
    this.bar.value = loaded;
    this.bar.setAttribute("aria-valuetext", `uploaded ${percent}%`);
    this.stepText.textContent = `uploaded ${percent}%`;
    this.eta.textContent = `${bytesText(loaded)} of ${bytesText(total)}`;
    this.root.dataset.uploaded = String(percent);
  }

  showPieces(p) {
    if (!p) return;
    const done = p.succeeded || 0;
    this.root.dataset.pieces = `${done}/${p.total}`;
    const parts = [`${done} of ${p.total} pieces done`];
    if (p.running) parts.push(`${p.running} fitting`);
    if (p.failed) parts.push(`${p.failed} failed`);
    if (!this.cancelling) this.say(`fitting in blocks: ${parts.join(" · ")}`);
  }

  // Show a job and subscribe to its events; EventSource reconnects by itself after a dropped
  // connection, sending Last-Event-ID, and the service resumes the stream after it.
  follow(record) {
    this.record = record;
    this.cancelling = Boolean(record.cancel_requested);
    sessionStorage.setItem(KEY, record.links.self);
    this.setBusy(true);
    this.job.hidden = false;
    this.previews = 0;
    delete this.preview.dataset.loaded;
    this.preview.removeAttribute("src");
    this.preview.hidden = true;
    this.previewCaption.textContent = "";
    this.plot.clear(record.steps || record.options?.steps || null);
    this.progress(record);
    this.setState(record.state === "running" ? "running" : "queued");
    this.say(record.note ? `queued: ${record.note}` : `${record.name}: ${record.state}`);
    const source = new EventSource(relative(record.links.events));
    this.source = source;
    clearInterval(this.etaTimer);
    this.etaTimer = setInterval(() => { if (this.etaFrom) this.showEta(); }, 1000);
    for (const type of TYPES) {
      source.addEventListener(type, (e) => {
        if (this.source !== source) return;
        let data = {};
        try { data = JSON.parse(e.data); } catch (_) { /* an event without JSON data */ }
        this.onEvent(type, data);
      });
    }
    source.addEventListener("error", () => {
      if (this.source === source && source.readyState === EventSource.CLOSED) this.finish(null);
    });
  }

  stop() {
    this.source?.close();
    this.source = null;
    clearInterval(this.etaTimer);
    this.etaTimer = null;
    this.etaFrom = null;
    this.showEta();   // the job's last train PSNR stays; its ETA goes
  }

  progress(d) {
    const steps = d.steps || this.record?.steps || this.record?.options?.steps || 0;
    const step = d.step || 0;
    if (steps) this.bar.max = steps;
    this.bar.value = Math.min(step, steps || step);
    this.bar.setAttribute("aria-valuetext", steps ? `step ${step} of ${steps}` : "waiting");
    this.stepText.textContent = steps ? `${step} / ${steps}` : "";
    this.trainPsnr = typeof d.psnr === "number" ? d.psnr : null;
    this.etaFrom = !this.cancelling && typeof d.eta_s === "number" && Number.isFinite(d.eta_s)
      ? { s: d.eta_s, at: performance.now() } : null;
    this.showEta();
  }

  // The ETA counts down between events (every second, from the last one's); at 0 the fit is finishing (a grid's
  // refit, the evaluation, the export). Not in the live region: a screen reader would read out every second.
  showEta() {
    const left = this.etaFrom && this.etaFrom.s - (performance.now() - this.etaFrom.at) / 1000;
    const eta = !this.etaFrom ? "" : left >= 1 ? etaText(left) : "finishing…";
    this.eta.textContent = [this.trainPsnr !== null ? `train PSNR ${db(this.trainPsnr)}` : "", eta]
      .filter(Boolean).join(" · ");
  }

  onEvent(type, data) {
    if (type === "queued") {
      this.setState("queued");
      const note = data.note || this.record?.note;
      this.say(note ? `queued: ${note}` : "queued, waiting for a worker");
    } else if (type === "started") {
      this.setState("running");
      this.say("fitting…");
    } else if (type === "progress") {   // one model's, or (with `pieces`) the sum of a job's pieces
      this.setState("running");
      this.progress(data);
      this.plot.add(data.step, data.psnr, data.steps);
      if (data.preview && !this.preview.src.endsWith(data.preview)) {
        this.preview.hidden = false;
        this.preview.src = relative(data.preview);
        this.previewCaption.textContent = data.pieces ? "preview of the whole image (the overview)"
          : `preview, step ${data.step}`;
      }
      if (data.pieces) this.showPieces(data.pieces);   // until the worker stops, "cancelling…" stays said
      else if (!this.cancelling && this.message.textContent !== "fitting…") this.say("fitting…");
    } else if (type === "split") {   // in blocks: its pieces are jobs of their own (docs/fits.md)
      this.setState("running");
      this.showPieces({ total: data.pieces, succeeded: 0 });
      this.say(`fitting in blocks: ${(data.pieces || 1) - 1} blocks and an overview, on every free worker`);
    } else if (type === "retrying") {   // the fit starts again from step 0
      this.setState("queued");
      this.plot.clear(this.plot.steps);
      this.progress({ steps: this.bar.max });
      this.say(`retrying: ${data.reason || data.error || "the worker stopped"}`);
    } else {
      this.finish(type, data);
    }
  }

  // A final event (or a stream that closed for good): the record says how the job ended.
  async finish(type, data = {}) {
    this.stop();
    this.cancelButton.disabled = true;
    let record = this.record;
    try {
      record = await fitRecord(record.links.self);
      if (this.record?.id !== record.id) return;   // another job started meanwhile
      this.record = record;
    } catch (err) {
      if (!type) { this.setBusy(false); this.setState("error"); this.say(errorText(err), true); return; }
    }
    const state = FINAL.includes(record.state) ? record.state : type;
    if (!state) {   // the stream closed while the job goes on: follow it again, a few times
      if ((this.refollows = (this.refollows || 0) + 1) <= 5) {
        setTimeout(() => this.follow(record), 2000);
        return;
      }
      this.setBusy(false);
      this.setState("error");
      this.say(`lost the job's event stream; the job is ${record.state} (${record.links.self})`, true);
      return;
    }
    // Only now: a reload closes the stream too (an error event on the way out), and the next page resumes it.
    sessionStorage.removeItem(KEY);
    this.setBusy(false);
    this.setState(state);
    if (state === "failed") {
      this.say(`the fit failed: ${record.error || data.error || data.reason || "no reason given"}`, true);
    } else if (state === "cancelled") {
      this.say("cancelled; nothing was written");
    } else {
      this.bar.value = this.bar.max;
      this.eta.textContent = "";
      await this.open(record);
    }
  }

  async open(record) {
    this.setState("loading-model");
    this.say(`loading the new model… (${record.name}, version ${record.version ?? "?"})`);
    const waiting = new AbortController();
    this.waiting = waiting;
    try {
      await modelWhenReady(record.name, record.version, { signal: waiting.signal });
      if (waiting.signal.aborted) return;
      await this.onModel(record.name);
    } catch (err) {
      if (waiting.signal.aborted) return;    // a new job took the panel over
      this.setState("error");
      this.say(errorText(err), true);
      return;
    }
    this.zoomLink.href = `iiif.html?id=${enc(record.name)}`;
    this.zoomLink.hidden = false;
    this.setState("ready");
    // a target out of reach keeps the closest model: the job's warning says which (docs/fits.md, target_psnr)
    const warning = record.warning ? ` · ${record.warning}` : "";
    this.say(`${record.name} version ${record.version} is in the viewer · ${qualityText(record)}${warning}`);
  }

  async cancel() {
    if (!this.record) return;
    this.cancelButton.disabled = true;
    this.say("cancelling…");
    try {
      const record = await fitRecord(this.record.links.self, "DELETE");
      this.cancelling = true;   // the worker stops at its next check: the ETA to the last step means nothing now
      this.etaFrom = null;
      this.showEta();
      if (record.state === "cancelled" && this.source) this.finish("cancelled");
    } catch (err) {
      this.cancelButton.disabled = false;
      this.say(errorText(err), true);
    }
  }
}
