"""`grid` as a plug-in: the multiresolution grid (grid.py) with its start from the image's pyramid (grid_init.py),
instant-ngp's Adam, its 8-bit tables and native refit after training (grid_quant.py, grid_refit.py), its render
layout (grid_export.py) and in-memory storage (grid_store.py), the opset a hashed level needs, and its command-line
options `--grid-*`."""

from __future__ import annotations

import argparse

import numpy as np
from torch import nn

from ..errors import UsageError
from ..fp16 import round_weights_fp16
from .base import Encoding, Fitted
from .grid import HASH_OPSET, LIMITS, GridConfig, MultiresGrid, validate, validate_options
from .grid_code import code_tables
from .grid_export import DenseGridGraph, plan
from .grid_init import pyramid_init
from .grid_quant import round_tables_8bit, store_tables_8bit
from .grid_rate import Target, finish_rate
from .grid_rd import rd_finish
from .grid_refit import finish_native, refit_native
from .grid_store import pack_stored


class GridEncoding(Encoding):
    name = "grid"
    config = GridConfig

    def build(self, cfg: GridConfig) -> nn.Module:
        return MultiresGrid(cfg)

    def check_options(self, cfg: GridConfig) -> None:
        validate_options(cfg)

    def validate(self, cfg: GridConfig) -> None:
        validate(cfg)

    def initialise(self, cfg: GridConfig, model: nn.Module, image: np.ndarray, protocol: str) -> float | None:
        return pyramid_init(model, image, protocol)

    def optimizer_options(self, cfg: GridConfig) -> dict:
        # instant-ngp's Adam for grid tables (β2 0.99, ε 1e-15: rarely touched entries still move), fused: the
        # tables' millions of entries take 7× less time per step than torch's default (foreach) Adam on 2 CPU cores.
        return {"betas": (0.9, 0.99), "eps": 1e-15, "fused": True}

    def finish(self, cfg: GridConfig, model: nn.Module, fitted: Fitted) -> dict:
        """8-bit tables rounded (after float16: they are stored as uint8, their scales float32); a finest level on
        the native pixels then refitted to the training pixels through that rounding (grid_refit.py), and every
        level's steps chosen for the fit's byte or PSNR target, or the default (grid_rate.py)."""
        if cfg.rd_lambda:  # trained for rate instead of rounded for it (grid_rd.py)
            coords, targets = fitted.pixels()
            h, w = fitted.image.shape[:2]
            done = rd_finish(model, coords, targets, w, h, cfg.rd_lambda, cfg.rd_steps, cfg.seed)
            if fitted.fp16_weights:
                round_weights_fp16(model.body)
            return {"rd": done}
        originals = [t.detach().clone() for t in model.encoding.tables[:-1]] if cfg.table_bits == 8 else None
        if cfg.table_bits == 8:
            round_tables_8bit(model)
        if cfg.table_bits != 8 and not fitted.fp16_weights:
            return {}
        coords, targets = fitted.pixels()
        h, w = fitted.image.shape[:2]
        rate = None
        if cfg.table_bits == 8:  # the levels' steps by the target (grid_rate.py)
            target = Target(fitted.target_bytes, fitted.target_psnr, fitted.target_soft)

            def rate(bounds: tuple[float, float]) -> dict:
                again = lambda: refit_native(model, coords, targets, w, h, bounds=bounds)  # noqa: E731
                return finish_rate(
                    model, coords, targets, w, h, bounds, target, fitted.file_bytes, originals, again, cfg.table_code
                )

        refit = finish_native(model, coords, targets, w, h, cfg.table_bits, rate)
        if refit is None and (fitted.target_bytes is not None or fitted.target_psnr is not None):
            raise UsageError(f"a byte or PSNR target needs a native level; this {w}×{h} image's grid has none")
        return {"native_refit": refit} if refit else {}

    def check_target(self, cfg: GridConfig) -> None:
        """A byte or PSNR target needs 8-bit tables and a native level of one feature (grid_rate.py)."""
        if cfg.rd_lambda:
            raise UsageError("--grid-rd-lambda sets the quality itself: give it or a byte or PSNR target, not both")
        if cfg.table_bits != 8 or not cfg.finest_features or cfg.finest_features >= cfg.features:
            raise UsageError(
                "a byte or PSNR target needs the grid's 8-bit tables and a native level: --grid-table-bits 8 "
                "--grid-finest-features 1 (the grid preset)"
            )

    def opset(self, cfg: GridConfig, model: nn.Module) -> int:
        """A hashed level's BitwiseXor needs opset 18."""
        enc = getattr(model, "encoding", None)
        return HASH_OPSET if isinstance(enc, MultiresGrid) and enc.hashed else 0

    def export_plan(self, cfg: GridConfig, model: nn.Module, input_name: str) -> DenseGridGraph | None:
        return plan(model, input_name)

    def store(self, cfg: GridConfig, model: nn.Module, onnx_bytes: bytes) -> tuple[bytes, dict]:
        """8-bit (or float16) tables stored so, and packed and gathered so in memory (grid_store.py); 8-bit tables
        of a graph that cannot hold them so rebuilt in front of their users (grid_quant.py); the large 8-bit tables
        then entropy-coded in the file (grid_code.py)."""
        onnx_bytes, packed = pack_stored(onnx_bytes, model, cfg.table_bits)
        if cfg.table_bits != 8:
            return onnx_bytes, ({"tables": {"tables": "float16 storage", **packed}} if packed else {})
        onnx_bytes, tables = store_tables_8bit(onnx_bytes, model)
        code = "ans" if cfg.rd_lambda else cfg.table_code  # tables trained for the context code's rate are coded so
        onnx_bytes, coded = code_tables(onnx_bytes, code)  # entropy-coded, decoded at load (grid_code.py)
        return onnx_bytes, {"tables": {**tables, **packed, **coded}}

    def add_arguments(self, p: argparse.ArgumentParser, default_help) -> None:
        """Out of range, validate_options refuses them naming the range (grid.py)."""
        lim = LIMITS
        p.add_argument(
            "--grid-levels",
            type=int,
            default=8,
            help=f"grid: levels L, {range_text(lim['levels'])} (default: %(default)s)",
        )
        p.add_argument(
            "--grid-features",
            type=int,
            default=2,
            help=f"grid: features per level F, {range_text(lim['features'])} (default: %(default)s)",
        )
        p.add_argument(
            "--grid-finest-features",
            type=int,
            default=0,
            help=f"grid: features of the finest level, {range_text(lim['finest_features'])}; 0 = F "
            "(default). Fewer than F (1: the luma) puts the finest level on the native pixels and the "
            "others below it within --grid-bytes-per-pixel (encodings/grid.py)",
        )
        p.add_argument(
            "--grid-log2-table",
            type=int,
            default=0,
            help=f"grid: a level of more than 2^T cells is hashed into 2^T entries, T in "
            f"{range_text(lim['log2_table'])}; 0 = the largest T within --grid-bytes-per-pixel "
            "(default)",
        )
        p.add_argument(
            "--grid-base",
            type=int,
            default=16,
            help=f"grid: cells of the coarsest level along the longer "
            f"side, {range_text(lim['base'])} (default: %(default)s)",
        )
        p.add_argument(
            "--grid-finest",
            type=int,
            default=0,
            help=f"grid: cells of the finest level along the longer "
            f"side, {range_text(lim['finest'])}; 0 = the fitted image's pixels (default)",
        )
        p.add_argument(
            "--grid-table-bits",
            type=int,
            default=16,
            help="grid: bits per table entry in the model file, 16 (float16; with --fp16-weights) or 8 "
            "(uint8 with a scale per level and feature: twice the cells in the same bytes); "
            "out of range, refused (default: %(default)s)",
        )
        p.add_argument(
            "--grid-table-code",
            default="rice",
            help="grid: how 8-bit tables are entropy-coded in the file: rice (an adaptive Rice code the graph "
            "decodes: any onnxruntime, Triton's included, loads the file) or ans (a context model and an ANS coder, "
            "modelrepo/ctxcode.py: 4 %% to 40 %% smaller, decoded by this service at load; `python -m modelrepo "
            "decode` copies such a model for another server) (default: %(default)s)",
        )
        p.add_argument(
            "--grid-rd-lambda",
            type=float,
            default=0.0,
            help="grid: the quality as a rate–distortion trade-off λ (squared error per bit per pixel; on a "
            "validation photo 1e-4 gave 45 dB, 1e-3 40 dB, 1e-2 32 dB), in "
            f"{range_text(lim['rd_lambda'])}: the tables and the MLP trained further on error + λ·rate "
            "(encodings/grid_rd.py) instead of rounded for a target; 0 = off (default: %(default)s)",
        )
        p.add_argument(
            "--grid-rd-steps",
            type=int,
            default=300,
            help=f"grid: steps of that training, {range_text(lim['rd_steps'])} (default: %(default)s)",
        )
        p.add_argument(
            "--grid-bytes-per-pixel",
            type=float,
            default=1.45,
            help="grid: float16 bytes of tables per fitted pixel that the derived table size keeps to "
            "(default: %(default)s)",
        )

    def from_args(self, args: argparse.Namespace, image_size: tuple[int, int]) -> GridConfig:
        return GridConfig(
            levels=args.grid_levels,
            features=args.grid_features,
            finest_features=args.grid_finest_features,
            log2_table=args.grid_log2_table,
            base=args.grid_base,
            finest=args.grid_finest,
            bytes_per_pixel=args.grid_bytes_per_pixel,
            table_bits=args.grid_table_bits,
            table_code=args.grid_table_code,
            rd_lambda=args.grid_rd_lambda,
            rd_steps=args.grid_rd_steps,
            seed=args.seed,
            image_size=list(image_size),
        )


def range_text(lo_hi: tuple) -> str:
    return f"{lo_hi[0]:g}..{lo_hi[1]:g}"
