"""The names in a grid model's graph that the service reads (service/engine/lattice_graph.py, shared_tables.py) and
the exporter writes (training/encodings/grid_export.py): the one place both take them from, so that the export's
compaction (training/compact.py), which shortens every other name, keeps them."""

from __future__ import annotations

import re

from .tablecode import PREFIX as DECODING  # the Rice decoding nodes' tensors, which a load drops by this prefix

FEATURES = "grid_features"  # the head's input: the features of every level, coarsest first
RGB = "rgb"  # an image model's output
LEVEL_NODE = re.compile(r"^grid/l(\d+)/fyx\Z")  # a node whose first input is a level's table
GATHER = re.compile(r"^grid/(r\d+/)?corner_values\Z")  # a run's Gather of its packed corners
PACKED = re.compile(r"^grid/l(\d+)/packed\Z")  # a level's packed corners, [(ry+1)(rx+1), 4F]
TABLES = "encoding.tables."  # the levels' tables and their `__u8`, `__scale`, `__low`, `__fp16` forms


def read_by_name(name: str, *, node: bool) -> bool:
    """Whether the service finds this node (node=True) or tensor by its name."""
    if node:
        return bool(LEVEL_NODE.match(name) or GATHER.match(name))
    return name in (FEATURES, RGB) or name.startswith((TABLES, DECODING)) or bool(PACKED.match(name))
