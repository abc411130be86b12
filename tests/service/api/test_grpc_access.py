"""Model access over gRPC (docs/access.md): tritonclient.grpc against the real server of
tests/service/server/test_model_access.py. Every RPC that names a restricted model is UNAUTHENTICATED without a
token and PERMISSION_DENIED with one that lacks the scope; the index and the statistics hide it; the stream answers
each request on its own."""

from __future__ import annotations

import queue

import numpy as np
import pytest
import tritonclient.grpc as tg
from tritonclient.utils import InferenceServerException

from tests.service.server.test_model_access import repo, srv, token  # noqa: F401 (fixtures)

COORDS = np.array([[0.5, 0.5]], np.float32)


@pytest.fixture(scope="module")
def gc(srv):  # noqa: F811
    c = tg.InferenceServerClient(srv.grpc_url)
    yield c
    c.close()


def infer(gc, name: str, headers=None):
    x = tg.InferInput("coords", list(COORDS.shape), "FP32")
    x.set_data_from_numpy(COORDS)
    return gc.infer(name, [x], headers=headers)


CALLS = {
    "ModelInfer": lambda gc, h: infer(gc, "secret", h),
    "ModelMetadata": lambda gc, h: gc.get_model_metadata("secret", headers=h),
    "ModelConfig": lambda gc, h: gc.get_model_config("secret", headers=h),
    "ModelReady": lambda gc, h: gc.is_model_ready("secret", headers=h),
    "ModelStatistics": lambda gc, h: gc.get_inference_statistics("secret", headers=h),
    "RepositoryModelLoad": lambda gc, h: gc.load_model("secret", headers=h),
}


@pytest.mark.parametrize("rpc", CALLS)
def test_every_rpc_that_names_a_restricted_model_refuses_it(gc, rpc):
    for headers, code in (
        (None, "StatusCode.UNAUTHENTICATED"),
        ({"authorization": f"Bearer {token(('other',))}"}, "StatusCode.PERMISSION_DENIED"),
        ({"authorization": "Bearer not-a-token"}, "StatusCode.UNAUTHENTICATED"),
    ):
        with pytest.raises(InferenceServerException) as e:
            CALLS[rpc](gc, headers)
        assert e.value.status() == code, (rpc, e.value)
    CALLS[rpc](gc, {"authorization": f"Bearer {token()}"})  # with the scope: answered


def test_the_index_and_statistics_hide_it(gc):
    names = {m.name for m in gc.get_model_repository_index().models}
    assert "open" in names and "secret" not in names
    staff = {"authorization": f"Bearer {token()}"}
    assert "secret" in {m.name for m in gc.get_model_repository_index(headers=staff).models}
    assert "secret" not in str(gc.get_inference_statistics())
    assert "secret" in str(gc.get_inference_statistics(headers=staff))


def test_the_stream_answers_each_request_on_its_own(srv):  # noqa: F811
    results: queue.Queue = queue.Queue()
    c = tg.InferenceServerClient(srv.grpc_url)
    c.start_stream(lambda result, error: results.put((result, error)))
    try:
        for name in ("secret", "open"):
            x = tg.InferInput("coords", list(COORDS.shape), "FP32")
            x.set_data_from_numpy(COORDS)
            c.async_stream_infer(name, [x])
        (_, refused), (answered, error) = results.get(timeout=30), results.get(timeout=30)
        assert refused is not None and "restricted" in str(refused)
        assert error is None and answered.as_numpy("rgb").shape == (1, 3)
    finally:
        c.stop_stream()
        c.close()
