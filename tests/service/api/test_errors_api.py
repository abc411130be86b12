"""One error shape for everything the framework answers too: unknown routes, methods, oversized bodies."""

import json


def test_unknown_route_is_404_json(client):
    r = client.get("/v2/nothing")
    assert r.status_code == 404 and r.json() == {"error": "no route /v2/nothing"}


def test_wrong_method_is_405_json(client):
    r = client.delete("/v1/models/astronaut/query")
    assert r.status_code == 405 and r.json() == {"error": "method DELETE is not allowed on /v1/models/astronaut/query"}


def test_body_over_the_limit_is_413_from_its_length(client):
    body = json.dumps({"coords": [[0.5, 0.5]] * 200_000})  # > 2 MB, the test server's limit
    r = client.post("/v1/models/astronaut/query", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 413 and "larger than the limit of 2000000 bytes" in r.json()["error"]


def test_chunked_body_over_the_limit_is_413_while_it_streams(client):
    def chunks():
        yield b'{"coords": ['
        for _ in range(300):
            yield b"[0.5, 0.5], " * 1000
        yield b"[0.5, 0.5]]}"

    r = client.post("/v1/models/astronaut/query", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413 and "INR_MAX_BODY_BYTES" in r.json()["error"]


def test_chunked_upload_over_the_limit_is_413_while_it_streams(client):
    def parts():
        yield b'--x\r\nContent-Disposition: form-data; name="files"; filename="a.png"\r\n'
        yield b"Content-Type: image/png\r\n\r\n"
        for _ in range(300):
            yield b"\0" * 10_000
        yield b"\r\n--x--\r\n"

    r = client.post(
        "/v1/models/digits/classify", content=parts(), headers={"content-type": "multipart/form-data; boundary=x"}
    )
    assert r.status_code == 413 and "INR_MAX_BODY_BYTES" in r.json()["error"]


def test_server_keeps_serving_after_bad_requests(client):
    client.post("/v1/models/astronaut/query", content=b"\xff\xfe", headers={"content-type": "application/json"})
    client.post("/v1/models/digits/classify", content=b"--x\r\n", headers={"content-type": "multipart/form-data"})
    assert client.get("/health/live").status_code == 200
    assert client.post("/v1/models/astronaut/query", json={"coords": [[0.5, 0.5]]}).status_code == 200


def test_malformed_multipart_is_a_4xx(client):
    r = client.post(
        "/v1/models/digits/classify",
        content=b"--x\r\ngarbage",
        headers={"content-type": "multipart/form-data; boundary=x"},
    )
    assert 400 <= r.status_code < 500 and "error" in r.json()
