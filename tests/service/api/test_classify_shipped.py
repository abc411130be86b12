"""The shipped `models/digits` through the real server: the official MNIST test set through V2 infer, what is not
a digit answered `label: null` with a reason in v1 classify and in the classification extension (the raw V2
outputs stay the network's), the digit pad's "not a digit"; and a model without a detector declines a blank page."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from bench.digits import v1_classify, v2_classes, v2_outputs
from tests.servers import ROOT, Server

MNIST = ROOT.parent / "shared" / "data" / "mnist"
FASHION = Path("/usr/share/datasets/fashion-mnist")
SHIPPED = ROOT / "models" / "digits"


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    repo = tmp_path_factory.mktemp("shipped")
    shutil.copytree(SHIPPED, repo / "digits")
    srv = Server(repo)
    with srv.running():
        yield srv


def rule() -> dict:
    return json.loads((SHIPPED / "1" / "metadata.json").read_text())["rejection"]


def pages() -> np.ndarray:
    rng = np.random.default_rng(0)
    blank, solid, noise = np.zeros((28, 28)), np.full((28, 28), 0.7), rng.random((28, 28))
    return np.stack([blank, solid, noise]).astype(np.float32)[:, None]


@pytest.mark.skipif(not MNIST.exists(), reason=f"the official MNIST is not at {MNIST}")
def test_the_official_test_set_through_v2_infer_is_at_least_99_percent(shipped):
    from training.digits.idx import load_dataset

    test = load_dataset(MNIST).test
    x = (test.images.astype(np.float32) / 255)[:, None]
    out = v2_outputs(shipped.url, "digits", x, ["probabilities", "is_digit"])
    accuracy = (out["probabilities"].argmax(1) == test.labels).mean()
    assert accuracy >= 0.99, accuracy
    assert (out["is_digit"][:, 0] < rule()["threshold"]).mean() <= 0.01  # false rejections


def test_pages_and_other_images_answer_null_with_a_reason_in_v1(shipped):
    from training.digits.idx import load_dataset
    from training.digits.outliers import letters

    preds = v1_classify(shipped.url, "digits", pages())
    assert [p["label"] for p in preds] == [None] * 3
    assert preds[0]["reason"].startswith("blank page") and preds[1]["reason"].startswith("blank page")
    assert preds[2]["reason"].startswith("not a digit (is_digit")
    assert all(len(p["probabilities"]) == 10 and 0 <= p["is_digit"] < rule()["threshold"] for p in preds)
    others = [(letters(40, 99), 0.8)]  # font letters: 88 % of 1,000 (benchmarks.md, digits_official)
    if FASHION.exists():
        others.append((load_dataset(FASHION, "fashion-mnist").test.images[:200], 0.98))
    for u8, least in others:
        got = v1_classify(shipped.url, "digits", (u8.astype(np.float32) / 255)[:, None])
        assert np.mean([p["label"] is None for p in got]) >= least
    if MNIST.exists():
        test = load_dataset(MNIST).test
        got = v1_classify(shipped.url, "digits", (test.images[:256].astype(np.float32) / 255)[:, None])
        assert np.mean([p["label"] == y for p, y in zip(got, test.labels[:256])]) >= 0.98


def test_the_classification_extension_answers_index_minus_one_and_the_raw_outputs_stay(shipped):
    from tests.servers import digit_training_set

    x = np.concatenate([pages(), digit_training_set(1, seed=3)[0][:2]])
    classes = v2_classes(shipped.url, "digits", x, k=3)
    for row in classes[:3]:
        score, index, reason = row[0].split(":", 2)
        assert (
            index == "-1" and float(score) < rule()["threshold"] and ("blank page" in reason or "not a digit" in reason)
        )
        assert len(row) == 3 and all(len(c.split(":")) == 2 for c in row[1:])
    assert all(c[0].split(":")[1] != "-1" for c in classes[3:])  # drawn digits keep their classes
    raw = v2_outputs(shipped.url, "digits", x, ["probabilities", "is_digit", "logits"])
    assert np.allclose(raw["probabilities"].sum(1), 1, atol=1e-5) and raw["is_digit"].shape == (5, 1)


def test_grpc_classification_answers_index_minus_one_too(shipped):
    import tritonclient.grpc as grpcclient

    c = grpcclient.InferenceServerClient(shipped.grpc_url)
    inp = grpcclient.InferInput("images", [3, 1, 28, 28], "FP32")
    inp.set_data_from_numpy(pages())
    res = c.infer("digits", [inp], outputs=[grpcclient.InferRequestedOutput("probabilities", class_count=2)])
    rows = [[v.decode() for v in row] for row in res.as_numpy("probabilities")]
    assert [r[0].split(":")[1] for r in rows] == ["-1"] * 3 and all(len(r) == 2 for r in rows)
    c.close()


def test_a_model_without_a_detector_declines_a_blank_page(client):
    r = client.post("/v1/models/digits/classify", json={"images": [np.zeros((28, 28)).tolist()]})
    assert r.status_code == 200, r.text
    (pred,) = r.json()["predictions"]
    assert pred["label"] is None and pred["reason"] == "blank page (every pixel is 0)" and "is_digit" not in pred
    r = client.post(
        "/v2/models/digits/infer",
        json={
            "inputs": [{"name": "images", "shape": [1, 1, 28, 28], "datatype": "FP32", "data": [0.0] * 784}],
            "outputs": [{"name": "probabilities", "parameters": {"classification": 2}}],
        },
    )
    assert r.status_code == 200, r.text
    assert r.json()["outputs"][0]["data"][0] == "0.000000:-1:blank page (every pixel is 0)"


def test_the_digit_pad_shows_not_a_digit_for_a_crossed_box(shipped):
    """A box with both diagonals, drawn on the pad in headless Chromium: the pad says "not a digit"."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    from tests.service.api.test_viewer import ARGS, CHROMIUM

    if not CHROMIUM.exists():
        pytest.skip(f"no Chromium at {CHROMIUM}")
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        page = browser.new_page(viewport={"width": 820, "height": 560})
        page.set_default_timeout(60_000)
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(shipped.url + "/")
        page.wait_for_selector("#digit-model option", state="attached")
        page.locator("#pad").scroll_into_view_if_needed()
        box = page.locator("#pad").bounding_box()
        x0, y0, w = box["x"] + 30, box["y"] + 30, box["width"] - 60
        corners = [(x0, y0), (x0 + w, y0), (x0 + w, y0 + w), (x0, y0 + w), (x0, y0), (x0 + w, y0 + w)]
        page.mouse.move(*corners[0])
        page.mouse.down()
        for c in corners[1:]:
            page.mouse.move(*c, steps=8)
        page.mouse.up()
        page.mouse.move(x0 + w, y0)
        page.mouse.down()
        page.mouse.move(x0, y0 + w, steps=8)
        with page.expect_response(lambda r: "/classify" in r.url):  # the last stroke's answer
            page.mouse.up()
        page.wait_for_function(
            "['rejected', 'classified', 'error'].includes(document.querySelector('#pad').dataset.state)"
        )
        message = page.locator("#pad-message").inner_text()
        assert page.locator("#pad").get_attribute("data-state") == "rejected", message
        assert message.startswith("not a digit: not a digit (is_digit")
        assert page.locator("#chart").get_attribute("data-label") == "not a digit"
        assert page.locator("#chart .bar-row.top").count() == 0
        browser.close()
    assert errors == []
