"""IDX files (the MNIST format), gzip or raw, and the datasets stored in them.

An IDX file is a 4-byte magic `00 00 TT NN` (TT the element type, NN the number of
dimensions), NN big-endian uint32 sizes, then the data in C order. MNIST and
Fashion-MNIST ship four files each:

    train-images-idx3-ubyte[.gz]   uint8 [N, 28, 28]
    train-labels-idx1-ubyte[.gz]   uint8 [N]
    t10k-images-idx3-ubyte[.gz]    uint8 [M, 28, 28]
    t10k-labels-idx1-ubyte[.gz]    uint8 [M]

`--download` fetches them from the standard public mirrors and checks their MD5s.
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import struct
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from modelrepo import portable

from ..errors import UsageError, unknown

log = logging.getLogger(__name__)

IDX_TYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
SPLITS = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
IMAGE_SHAPE = (28, 28)
NUM_CLASSES = 10
DOWNLOAD_TIMEOUT_S = 30


@dataclass(frozen=True)
class Source:
    """Where a dataset's four .gz files live and their published MD5 checksums."""

    mirrors: tuple[str, ...]
    md5: dict


SOURCES = {
    "mnist": Source(
        mirrors=(
            "https://ossci-datasets.s3.amazonaws.com/mnist/",
            "https://storage.googleapis.com/cvdf-datasets/mnist/",
            "http://yann.lecun.com/exdb/mnist/",
        ),
        md5={
            "train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
            "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
            "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
            "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c",
        },
    ),
    "fashion-mnist": Source(
        mirrors=(
            "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
            "https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/master/data/fashion/",
        ),
        md5={
            "train-images-idx3-ubyte.gz": "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
            "train-labels-idx1-ubyte.gz": "25c81989df183df01b3e8a0aad5dffbe",
            "t10k-images-idx3-ubyte.gz": "bef4ecab320f06d8554ea6380940ec79",
            "t10k-labels-idx1-ubyte.gz": "bb300cfdad3c16e7a12a480ee83cd310",
        },
    ),
}
CLASS_NAMES = {
    "mnist": [str(d) for d in range(10)],
    "fashion-mnist": [
        "T-shirt/top",
        "Trouser",
        "Pullover",
        "Dress",
        "Coat",
        "Sandal",
        "Shirt",
        "Sneaker",
        "Bag",
        "Ankle boot",
    ],
}


