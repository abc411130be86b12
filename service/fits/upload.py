"""A fit's upload and options, checked before anything is queued (docs/fits.md, POST /v1/fits).

The image: at most INR_FIT_MAX_UPLOAD_BYTES (413); decodable by Pillow, not truncated, not empty
(400); at most INR_MAX_UPLOAD_PIXELS pixels, read from the header before decoding (413, the
decompression-bomb guard). It is then made the 8-bit RGB image the worker fits:

* EXIF orientation applied (phone photos upright, as the camera meant);
* an animated GIF, WebP or PNG: the first frame (`source.frames` says how many there were);
* palette → RGB (its transparency kept until the composite); CMYK → RGB (Pillow's conversion);
  grey (L, 1) → RGB; 16-bit and 32-bit grey (I;16, I) scaled by 255/65535, not clipped; float
  grey (F) in [0, 1] scaled by 255; alpha (RGBA, LA, PA, tRNS) composited over white;

and stored as PNG bytes; `source.sha256` is the hash of the file's bytes as sent (the skip by content hash,
fitstore.dedupe). The options are the documented subset of `fit-image`; each one out of range is a 422 naming
the field and its limit.
"""

from __future__ import annotations

import hashlib
import io
import re
import struct
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps

from fitstore import DEFAULT_PRESET, RD_LAMBDA, TARGET_BYTES, TARGET_PSNR
from modelrepo import NAME_RE, Repository, SpecError, StorageUnavailable, read_spec

from ..errors import BadInput, Conflict, InvalidOption, RepositoryUnavailable, ServiceError, TooLarge

MAX_SEED = 2**31 - 1
MIN_SIZE = 16
PROTOCOLS = ("paper", "full")
FIELDS = (
    "file",
    "preset",
    "size",
    "steps",
    "protocol",
    "seed",
    "name",
    "skip_existing",
    "block_size",
    "blocks",
    "target_bytes",  # the model file's bytes at most, or its PSNR at least (the grid preset's rate control)
    "target_psnr",
    "rd_lambda",  # or its quality as a rate–distortion trade-off (training/encodings/grid_rd.py)
    "access",  # the new model's policy, as config.pbtxt's parameters (service/auth/fitaccess.py)
    "access_scopes",
    "access_substitute",
)
BLOCKS = ("auto", "always")  # auto: blocks only when one model would not fit a worker's memory (docs/fits.md)
BOOLEANS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False, "": False}
NAME_CHARS = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class Upload:
    png: bytes  # the normalised image: 8-bit RGB PNG; b"" for an upload kept as a file (service/fits/files.py)
    source: dict  # filename, width, height (upright), mode, format, frames, sha256 (of the bytes as sent)
    path: Path | None = None  # the upload kept as a file: read by region by the worker, not carried in the store


def digest(data: bytes) -> str:
    """The sha256 of the uploaded bytes, in lowercase hex: what `skip_existing` and `?sha256=` compare."""
    return hashlib.sha256(data).hexdigest()


def decode(data: bytes, filename: str, max_bytes: int, max_pixels: int, sha256: str | None = None) -> Upload:
    """The upload as an 8-bit RGB PNG, or a 4xx naming the problem and the limiting setting. `sha256`: the
    bytes' digest when the caller has it already."""
    filename = "".join(c for c in filename if c.isprintable())[-200:] or "upload"  # shown in errors, kept
    if len(data) > max_bytes:
        raise TooLarge(
            f"'{filename}' is {len(data)} bytes, more than the limit of {max_bytes} (INR_FIT_MAX_UPLOAD_BYTES)"
        )
    if not data:
        raise BadInput(f"'{filename}' is empty (0 bytes); send an image file")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            img = Image.open(io.BytesIO(data))
            if img.width * img.height > max_pixels:  # from the header: nothing decoded yet
                raise TooLarge(
                    f"'{filename}' is {img.width}×{img.height} pixels, more than the limit of "
                    f"{max_pixels} (INR_MAX_UPLOAD_PIXELS)"
                )
            if img.width < 1 or img.height < 1:
                raise BadInput(f"'{filename}' has no pixels ({img.width}×{img.height})")
            fmt, mode, frames = img.format, img.mode, getattr(img, "n_frames", 1)
            img.seek(0)
            img.load()  # a truncated file fails here (Pillow's LOAD_TRUNCATED_IMAGES stays off)
            img = upright(img)
            rgb = to_rgb(img)
    except ServiceError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as e:  # Pillow's own guard, first
        found = re.search(r"\((\d+) pixels\)", str(e))
        size = f"{int(found.group(1))} pixels" if found else "more pixels"
        raise TooLarge(
            f"'{filename}' has {size}, more than the limit of {max_pixels} (INR_MAX_UPLOAD_PIXELS)"
        ) from None
    except Image.UnidentifiedImageError:
        raise BadInput(f"'{filename}' is not an image Pillow can read (PNG, JPEG, GIF, WebP, TIFF, BMP …)") from None
    except Exception as e:  # noqa: BLE001 - anything a decoder raises on untrusted bytes is a damaged file
        raise BadInput(f"'{filename}' is a damaged or truncated image: {e}") from None
    buf = io.BytesIO()
    rgb.save(buf, "PNG", compress_level=3)
    source = {
        "filename": filename,
        "width": rgb.width,
        "height": rgb.height,
        "mode": mode,
        "format": fmt,
        "frames": int(frames),
        "sha256": sha256 or digest(data),
        "bytes": len(data),  # the file as uploaded (the model panel shows the model's bytes beside it)
    }
    return Upload(buf.getvalue(), source)


