"""Giant images (up to a gigapixel and more) read a region at a time, in bounded memory (issue 38).

    header.py   probe(path) -> Header, from the file's header only; check_pixels, the decompression-bomb guard
    read.py     read_region, read_scaled, strips, to_tiled: 8-bit RGB numpy arrays, decoded through libvips
    errors.py   BigImageError (one line naming the file and the problem), TooManyPixels

JPEG, PNG and TIFF (BigTIFF, tiled or in strips, pyramidal as pages or as SubIFDs), 8 or 16 bits per sample,
through libvips (pyvips, with the libvips that pyvips-binary bundles): a TIFF region decodes only the tiles or
strips it covers; a JPEG or PNG is decoded top to bottom once (sequential access), keeping a few rows in
memory, never the whole image, unless the file itself forbids that (progressive JPEG, interlaced PNG:
`Header.interlaced`). Pixels never pass through floating point except a tile at a time inside libvips.

The 8-bit RGB every reader returns is the one the fit uploads get (service/fits/upload.py): grey repeated
into three bands; 16-bit scaled by 255/65535 and rounded; alpha composited over white; CMYK converted by
libvips (its built-in profile unless the file has one). EXIF orientation is reported, not applied: every
coordinate is the stored image's.

Imports nothing of ours (tests/test_layout.py); no torch.
"""

from __future__ import annotations

from .errors import BigImageError, TooManyPixels
from .header import FORMATS, Header, check_pixels, probe
from .read import read_region, read_scaled, strips, to_tiled

__all__ = [
    "FORMATS",
    "BigImageError",
    "Header",
    "TooManyPixels",
    "check_pixels",
    "probe",
    "read_region",
    "read_scaled",
    "strips",
    "to_tiled",
]
