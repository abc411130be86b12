"""Fit a coordinate → RGB network to one image and export it to the model repository."""

from __future__ import annotations

import logging
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from fitstore import TARGET_BYTES, TARGET_PSNR
from modelrepo import Guard
from telemetry import tracing

from .compact import compact_graph
from .device import pick_device
from .encodings import INITS, Fitted, encoding_for
from .errors import UsageError
from .export import OPSET, check_parity, export_onnx, set_metadata_props
from .fp16 import round_weights_fp16, store_weights_fp16
from .image_models import ImageINR, ImageModelConfig, count_parameters, fold_batchnorm
from .images import MAX_PIXELS, check_size, downscaled, load_image, pixel_centres, save_png
from .metrics import psnr_from_mse, sse, ssim
from .repository import TensorSpec, write_model_dir
from .separable import write_separable

log = logging.getLogger(__name__)
PROTOCOLS = ("paper", "full")
SCHEDULES = ("constant", "cosine")
RENDER_CHUNK = 65536
PROBE = 65536  # training pixels the best weights are judged on
PREVIEW_SIDE = 1024  # preview.png: the fitted render, downscaled (in its aspect) to at most this longer side


@dataclass
class FitConfig:
    image: str = "astronaut"
    size: int | None = None  # cap on the longer side (None: native, up to max_pixels)
    crop: bool = False  # fit the centre square instead of the whole image
    max_pixels: int = MAX_PIXELS
    fp16_weights: bool = False  # weights rounded to and stored as float16 (float32 compute)
    # Defaults from docs/benchmarks.md, time_to_quality: as good a test PSNR as the paper's 2000 full-batch
    # steps at lr 1e-3, 2.4× sooner to 30 dB and 16× sooner to the end of the fit.
    steps: int = 500
    lr: float = 5e-3
    schedule: str = "cosine"  # constant | cosine (decays lr to 0 over `steps`)
    batch_size: int = 4096  # random mini-batch of training pixels; 0 = full batch
    protocol: str = "paper"  # paper: train on [::2, ::2], test on the rest; full: train on all
    seed: int = 0
    device: str = "auto"
    progress: bool = True
    compile: bool = False  # torch.compile the training forward/backward
    init: str = "pyramid"  # start the encoding from the image where it can (Encoding.initialise) | random
    model: ImageModelConfig = field(default_factory=ImageModelConfig)
    target_bytes: int | None = None  # the model file's bytes at most (the encoding's rate control)
    target_psnr: float | None = None  # or the PSNR over the training pixels at least, in dB

    def validate(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise UsageError(f"unknown protocol '{self.protocol}'; valid: {', '.join(PROTOCOLS)}")
        if self.init not in INITS:
            raise UsageError(f"unknown init '{self.init}'; valid: {', '.join(INITS)}")
        if self.schedule not in SCHEDULES:
            raise UsageError(f"unknown schedule '{self.schedule}'; valid: {', '.join(SCHEDULES)}")
        if self.steps < 1 or self.steps > 10_000_000:
            raise UsageError(f"--steps must be a positive integer, got {self.steps}")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise UsageError(f"--lr must be a positive finite number, got {self.lr}")
        if self.batch_size < 0:
            raise UsageError(f"--batch-size must be >= 0 (0 = full batch), got {self.batch_size}")
        check_size(self.size)
        encoding_for(self.model.encoding).validate(self.model.encoding)
        self.check_target()

    def check_target(self) -> None:
        if self.target_bytes is not None and self.target_psnr is not None:
            raise UsageError("--target-bytes and --target-psnr: give one target, not both")
        low, high = TARGET_BYTES
        if self.target_bytes is not None and not low <= self.target_bytes <= high:
            raise UsageError(f"--target-bytes must be {low} … {high} bytes, got {self.target_bytes}")
        if self.target_psnr is not None and not (0 < self.target_psnr <= TARGET_PSNR):
            raise UsageError(f"--target-psnr must be a number of dB in (0, {TARGET_PSNR:g}], got {self.target_psnr}")
        if self.target_bytes is not None or self.target_psnr is not None:
            encoding_for(self.model.encoding).check_target(self.model.encoding)


def split_pixels(img: np.ndarray, protocol: str):
    """Return (train_coords, train_rgb, test_coords, test_rgb) as float32 arrays [N, 2] / [N, 3]."""
    h, w, _ = img.shape
    coords = pixel_centres(h, w)  # [H, W, 2]
    if protocol == "full":
        c, t = coords.reshape(-1, 2), img.reshape(-1, 3)
        return c, t, c[:0], t[:0]
    mask = np.zeros((h, w), bool)
    mask[::2, ::2] = True
    return coords[mask], img[mask], coords[~mask], img[~mask]


@torch.no_grad()
def predict(model: torch.nn.Module, coords: np.ndarray, device: torch.device) -> np.ndarray:
    """[N, 3] float32, a chunk at a time into one array (a 25 MP render holds no second copy)."""
    model.eval()
    out = np.empty((len(coords), 3), np.float32)
    for i in range(0, len(coords), RENDER_CHUNK):
        out[i : i + RENDER_CHUNK] = model(torch.from_numpy(coords[i : i + RENDER_CHUNK]).to(device)).cpu().numpy()
    return out


class BestWeights:
    """Keeps the weights with the lowest loss on a fixed probe of up to PROBE training pixels, checked at every
    progress step, so that a fit never ends worse than it was (a high learning rate can fall back)."""

    def __init__(self, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, seed: int):
        g = torch.Generator().manual_seed(seed + 1)
        idx = torch.randint(len(x), (PROBE,), generator=g).to(x.device) if len(x) > PROBE else None
        self.x, self.y = (x[idx], y[idx]) if idx is not None else (x, y)
        self.model, self.loss, self.step, self.state = model, float("inf"), -1, None

    @torch.no_grad()
    def check(self, step: int) -> None:
        was = self.model.training
        self.model.eval()
        loss = float(torch.mean((self.model(self.x) - self.y) ** 2))
        self.model.train(was)
        if loss < self.loss:
            self.loss, self.step = loss, step
            self.state = {k: v.detach().clone() for k, v in self.model.state_dict().items()}

    def restore(self) -> None:
        if self.state is not None:
            self.model.load_state_dict(self.state)


def train(cfg: FitConfig, img: np.ndarray, on_step=None, every: int = 25) -> tuple[ImageINR, dict]:
    """Fit the model; return it (on CPU, eval mode) and the training history.

    Every `every` steps (and at the last), `on_step(step, loss, model)` is called; if it
    returns True, training stops there (benchmarks stop at a target PSNR).
    """
    torch.manual_seed(cfg.seed)
    device = pick_device(cfg.device)
    t0 = time.perf_counter()  # the fit's time includes the initialisation
    model = ImageINR(cfg.model)
    encoding = encoding_for(cfg.model.encoding)
    init_seconds = encoding.initialise(cfg.model.encoding, model, img, cfg.protocol) if cfg.init == "pyramid" else None
    model = model.to(device)
    tc, tt, _, _ = split_pixels(img, cfg.protocol)
    x = torch.from_numpy(tc).to(device)
    y = torch.from_numpy(tt).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, **encoding.optimizer_options(cfg.model.encoding))
    best = BestWeights(model, x, y, cfg.seed)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=cfg.steps) if cfg.schedule == "cosine" else None
    forward = torch.compile(model) if cfg.compile else model
    gen = torch.Generator(device=device).manual_seed(cfg.seed)
    bar = tqdm(range(cfg.steps), disable=not cfg.progress, desc="fit", unit="step", mininterval=0.5)
    loss_v = float("nan")
    for step in bar:
        model.train()
        if cfg.batch_size and cfg.batch_size < len(x):
            idx = torch.randint(len(x), (cfg.batch_size,), device=device, generator=gen)
            xb, yb = x.index_select(0, idx), y.index_select(0, idx)  # 3× faster than x[idx] on CPU
        else:
            xb, yb = x, y
        loss = torch.mean((forward(xb) - yb) ** 2)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()
        if step % every == 0 or step == cfg.steps - 1:
            loss_v = loss.item()
            best.check(step)
            bar.set_postfix(loss=f"{loss_v:.2e}", train_psnr=psnr_from_mse(loss_v, 2))  # the pixels it trains on
            if on_step is not None and on_step(step, loss_v, model):
                break
    seconds = time.perf_counter() - t0
    if not math.isfinite(best.loss):
        raise UsageError(f"training diverged (loss {loss_v}); try a smaller --lr")
    best.restore()
    model.zero_grad(set_to_none=True)  # the last step's gradients: a table's size again, through the finish
    model = model.cpu().eval()
    if cfg.model.model == "mlp-bn":
        fold_batchnorm(model)
    return model, {
        "train_seconds": round(seconds, 3),
        "init_seconds": init_seconds,
        "device": str(device),
        "final_loss": loss_v if math.isfinite(loss_v) else None,  # JSON: a last step may diverge
        "best_step": best.step,
        "best_probe_loss": best.loss,
    }


