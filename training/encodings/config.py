"""The config every encoding is built from; its home is encodings/base.py (kept here for older imports)."""

from __future__ import annotations

from .base import EncodingConfig

__all__ = ["EncodingConfig"]
