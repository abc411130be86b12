"""The benchmark suite (`python -m bench`): its scenarios as data, each a harness module of one family, its
arguments, how it takes other checkouts (--baseline) and rounds, and the family and docs section it belongs to.
A scenario's name is its docs section's; `python -m bench list` prints them.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Scenario:
    name: str
    family: str
    module: str  # run as `python -m bench.MODULE *args`
    args: tuple[str, ...] = ()
    baseline: str = ""  # "dirs": repeatable --baseline DIR; "dir": one; "": none
    rounds: bool = True  # whether the harness takes --rounds N
    needs: tuple[str, ...] = field(default=())  # programs it needs on PATH

    @property
    def max_baselines(self) -> int:
        return {"dirs": 8, "dir": 1}.get(self.baseline, 0)


FAMILIES = {
    "serving": "this service against the peers and its own earlier commits: req/s and CPU per request",
    "tiles": "renders and tiles against the classic image server and the model alone",
    "fits": "fits: time, quality and memory",
    "collections": "many models in one replica under a memory budget",
    "bytes": "model bytes against the image codecs",
    "giants": "giant images: uploads, block fits, serving",
    "digits": "the digit classifiers: accuracy, calibration, speed",
}

_S = Scenario
SCENARIOS = {
    s.name: s
    for s in (
        # serving
        _S("peers", "serving", "peers", ("peers",), baseline="dirs", needs=("wrk",)),
        _S("peers-large", "serving", "peers", ("peers-large",), baseline="dirs", needs=("wrk",)),
        _S("floor", "serving", "latency", ("floor",), baseline="dir", needs=("wrk",)),
        _S("json_path", "serving", "latency", ("json_path",), baseline="dir", needs=("wrk",)),
        _S("grpc_http", "serving", "rpc", ("grpc_http",), baseline="dir"),
        _S("grpc_profile", "serving", "rpc", ("grpc_profile",), rounds=False),
        _S("grpc_ours", "serving", "rpc", ("grpc_ours",), rounds=False),
        _S("inline_stall", "serving", "latency", ("inline_stall",), needs=("wrk",)),
        _S("warmup", "serving", "latency", ("warmup",)),
        _S("serving", "serving", "peers", ("serving",), needs=("wrk",)),
        _S("span_cost", "serving", "observe", ("span_cost",)),
        _S("gc_cost", "serving", "observe", ("gc_cost",), baseline="dir", rounds=False, needs=("wrk",)),
        _S("trace_cost", "serving", "observe", ("trace_cost",), baseline="dir", needs=("wrk",)),
        _S("soak", "serving", "observe", ("soak",), rounds=False, needs=("wrk",)),
        _S("stale_address", "serving", "latency", ("stale_address",)),
        _S("flame", "serving", "observe", ("flame",), baseline="dir", rounds=False, needs=("wrk",)),
        # tiles
        _S("classic", "tiles", "tiles", ("classic",), baseline="dir", needs=("wrk", "nginx")),
        _S("roofline", "tiles", "kernels", ("roofline",), rounds=False),
        _S("separable", "tiles", "kernels", ("separable",)),
        _S("render_cost", "tiles", "kernels", ("render_cost",)),
        _S("fairness", "tiles", "tiles", ("fairness",), rounds=False),
        _S("flood", "tiles", "tiles", ("flood",), baseline="dir", rounds=False),
        _S("grid_render", "tiles", "kernels", ("grid_render",)),
        _S("tile_cost", "tiles", "tiles", ("tile_cost",)),
        _S("viewer_sharp", "tiles", "tiles", ("viewer_sharp",)),
        # fits
        _S("fits", "fits", "fits", ("fits",)),
        _S("fourier_table", "fits", "fits", ("fourier_table",), rounds=False),
        _S("time_to_quality", "fits", "fits", ("time_to_quality",)),
        _S("sinekan_speed", "fits", "fits", ("sinekan_speed",), rounds=False),
        _S("native_fit", "fits", "native", ("native_fit",), rounds=False),
        _S("native_refit", "fits", "native", ("native_refit",), rounds=False),
        _S("native_steps", "fits", "native", ("native_steps",), rounds=False),
        _S("native_ceiling", "fits", "native", ("native_ceiling",), rounds=False),
        # collections
        _S("collection_warm", "collections", "collections", ("collection_warm",), baseline="dirs"),
        _S("large_runs", "collections", "collections", ("large_runs",)),
        _S("s3_shards", "collections", "s3", ("s3_shards",)),
        _S("collection", "collections", "collections", ("collection",)),
        _S("collection-cold", "collections", "collections", ("collection-cold",)),
        _S("collection_resident", "collections", "collections", ("collection_resident",), baseline="dirs"),
        _S("s3_models", "collections", "s3", ("first-tile",), rounds=False),
        # bytes
        _S("model_bytes", "bytes", "codecs", ("model_bytes",), rounds=False),
        _S("rd", "bytes", "codecs", ("rd",), rounds=False),
        _S("ctxcode_decode", "bytes", "codecs", ("ctxcode_decode",), baseline="dir", rounds=False),
        # giants
        _S("bigimage", "giants", "giants", ("bigimage",)),
        _S("giant_http", "giants", "giants", ("http",), rounds=False),
        _S("blocks", "giants", "giants", ("compare",)),
        _S("blocks-memory", "giants", "giants", ("memory",), rounds=False),
        _S("giant", "giants", "giants", ("serve",), rounds=False),
        _S("giant_block", "giants", "giants", ("block",), rounds=False),
        # digits
        _S("digits_official", "digits", "digits", ("official",), rounds=False),
        _S("digits_threshold", "digits", "digits", ("threshold",), rounds=False),
        _S("digits_redrawn", "digits", "digits", ("redrawn",), rounds=False),
        _S("digits_ensembles", "digits", "digits", ("ensembles",), rounds=False),
        _S("digits_ablation", "digits", "digits", ("ablation",), rounds=False),
        _S("digits_paper", "digits", "digits", ("paper", "report"), rounds=False),
    )
}