def evaluate(model: torch.nn.Module, img: np.ndarray, protocol: str) -> tuple[dict, np.ndarray]:
    """Train, held-out (protocol paper) and all-pixel PSNR and SSIM from one render at the pixel centres."""
    h, w, _ = img.shape
    full = predict(model, pixel_centres(h, w).reshape(-1, 2), torch.device("cpu")).reshape(h, w, 3)
    n_all, e_all = full.size, sse(full, img)
    if protocol == "full":
        n_train, e_train = n_all, e_all
    else:
        n_train, e_train = full[::2, ::2].size, sse(full[::2, ::2], img[::2, ::2])
    metrics = {"train_psnr": psnr_from_mse(e_train / n_train, 3)}
    if n_all > n_train:
        metrics["test_psnr"] = psnr_from_mse((e_all - e_train) / (n_all - n_train), 3)
    s = ssim(full, img)
    metrics["ssim"] = None if s is None else round(s, 4)  # None: a side under 7 pixels
    metrics["full_psnr"] = psnr_from_mse(e_all / n_all, 3)
    return metrics, full


def checkpoint(model: ImageINR, cfg: FitConfig) -> dict:
    """What export needs to rebuild the module: constructor args plus weights."""
    return {
        "model_args": cfg.model.to_dict(),
        "state_dict": model.state_dict(),
        "fit": {**asdict(cfg), "model": cfg.model.to_dict()},
    }


