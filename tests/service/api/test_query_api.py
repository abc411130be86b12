"""POST /v1/models/{name}/query: the model's colours, through transforms, and every bad input."""

import numpy as np
import onnxruntime as ort
import pytest


@pytest.fixture(scope="module")
def reference(model_repo):
    """The image model run directly by onnxruntime, clipped as the service clips."""
    sess = ort.InferenceSession(str(model_repo / "astronaut" / "1" / "model.onnx"))
    return lambda pts: np.clip(sess.run(["rgb"], {"coords": np.asarray(pts, np.float32)})[0], 0, 1)


def query(client, **body):
    r = client.post("/v1/models/astronaut/query", json=body)
    assert r.status_code == 200, r.text
    return np.array(r.json()["rgb"])


COORDS = np.random.default_rng(1).random((300, 2)).tolist()


def test_query_returns_the_model_colour_at_each_coordinate(client, reference):
    rgb = query(client, coords=COORDS)
    assert rgb.shape == (300, 3) and np.abs(rgb - reference(COORDS)).max() < 1e-5


def test_identity_transform_changes_nothing(client):
    plain = query(client, coords=COORDS)
    assert np.array_equal(query(client, coords=COORDS, transform={"rotate": 0, "scale": 1, "translate": [0, 0]}), plain)
    assert np.array_equal(query(client, coords=COORDS, transform={"matrix": [[1, 0, 0], [0, 1, 0]]}), plain)


def test_transform_samples_the_model_at_inverse_mapped_coordinates(client, reference):
    # image rotated 90° CCW about the centre: the colour now at (0.5, 0.2) was at (0.8, 0.5)
    rgb = query(client, coords=[[0.5, 0.2]], transform={"rotate": 90})
    assert np.abs(rgb - reference([[0.8, 0.5]])).max() < 1e-5
    # image moved right by 0.1: the colour now at (0.6, 0.3) was at (0.5, 0.3)
    rgb = query(client, coords=[[0.6, 0.3]], transform={"translate": [0.1, 0]})
    assert np.abs(rgb - reference([[0.5, 0.3]])).max() < 1e-5
    # image scaled ×2 about (0, 0): the colour at (0.8, 0.4) was at (0.4, 0.2)
    rgb = query(client, coords=[[0.8, 0.4]], transform={"scale": 2, "center": [0, 0]})
    assert np.abs(rgb - reference([[0.4, 0.2]])).max() < 1e-5


def test_matrix_is_applied_directly_to_the_coordinates(client, reference):
    rgb = query(client, coords=[[0.2, 0.4]], transform={"matrix": [[0, 1, 0.1], [1, 0, 0]]})
    assert np.abs(rgb - reference([[0.5, 0.2]])).max() < 1e-5


def test_colour_background_replaces_points_outside_the_unit_square(client, reference):
    rgb = query(client, coords=[[0.5, 0.5], [1.5, 0.5], [-0.1, 0.2]], background="#0000ff")
    assert np.allclose(rgb[1:], [[0, 0, 1], [0, 0, 1]])
    assert np.abs(rgb[0] - reference([[0.5, 0.5]])[0]).max() < 1e-5


@pytest.mark.parametrize(
    "body,status,message",
    [
        ({"coords": [[0.5, "NaN"]]}, 422, "coords.0.1: Input should be a finite number"),
        ({"coords": [[0.5, 1e400]]}, 422, "coords.0.1: Input should be a finite number"),
        ({"coords": [[0.5, 0.5, 0.5]]}, 422, "coords.0"),
        ({"coords": [0.5, 0.5]}, 422, "coords.0"),
        ({"coords": []}, 422, "coords: List should have at least 1 item"),
        ({}, 422, "coords: Field required"),
        ({"coords": [[0, 0]], "transform": {"rotate": float("inf")}}, 422, "transform.rotate"),
        ({"coords": [[0, 0]], "transform": {"scale": 0}}, 422, "scale must be non-zero"),
        ({"coords": [[0, 0]], "transform": {"scale": [1, 1e-310]}}, 422, "between 1e-09 and 1e+09"),
        ({"coords": [[0, 0]], "transform": {"matrix": [[1, 0], [0, 1]]}}, 422, "transform.matrix"),
        ({"coords": [[0, 0]], "transform": {"matrix": [[1, 0, 0], [0, 1, 0]], "rotate": 5}}, 422, "either 'matrix'"),
        ({"coords": [[0, 0]], "transform": {"spin": 5}}, 422, "transform.spin: Extra inputs are not permitted"),
        ({"coords": [[0, 0]], "background": "transparent"}, 422, "needs an alpha channel"),
        ({"coords": [[0, 0]], "background": "plaid"}, 422, "background"),
        ({"coords": [[0.5, 0.5]] * 5001}, 413, "5001 coordinates is more than the limit of 5000"),
        ({"coords": [[1e300, 0.5]]}, 400, "coordinates after the transform reach 1e+300"),
        ({"coords": [[0.5, 0.4]], "transform": {"matrix": [[1e300, 0, 0], [0, 1, 0]]}}, 400, "must stay below 1e+30"),
    ],
)
def test_bad_queries_get_a_4xx_naming_the_problem(client, body, status, message):
    import json

    r = client.post(
        "/v1/models/astronaut/query",
        content=json.dumps(body, allow_nan=True),
        headers={"content-type": "application/json"},
    )
    assert r.status_code == status, r.text
    assert message in r.json()["error"]


def test_query_needs_a_json_body(client):
    r = client.post("/v1/models/astronaut/query", content=b"coords=1", headers={"content-type": "text/plain"})
    assert r.status_code == 422 and "application/json" in r.json()["error"]
    r = client.post("/v1/models/astronaut/query", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 422 and "invalid JSON" in r.json()["error"]


@pytest.mark.parametrize(
    "name,status,message",
    [
        ("nope", 404, "unknown model 'nope'"),
        ("digits", 400, "'digits' has task 'digits'; /query needs a model with task 'image'"),
        ("tampered", 503, "model 'tampered' is failed: version 1: sha256"),
    ],
)
def test_query_on_a_missing_wrong_or_failed_model_says_which(client, name, status, message):
    r = client.post(f"/v1/models/{name}/query", json={"coords": [[0.5, 0.5]]})
    assert r.status_code == status and message in r.json()["error"]