def upright(img: Image.Image) -> Image.Image:
    """EXIF orientation applied; an EXIF block Pillow cannot parse leaves the pixels as they are."""
    try:
        return ImageOps.exif_transpose(img)
    except (SyntaxError, ValueError, TypeError, KeyError, OSError, struct.error):
        return img


def to_rgb(img: Image.Image) -> Image.Image:
    """8-bit RGB: 16/32-bit grey scaled, float grey from [0, 1], alpha composited over white."""
    mode = img.mode
    if mode.startswith("I") or mode == "F":
        a = np.asarray(img, dtype=np.float64)
        scale = 255.0 if mode == "F" and a.size and float(np.nanmax(a)) <= 1.0 else 255.0 / 65535.0
        grey = np.rint(np.clip(np.nan_to_num(a * scale), 0, 255)).astype(np.uint8)
        return Image.fromarray(grey, "L").convert("RGB")
    if mode in ("RGBA", "LA", "PA", "La", "RGBa") or "transparency" in img.info:
        rgba = img.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, rgba).convert("RGB")
    return img.convert("RGB") if mode != "RGB" else img


def as_int(form: dict, field: str, default: int | None, low: int, high: int, limit: str = "") -> int | None:
    raw = form.get(field)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise InvalidOption(f"{field} must be a whole number, got {raw[:40]!r}") from None
    if not low <= value <= high:
        raise InvalidOption(f"{field} must be {low} … {high}{f' ({limit})' if limit else ''}, got {value}")
    return value


def preset_size(preset: dict, max_size: int) -> int | None:
    size = preset.get("size")
    return None if size is None else min(int(size), max_size)