def rebuild(ckpt: dict) -> ImageINR:
    model = ImageINR(ImageModelConfig.from_dict(ckpt["model_args"]))
    if ckpt["model_args"]["model"] == "mlp-bn":
        fold_batchnorm(model)  # the checkpoint holds folded weights
    model.load_state_dict(ckpt["state_dict"])
    return model.eval()


def graph_opset(model: ImageINR) -> int:
    """OPSET (17), or the higher one the model's encoding needs (e.g. 18 for BitwiseXor)."""
    cfg = model.config.encoding
    return max(OPSET, encoding_for(cfg).opset(cfg, model))


def image_file(model: ImageINR, cfg: FitConfig, size: list[int]) -> tuple[bytes, dict]:
    """The model as the ONNX file export writes (its parity not checked here), with the storage's record."""
    opset = graph_opset(model)
    onnx_bytes = export_onnx(model, torch.rand(8, 2), "coords", ["rgb"], opset=opset)
    enc = cfg.model.encoding
    onnx_bytes, stored = encoding_for(enc).store(enc, model, onnx_bytes)  # e.g. 8-bit tables
    storage = {"opset": opset, "weights": "float32", **stored}
    if cfg.fp16_weights:
        onnx_bytes, half = store_weights_fp16(onnx_bytes)
        storage = {**storage, **half}
    onnx_bytes, compacted = compact_graph(onnx_bytes)  # short names, narrow constants: the same arithmetic
    storage = {**storage, **compacted}
    return set_metadata_props(onnx_bytes, {"image_width": str(size[0]), "image_height": str(size[1])}), storage


def image_onnx(model: ImageINR, cfg: FitConfig, size: list[int]) -> tuple[bytes, dict, np.ndarray]:
    """The model as an ONNX file whose metadata_props record the fitted pixel grid `size` [W, H], its parity with
    torch checked on random coordinates; with the export's record (opset, parity, storage) and the probe."""
    onnx_bytes, storage = image_file(model, cfg, size)
    probe = np.random.default_rng(cfg.seed).random((4096, 2), dtype=np.float32) * 1.5 - 0.25
    parity = check_parity(model, onnx_bytes, probe, "coords", ["rgb"], atol=1e-5)
    return onnx_bytes, {"opset": storage.pop("opset"), "max_abs_diff_vs_torch": parity, **storage}, probe


def image_metadata(cfg: FitConfig, size: list[int], source: dict, metrics: dict, history: dict, parameters: int):
    """metadata.json of an image model fitted at `size` (its `export` record is added by the caller)."""
    arch = cfg.model.to_dict()
    return {
        "description": f"{cfg.model.model} on {cfg.model.encoding.name} features fitted to '{cfg.image}' "
        f"at {size[0]}×{size[1]}",
        "architecture": {**arch, "parameters": parameters, "batchnorm_folded": cfg.model.model == "mlp-bn"},
        "encoding": arch["encoding"],
        "source": {**source, "image": cfg.image, "size": size},
        "training": {
            "steps": cfg.steps,
            "lr": cfg.lr,
            "schedule": cfg.schedule,
            "batch_size": cfg.batch_size,
            "protocol": cfg.protocol,
            "seed": cfg.seed,
            **history,
        },
        "metrics": metrics,
        "coordinates": "x right, y down, unit square [0,1]^2, pixel centres at ((j+0.5)/W, (i+0.5)/H)",
        "preview": "preview.png",
    }


