"""One copy of a dense grid model's tables in memory, read by onnxruntime and by the lattice alike.

A dense grid's graph (training/encodings/grid_export.py) packs each run of levels into "corner cells" when its
session is made: onnxruntime's constant folding turns the stored [F, ry, rx] tables into one [cells, 4F] table per
run (each cell the 4 corners of a bilinear square, edge-padded), which its Gather reads. The lattice
(service/engine/lattice.py) read the stored tables, a second copy of the same values (a quarter of the packed bytes
again: 5.7 of a 4 MP model's 40 MiB, and the residency's count per model 1.24× what it was before the lattice,
docs/benchmarks.md, collection).

Here the service packs the corners itself, in the graph's layout and dtype, and gives them to a CPU session as
initializers it owns (`SessionOptions.add_initializer`: onnxruntime reads the caller's buffer, no copy), the graph
rewritten without its packing nodes. The lattice reads the same buffer: a level's table T[f, y, x] is corner 0 of
padded cell (y + 1, x + 1), a strided view. Folding the packing also was most of a photo model's first load
(docs/benchmarks.md, collection); numpy packs it in a fraction of that, so these sessions skip the session cache.

Only 8-bit and float32 tables are shared (the lattice reads those as stored); a float16 table, a graph of another
layout or one whose packing is not the exporter's keeps the plain session. A CUDA session never shares: its
initializers live on the device.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from modelrepo.graphnames import GATHER, LEVEL_NODE, PACKED
from modelrepo.onnxfile import FLOAT, UINT8, tensor

from .lattice_graph import GridLevel

STORED = {UINT8: np.uint8, FLOAT: np.float32}  # the tables shared, by their stored type


@dataclass(frozen=True)
class SharedTables:
    """A model's graph with each run's packed corners an initializer of the service's (`corners`), and the lattice's
    levels as views of them."""

    graph: bytes
    corners: dict  # name → [cells, 4F] read-only array, in the graph's layout and stored dtype
    levels: tuple  # GridLevel per level, its table a view into `corners`

    def add_to(self, options) -> list:
        """Give the corners to a session's options; the OrtValues returned must live as long as the session."""
        import onnxruntime as ort

        values = []
        for name, array in self.corners.items():
            value = ort.OrtValue.ortvalue_from_numpy(array)
            options.add_initializer(name, value)
            values.append(value)
        return values

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.corners.values())


def pack(table: np.ndarray, out: np.ndarray) -> np.ndarray:
    """A level's table [F, ry, rx] as the graph packs it into `out` [(ry+1)(rx+1), 4F]: cell (i, j) holds P(i, j),
    P(i, j+1), P(i+1, j), P(i+1, j+1), each F values, where P is the table edge-padded by one cell (P(i, j) =
    T[:, clamp(i − 1), clamp(j − 1)]). Returns the table's view in `out`, [F, ry, rx]."""
    f, ry, rx = table.shape
    padded = np.empty((ry + 2, rx + 2, f), table.dtype)
    padded[1:-1, 1:-1] = table.transpose(1, 2, 0)
    padded[0], padded[-1] = padded[1], padded[-2]
    padded[:, 0], padded[:, -1] = padded[:, 1], padded[:, -2]
    cells = out.reshape(ry + 1, rx + 1, 4, f)
    p, c, width = padded, cells, f * table.itemsize
    if width in (1, 2, 4, 8):  # each cell's F values as one item: the copies move whole corners, not single values
        p, c = padded.view(f"u{width}")[..., 0], cells.view(f"u{width}")[..., 0]
    c[:, :, 0], c[:, :, 1], c[:, :, 2], c[:, :, 3] = p[:-1, :-1], p[:-1, 1:], p[1:, :-1], p[1:, 1:]
    return cells[1:, 1:, 0].transpose(2, 0, 1)


def share(model, levels: list[GridLevel]) -> SharedTables | None:
    """`model` (a ModelProto in the dense grid layout, its tables decoded; changed in place) rewritten to read each
    run's packed corners from an initializer the service owns, and the lattice's `levels` (read_lattice's, of the same
    graph) as views of those corners; None where the graph is not packed as the exporter packs it or a table is
    stored in another type."""
    graph = model.graph
    producers = {out: n for n in graph.node for out in n.output}
    inits = {i.name: i for i in graph.initializer}
    stored = {}
    for n in graph.node:
        m = LEVEL_NODE.match(n.name)
        if m:
            init = inits.get(n.input[0])
            if init is None or init.data_type not in STORED:
                return None
            stored[int(m.group(1))] = (np.dtype(STORED[init.data_type]), tuple(init.dims))
    if sorted(stored) != list(range(len(levels))):
        return None
    for k, lv in enumerate(levels):  # the lattice's levels are this graph's tables: [1, F, ry, rx] as stored
        if stored[k] != (lv.table.dtype, (1, *lv.table.shape)):
            return None
    corners, views, covered, dropped = {}, {}, [], set()
    for gather in [n for n in graph.node if GATHER.match(n.name)]:
        name = gather.input[0]
        concat = producers.get(name)
        if name in corners or concat is None or concat.op_type != "Concat":
            return None
        run = []
        for part in concat.input:
            m = PACKED.match(part)
            if m is None or producers.get(part) is None or int(m.group(1)) >= len(levels):
                return None
            run.append(int(m.group(1)))
        dtypes = {stored[k][0] for k in run}
        features = {levels[k].features for k in run}
        if len(dtypes) != 1 or len(features) != 1:
            return None
        dtype, f = dtypes.pop(), features.pop()
        cells = sum((lv.size[0] + 1) * (lv.size[1] + 1) for lv in (levels[k] for k in run))
        out = np.empty((cells, 4 * f), dtype)
        at = 0
        for k in run:
            lv = levels[k]
            n = (lv.size[0] + 1) * (lv.size[1] + 1)
            table = pack(lv.table, out[at : at + n])
            table.flags.writeable = False  # read by sessions and tiles on many threads
            views[k] = GridLevel(table, lv.scale, lv.low)
            at += n
        out.flags.writeable = False
        corners[name] = out
        covered += run
        dropped.add(id(concat))
    if not corners or sorted(covered) != list(range(len(levels))):
        return None
    # the graph: each corners tensor an initializer (a placeholder of one cell: the session reads the service's
    # array in its place), and only what the outputs still need
    nodes = [n for n in graph.node if id(n) not in dropped]
    placeholders = [tensor(name, np.zeros((1, a.shape[1]), a.dtype)) for name, a in corners.items()]
    _prune(graph, nodes, placeholders)
    return SharedTables(model.SerializeToString(), corners, tuple(views[k] for k in range(len(levels))))


def _prune(graph, nodes: list, extra: list) -> None:
    """Keep the nodes the graph's outputs need (of `nodes`) and the initializers they read, plus `extra`."""
    producers = {out: n for n in nodes for out in n.output}
    need, todo, keep = set(), [o.name for o in graph.output], set()
    while todo:
        t = todo.pop()
        if t in need:
            continue
        need.add(t)
        n = producers.get(t)
        if n is not None and id(n) not in keep:
            keep.add(id(n))
            todo.extend(i for i in n.input if i)
    kept_inits = [i for i in graph.initializer if i.name in need]
    del graph.node[:]
    graph.node.extend(n for n in nodes if id(n) in keep)
    del graph.initializer[:]
    graph.initializer.extend(kept_inits + extra)
    kept_info = [v for v in graph.value_info if v.name in need]
    del graph.value_info[:]
    graph.value_info.extend(kept_info)