def parse_idx(data: bytes, name: str = "IDX data") -> np.ndarray:
    """Decode the bytes of one IDX file; raise UsageError naming the file if malformed."""
    if len(data) < 4:
        raise UsageError(f"{name}: truncated IDX file ({len(data)} bytes, no header)")
    zero, type_code, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or type_code not in IDX_TYPES or ndim == 0:
        raise UsageError(f"{name}: not an IDX file (magic {data[:4].hex()}, expected 0000TTNN)")
    header = 4 + 4 * ndim
    if len(data) < header:
        raise UsageError(f"{name}: truncated IDX file (header needs {header} bytes, got {len(data)})")
    shape = struct.unpack(f">{ndim}I", data[4:header])
    dtype = np.dtype(IDX_TYPES[type_code])
    need = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    got = len(data) - header
    if got < need:
        raise UsageError(f"{name}: truncated IDX file (shape {list(shape)} needs {need} data bytes, got {got})")
    if got > need:
        raise UsageError(f"{name}: IDX file has {got - need} bytes after its data")
    return (
        np.frombuffer(data, dtype, count=need // dtype.itemsize, offset=header)
        .reshape(shape)
        .astype(dtype.newbyteorder("="))
    )


def encode_idx(array: np.ndarray) -> bytes:
    """The IDX bytes of `array` (the inverse of parse_idx)."""
    array = np.asarray(array)
    codes = {np.dtype(v).newbyteorder("="): k for k, v in IDX_TYPES.items()}
    if array.dtype not in codes or array.ndim == 0:
        raise ValueError(f"cannot store {array.dtype} {array.shape} as IDX")
    header = struct.pack(f">HBB{array.ndim}I", 0, codes[array.dtype], array.ndim, *array.shape)
    return header + array.astype(array.dtype.newbyteorder(">")).tobytes()


def write_idx(path: str | Path, array: np.ndarray) -> None:
    """Write `array` as an IDX file, gzip-compressed when the name ends in .gz."""
    data = encode_idx(array)
    Path(path).write_bytes(gzip.compress(data) if str(path).endswith(".gz") else data)


def read_idx(path: str | Path) -> np.ndarray:
    """Read an IDX file, gzip-compressed (by content, not by name) or raw."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror or e}") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, gzip.BadGzipFile) as e:
            raise UsageError(f"{path}: damaged gzip stream ({e})") from None
    return parse_idx(raw, str(path))


def find_file(data_dir: Path, stem: str) -> Path | None:
    for cand in (data_dir / f"{stem}.gz", data_dir / stem):
        if cand.is_file():
            return cand
    return None


def expected_files() -> list[str]:
    return [f"{stem}[.gz]" for pair in SPLITS.values() for stem in pair]


@dataclass
class Split:
    images: np.ndarray  # uint8 [N, 28, 28], white on black
    labels: np.ndarray  # int64 [N], 0..9


@dataclass
class DigitData:
    name: str
    directory: str
    train: Split
    test: Split

    def describe(self) -> dict:
        return {
            "name": self.name,
            "directory": portable(self.directory),
            "train_size": len(self.train.labels),
            "test_size": len(self.test.labels),
        }


def load_split(data_dir: Path, split: str) -> Split:
    img_stem, lbl_stem = SPLITS[split]
    img_path, lbl_path = find_file(data_dir, img_stem), find_file(data_dir, lbl_stem)
    images, labels = read_idx(img_path), read_idx(lbl_path)
    if images.ndim != 3 or images.shape[1:] != IMAGE_SHAPE or images.dtype != np.uint8:
        raise UsageError(f"{img_path}: expected uint8 images [N, 28, 28], got {images.dtype} {list(images.shape)}")
    if labels.ndim != 1 or labels.dtype != np.uint8:
        raise UsageError(f"{lbl_path}: expected uint8 labels [N], got {labels.dtype} {list(labels.shape)}")
    if len(images) != len(labels):
        raise UsageError(
            f"{split} split: {img_path.name} has {len(images)} images but {lbl_path.name} has {len(labels)} labels"
        )
    if len(labels) == 0:
        raise UsageError(f"{split} split in {data_dir} is empty")
    if labels.max() >= NUM_CLASSES:
        raise UsageError(f"{lbl_path}: label {int(labels.max())} outside 0..{NUM_CLASSES - 1}")
    return Split(images=images, labels=labels.astype(np.int64))


def load_dataset(data_dir: str | Path, dataset: str = "mnist", download: bool = False) -> DigitData:
    """Read the four IDX files from `data_dir`; with `download`, fetch missing ones first."""
    if dataset not in SOURCES:
        raise unknown("dataset", dataset, SOURCES)
    data_dir = Path(data_dir)
    missing = [stem for pair in SPLITS.values() for stem in pair if find_file(data_dir, stem) is None]
    if missing and download:
        download_dataset(dataset, data_dir)
        missing = []
    if missing:
        where = "does not exist" if not data_dir.is_dir() else f"lacks {', '.join(m + '[.gz]' for m in missing)}"
        raise UsageError(
            f"data directory '{data_dir}' {where}; expected IDX files "
            f"{', '.join(expected_files())} (or pass --download)"
        )
    return DigitData(
        name=dataset, directory=str(data_dir), train=load_split(data_dir, "train"), test=load_split(data_dir, "test")
    )


def md5_bytes(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as r:  # noqa: S310 - fixed https/http mirrors
        return r.read()


def download_dataset(dataset: str, data_dir: Path, source: Source | None = None) -> None:
    """Fetch each missing .gz file from the first mirror that serves it with the right MD5.

    Files land under a temporary name and are renamed only once verified. All four
    files are fetched before any is moved into place, so a failure leaves nothing new.
    """
    source = source or SOURCES[dataset]
    got: dict[str, bytes] = {}
    for fname, md5 in source.md5.items():
        if find_file(data_dir, fname.removesuffix(".gz")) is not None:
            continue
        problems = []
        for mirror in source.mirrors:
            try:
                blob = fetch(mirror + fname)
            except (urllib.error.URLError, OSError, ValueError) as e:
                problems.append(f"{mirror}: {getattr(e, 'reason', e)}")
                continue
            if md5_bytes(blob) != md5:
                problems.append(f"{mirror}: checksum mismatch (md5 {md5_bytes(blob)}, expected {md5})")
                continue
            got[fname] = blob
            break
        else:
            raise UsageError(
                f"--download could not fetch {dataset} file {fname} from any mirror ({'; '.join(problems)})"
            )
    data_dir.mkdir(parents=True, exist_ok=True)
    for fname, blob in got.items():
        with tempfile.NamedTemporaryFile(dir=data_dir, prefix=f".{fname}.", delete=False) as f:
            f.write(blob)
        Path(f.name).rename(data_dir / fname)
        log.info("downloaded %s to %s", fname, data_dir)