IMAGE_INPUTS = [TensorSpec("coords", "FP32", [-1, 2])]
IMAGE_OUTPUTS = [TensorSpec("rgb", "FP32", [-1, 3])]


def preview_pixels(render: np.ndarray) -> np.ndarray:
    """preview.png's pixels (uint8, at most PREVIEW_SIDE on the longer side) of a render at the fitted size."""
    return downscaled(render, PREVIEW_SIDE)


def export_image_model(
    model: ImageINR,
    cfg: FitConfig,
    out: Path,
    source: dict,
    metrics: dict,
    history: dict,
    preview: np.ndarray,
    guard: Guard | None = None,
) -> dict:
    """Export to ONNX, verify parity on random coordinates, write the model directory.

    `source.size` (else the preview's [W, H]) is the fitted pixel grid: written to the version's metadata and
    to the ONNX file's metadata_props `image_width`, `image_height`. With cfg.fp16_weights the model's weights
    are already float16 numbers (fit_image rounds them before scoring) and the file stores them so. `preview`: the
    render, or its `preview_pixels` (a caller that drops the render before the export lowers its peak)."""
    size = [int(v) for v in source.get("size") or (preview.shape[1], preview.shape[0])]
    preview = preview_pixels(preview)
    with tracing.span("inr.fit.export"):  # the ONNX file and its parity with torch (docs/deployment.md, "Traces")
        onnx_bytes, export, probe = image_onnx(model, cfg, size)
        meta = image_metadata(cfg, size, source, metrics, history, count_parameters(model))
        meta["export"] = export
        write_body = write_separable(model, probe, meta)  # the body graph for separable renders, if any

    def extras(d: Path) -> None:
        save_png(preview, d / "preview.png", max_side=PREVIEW_SIDE)
        write_body(d)

    with tracing.span("inr.fit.write", attributes={"inr.model": out.name}):
        written = write_model_dir(
            out,
            task="image",
            onnx_bytes=onnx_bytes,
            inputs=IMAGE_INPUTS,
            outputs=IMAGE_OUTPUTS,
            metadata=meta,
            extras=extras,
            guard=guard,
        )
        tracing.annotate({"inr.model.version": written["version"]})
        return written


def finish(model: ImageINR, cfg: FitConfig, img: np.ndarray, history: dict, soft_target: bool = False) -> ImageINR:
    """What is scored and exported: the model a checkpoint restores, its weights rounded to float16 if asked, then
    its encoding's finish step (e.g. tables rounded to 8 bits and a level refitted through that rounding), what
    that did recorded in `history`. `soft_target`: a PSNR target out of reach keeps the finest rounding, a byte
    target the coarsest (grid_rate.Target.soft)."""
    model = rebuild(checkpoint(model, cfg))
    if cfg.fp16_weights:
        round_weights_fp16(model)
    enc = cfg.model.encoding
    size = [img.shape[1], img.shape[0]]
    fitted = Fitted(
        img,
        cfg.fp16_weights,
        lambda: split_pixels(img, cfg.protocol)[:2],
        target_bytes=cfg.target_bytes,
        target_psnr=cfg.target_psnr,
        target_soft=soft_target,
        file_bytes=lambda: len(image_file(model, cfg, size)[0]),
    )
    history.update(encoding_for(enc).finish(enc, model, fitted))
    return model


def fit_image(cfg: FitConfig, out: Path | None) -> dict:
    cfg.validate()
    img, source = load_image(cfg.image, cfg.size, cfg.crop, cfg.max_pixels)
    model, history = train(cfg, img)
    model = finish(model, cfg, img, history)
    metrics, full = evaluate(model, img, cfg.protocol)
    log.info("metrics: %s", metrics)
    if out is None:
        return {"metrics": metrics}
    preview = preview_pixels(full)
    del img, full  # the export's peak (its parity run decodes the tables) holds neither the image nor its render
    return export_image_model(model, cfg, out, source, metrics, history, preview)