def options(form: dict, presets: dict, max_size: int, max_steps: int, block: int = 2048, overlap: int = 32) -> dict:
    """The fit options from the form's text fields, each checked against its range. `block`: the block size
    (INR_FIT_BLOCK_SIZE), which a job's `block_size` may lower; `overlap` (INR_FIT_BLOCK_OVERLAP). `blocks`: `auto`
    (the worker fits one model when it can hold one, docs/fits.md) unless the job asks for blocks (`always`, or a
    `block_size` of its own)."""
    preset = form.get("preset") or DEFAULT_PRESET
    if preset not in presets:
        raise InvalidOption(f"preset {preset[:40]!r} is unknown; valid presets: {', '.join(presets)}")
    protocol = form.get("protocol") or "full"  # a user's photo: fit every pixel
    if protocol not in PROTOCOLS:
        raise InvalidOption(f"protocol {protocol[:40]!r} is unknown; valid: {', '.join(PROTOCOLS)}")
    blocks = (form.get("blocks") or "").strip().lower() or (
        "always" if form.get("block_size") and not form.get("size") else "auto"
    )
    if blocks not in BLOCKS:
        raise InvalidOption(f"blocks {form['blocks'][:40]!r} is unknown; valid: {', '.join(BLOCKS)}")
    if blocks == "always" and form.get("blocks") and form.get("size"):
        raise InvalidOption(
            "blocks=always fits the upload at its native size in blocks; a size cap fits it whole: drop one of them"
        )
    return {
        "preset": preset,
        # a cap on the longer side; the preset's by default (grid: None, the whole image at its native size,
        # which is within INR_MAX_UPLOAD_PIXELS); fitted whole, in its aspect, either way
        "size": as_int(form, "size", preset_size(presets[preset], max_size), MIN_SIZE, max_size, "INR_FIT_MAX_SIZE"),
        "steps": as_int(
            form, "steps", min(int(presets[preset]["steps"]), max_steps), 1, max_steps, "INR_FIT_MAX_STEPS"
        ),
        "protocol": protocol,
        "seed": as_int(form, "seed", 0, 0, MAX_SEED),
        "block": (size := as_int(form, "block_size", block, MIN_SIZE, block, "INR_FIT_BLOCK_SIZE")),
        "overlap": min(overlap, size // 4),
        "blocks": blocks,
        **targets(form, presets[preset], preset, blocks),
    }


def targets(form: dict, preset: dict, name: str, blocks: str) -> dict:
    """`target_bytes` or `target_psnr` (at most one), checked; only the keys given, so a job without a target keeps
    the record it had."""
    low, high = TARGET_BYTES
    target_bytes = as_int(form, "target_bytes", None, low, high)
    target_psnr = as_float(form, "target_psnr", 0.0, TARGET_PSNR)
    if target_bytes is not None and target_psnr is not None:
        raise InvalidOption("target_bytes and target_psnr: give one target, not both")
    if (target_bytes is not None or target_psnr is not None) and not preset.get("targets"):
        raise InvalidOption(f"preset {name!r} takes no target_bytes or target_psnr; the grid preset does")
    if target_bytes is not None and blocks == "always":
        raise InvalidOption("target_bytes is for one model; with blocks=always give target_psnr (each block meets it)")
    rd_lambda = as_float(form, "rd_lambda", 0.0, RD_LAMBDA[1])
    if rd_lambda is not None:
        if rd_lambda < RD_LAMBDA[0]:
            raise InvalidOption(f"rd_lambda must be in {RD_LAMBDA[0]:g} … {RD_LAMBDA[1]:g}, got {rd_lambda:g}")
        if target_bytes is not None or target_psnr is not None:
            raise InvalidOption("rd_lambda sets the quality itself: give it or a target_bytes or target_psnr, not both")
        if not preset.get("targets"):
            raise InvalidOption(f"preset {name!r} takes no rd_lambda; the grid preset does")
    given = (("target_bytes", target_bytes), ("target_psnr", target_psnr), ("rd_lambda", rd_lambda))
    return {k: v for k, v in given if v is not None}


def as_float(form: dict, field: str, above: float, high: float) -> float | None:
    """A number in (above, high], or None when the field is absent or empty."""
    raw = form.get(field)
    if raw is None or raw == "":
        return None
    try:
        value = float(raw.strip())
    except ValueError:
        raise InvalidOption(f"{field} must be a number, got {raw[:40]!r}") from None
    if not (above < value <= high):  # NaN and the infinities too
        raise InvalidOption(f"{field} must be more than {above:g} and at most {high:g}, got {raw.strip()[:40]}")
    return value


def check_cost(source: dict, size: int | None, max_pixels: int) -> None:
    """413 when a fit would fit more than `max_pixels` pixels: what a fit without credentials may cost a worker
    (INR_FIT_ANONYMOUS_MAX_PIXELS; docs/security.md, "Worker time"). `size` caps the longer side."""
    width, height = int(source["width"]), int(source["height"])
    scale = min(1.0, size / max(width, height)) if size else 1.0
    pixels = max(1, round(width * scale)) * max(1, round(height * scale))
    if pixels > max_pixels:
        raise TooLarge(
            f"a fit without credentials may fit at most {max_pixels} pixels (INR_FIT_ANONYMOUS_MAX_PIXELS); "
            f"'{source.get('filename', 'upload')}' is {width}×{height}: send a smaller size, or an API key or token"
        )


def as_bool(form: dict, field: str) -> bool:
    raw = (form.get(field) or "").strip().lower()
    if raw not in BOOLEANS:
        raise InvalidOption(f"{field} must be true or false, got {form[field][:40]!r}")
    return BOOLEANS[raw]


def check_name(name: str) -> str:
    """A target model name as the caller gave it: refused (422) unless it is a plain folder name."""
    shown = repr(name[:40] + ("…" if len(name) > 40 else ""))
    if "\x00" in name:
        raise InvalidOption(f"name {shown} contains a NUL character")
    if "/" in name or "\\" in name:
        raise InvalidOption(f"name {shown} contains a path separator; a model name is one folder name")
    if ".." in name:
        raise InvalidOption(f"name {shown} contains '..'")
    if len(name) > 64:
        raise InvalidOption(f"name is {len(name)} characters; the limit is 64")
    if not NAME_RE.match(name):
        raise InvalidOption(
            f"name {shown} must match {NAME_RE.pattern}: a letter or digit, then letters, digits, '_', '.' or '-'"
        )
    return name


def check_target(name: str, models: Repository) -> None:
    """409 when NAME is a model of another task (digits): a fit writes image models only. 503 when the repository
    (S3) does not answer."""
    try:
        folder = models.folder(name)
    except StorageUnavailable as e:
        raise RepositoryUnavailable(f"model '{name}': {e}") from None
    if folder is None:
        return
    try:
        task = read_spec(folder).task
    except SpecError:
        raise Conflict(f"model '{name}' exists but is not a readable image model; choose another name") from None
    if task != "image":
        raise Conflict(f"model '{name}' is a {task} model; a fit writes image models: choose another name")


def derive_name(filename: str, taken) -> str:
    """A model name from the file name (NAME_RE), made unique by -2, -3, … against `taken(name)`."""
    stem = Path(filename.replace("\\", "/")).name.rsplit(".", 1)[0] if filename else ""
    base = re.sub(r"\.{2,}", ".", NAME_CHARS.sub("-", stem))  # no `..` however many dots ran
    base = re.sub(r"^[^A-Za-z0-9]+", "", base)[:56].rstrip("-.") or "image"
    name, n = base, 1
    while taken(name):
        n += 1
        name = f"{base}-{n}"
    return name
