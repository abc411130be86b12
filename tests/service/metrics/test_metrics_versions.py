"""Triton's per-model counters are kept per (model, version): a swap starts the new version at zero and
leaves the old version's series as it was."""

from types import SimpleNamespace

from service.metrics import Metrics


def serving(version: int) -> dict:
    return {"digits": SimpleNamespace(status="ready", serving=SimpleNamespace(version=version))}


def series(text: str, name: str) -> dict[str, str]:
    """version label → value of one family's `digits` rows."""
    rows = [line for line in text.splitlines() if line.startswith(name + "{") and 'model="digits"' in line]
    return {line.split('version="')[1].split('"')[0]: line.rsplit(" ", 1)[1] for line in rows}


def test_each_version_counts_its_own_series_across_a_swap():
    m = Metrics()
    m.set_models(serving(1))
    m.execution("digits", rows=3, requests=1, compute_seconds=0.001, version=1)
    m.request("digits", "/v2/models/{name}/infer", "POST", 200, 0.002)
    m.set_models(serving(2))  # the registry swapped version 2 in
    m.execution("digits", rows=5, requests=2, compute_seconds=0.001, version=2)
    m.execution("digits", rows=1, requests=1, compute_seconds=0.001, version=1)  # a request queued before the swap
    m.request("digits", "/v2/models/{name}/infer", "POST", 200, 0.002)
    m.request("digits", "/v2/models/{name}/versions/{version}/infer", "POST", 200, 0.002, "1")
    m.request("digits", "/v2/models/{name}/versions/{version}/infer", "POST", 400, 0.002, "7")  # never ran
    text = m.triton_text()
    assert series(text, "nv_inference_count") == {"1": "4", "2": "5"}
    assert series(text, "nv_inference_exec_count") == {"1": "2", "2": "1"}
    assert series(text, "nv_inference_request_success") == {"1": "2", "2": "1"}
    assert series(text, "nv_inference_request_failure") == {"1": "0", "2": "1"}
    one, two = m.stats_json("digits", "1"), m.stats_json("digits", "2")
    assert (one["version"], one["inference_count"], one["execution_count"]) == ("1", 4, 2)
    assert (two["version"], two["inference_count"], two["execution_count"]) == ("2", 5, 1)
    assert two["inference_stats"]["success"]["count"] == 1 and two["inference_stats"]["fail"]["count"] == 1
    assert m.stats_json("digits", "3")["inference_count"] == 0
