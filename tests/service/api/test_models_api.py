"""GET /v1/models and /v1/models/{name}: metadata, status, provider, training metrics."""


def test_model_list_shows_every_folder_with_status(client):
    models = {m["name"]: m for m in client.get("/v1/models").json()["models"]}
    assert {n: m["status"] for n, m in models.items()} == {
        "astronaut": "ready",
        "digits": "ready",
        "broken-onnx": "failed",
        "junk-metadata": "failed",
        "no-metadata": "failed",
        "no-inputs": "failed",
        "truncated-config": "failed",
        "tampered": "failed",
        "wrong-inputs": "failed",
    }


def test_ready_models_show_provider_task_and_training_metrics(client):
    m = client.get("/v1/models/astronaut").json()
    assert m["provider"] == "CPUExecutionProvider" and m["task"] == "image" and m["error"] is None
    assert set(m["metrics"]) >= {"train_psnr", "test_psnr", "ssim"}
    assert m["inputs"] == [{"name": "coords", "datatype": "FP32", "shape": [-1, 2]}]
    d = client.get("/v1/models/digits").json()
    assert d["task"] == "digits" and d["metrics"]["test_accuracy"] >= 0.9


def test_failed_models_show_the_reason(client):
    tampered = client.get("/v1/models/tampered").json()
    assert tampered["status"] == "failed" and "sha256" in tampered["error"] and tampered["provider"] is None
    assert "disagrees with the spec" in client.get("/v1/models/wrong-inputs").json()["error"]
    assert "unreadable ONNX" in client.get("/v1/models/broken-onnx").json()["error"]
    junk = client.get("/v1/models/junk-metadata").json()  # junk values are shown as absent, never a 500
    assert junk["status"] == "failed" and junk["description"] is None and junk["metrics"] == {}


def test_unknown_model_is_404_listing_the_models(client):
    r = client.get("/v1/models/nope")
    assert r.status_code == 404
    assert r.json() == {
        "error": "unknown model 'nope'; models: astronaut, broken-onnx, digits, junk-metadata, "
        "no-inputs, no-metadata, tampered, truncated-config, wrong-inputs"
    }


def test_openapi_documents_every_endpoint_with_schemas(client):
    spec = client.get("/openapi.json").json()
    paths = spec["paths"]
    for path in (
        "/health/live",
        "/health/ready",
        "/v1/models",
        "/v1/models/{name}",
        "/v1/models/{name}/query",
        "/v1/models/{name}/render",
        "/v1/models/{name}/classify",
    ):
        assert path in paths, path
    assert set(paths["/v1/models/{name}/render"]) == {"get", "post"}
    body = paths["/v1/models/{name}/classify"]["post"]["requestBody"]["content"]
    assert set(body) == {"application/json", "multipart/form-data"}
    assert "images" in body["application/json"]["schema"]["properties"]
    assert {"QueryRequest", "RenderRequest", "Transform", "ClassifyResponse", "ErrorBody"} <= set(
        spec["components"]["schemas"]
    )


def test_training_preview_is_served_when_the_model_ships_one(client, model_repo):
    m = client.get("/v1/models/astronaut").json()
    assert m["preview_url"] == "/v1/models/astronaut/preview"
    r = client.get(m["preview_url"])
    assert r.status_code == 200 and r.headers["content-type"] == "image/png"
    assert r.content == (model_repo / "astronaut" / "1" / "preview.png").read_bytes()


def test_a_model_without_preview_says_so(client):
    assert client.get("/v1/models/digits").json()["preview_url"] is None
    r = client.get("/v1/models/digits/preview")
    assert r.status_code == 404 and r.json() == {"error": "model 'digits' ships no preview image"}
    assert client.get("/v1/models/nope/preview").status_code == 404


def test_a_model_lists_its_versions_and_their_states(client):
    d = client.get("/v1/models/digits").json()
    assert d["version"] == 1 and d["version_policy"] == "latest 1" and d["max_batch_size"] == 256
    [v] = d["versions"]
    assert v["version"] == 1 and v["status"] == "ready" and v["serving"] and len(v["onnx_sha256"]) == 64
    tampered = client.get("/v1/models/tampered").json()
    assert [(v["version"], v["status"], v["serving"]) for v in tampered["versions"]] == [(1, "failed", False)]
    assert "sha256" in tampered["versions"][0]["error"]


def test_the_listing_is_a_small_summary_with_no_path_and_the_detail_no_render_internals(client):
    """One summary per model (the detail is a link away); no absolute path; no separable arrays,
    no per-epoch history."""
    r = client.get("/v1/models")
    m = {m["name"]: m for m in r.json()["models"]}["astronaut"]
    assert set(m) == {"name", "task", "status", "error", "versions", "url"}
    assert m["versions"] == [1] and m["url"] == "/v1/models/astronaut"
    d = client.get(m["url"]).json()
    assert "separable" not in d["metadata"] and "history" not in d["metadata"].get("training", {})
    assert not {"name", "task", "description", "inputs", "outputs", "metrics", "version"} & set(d["metadata"])


def test_the_bundled_models_listing_is_under_4_kb_and_names_no_absolute_path():
    import json

    from fastapi.testclient import TestClient

    from service.app import create_app
    from service.settings import Settings
    from tests.servers import ROOT as root

    with TestClient(create_app(Settings(models=root / "models"))) as c:
        listing = c.get("/v1/models")
        details = [c.get(m["url"]).text for m in listing.json()["models"]]
    assert listing.status_code == 200 and len(listing.content) < 4096
    assert len(listing.json()["models"]) == len(
        list(root.glob("models/*/config.pbtxt"))
    )  # each bundled model, none failed
    assert {m["status"] for m in listing.json()["models"]} == {"ready"}
    for text in [listing.text, *details]:
        assert '"/' not in text.replace('"/v1/', ""), "an absolute path in the public model API"
    for meta in root.glob("models/*/*/metadata.json"):
        assert '"/' not in json.dumps(json.loads(meta.read_text())), meta
