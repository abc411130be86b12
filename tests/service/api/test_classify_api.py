"""POST /v1/models/{name}/classify: JSON pixels and uploads of digits drawn dark-on-light at 200×200."""

import numpy as np
import pytest

from service.engine.preprocess import mnist_like
from tests.servers import draw_digit, png_bytes

URL = "/v1/models/digits/classify"


def upload(client, files, **params):
    return client.post(URL, files=[("files", f) for f in files], params=params)


def test_json_images_nested_and_flat_get_the_same_prediction(client):
    x = mnist_like(draw_digit(3))
    r = client.post(URL, json={"images": [x.tolist(), x.ravel().tolist()]})
    assert r.status_code == 200, r.text
    preds = r.json()["predictions"]
    assert [p["label"] for p in preds] == [3, 3]
    assert preds[0]["probabilities"] == preds[1]["probabilities"]
    assert len(preds[0]["probabilities"]) == 10 and abs(sum(preds[0]["probabilities"]) - 1) < 1e-4


def test_png_uploads_of_drawn_digits_are_classified(client):
    # ink and paper colours, sizes and positions the model never saw in training
    drawings = [
        draw_digit(
            d,
            size=200,
            font_size=140 + 4 * d,
            stroke=5 + d % 3,
            offset=(8 * (d % 3) - 8, 6 - 4 * (d % 4)),
            ink=(40, 20 + 10 * d, 90),
            paper=(250, 245, 230),
        )
        for d in range(10)
    ]
    files = [(f"digit{d}.png", png_bytes(img), "image/png") for d, img in enumerate(drawings)]
    labels = []
    for start in (0, 5):  # the test server takes at most 8 images per request
        r = upload(client, files[start : start + 5])
        assert r.status_code == 200, r.text
        labels += [p["label"] for p in r.json()["predictions"]]
    assert sum(l == d for d, l in enumerate(labels)) >= 9, labels


def test_jpeg_upload_of_a_tilted_digit_is_classified(client):
    img = draw_digit(7, angle=-8, ink=(10, 10, 10), paper=(200, 220, 255))
    r = upload(client, [("seven.jpg", png_bytes(img, "JPEG"), "image/jpeg")])
    assert r.status_code == 200 and r.json()["predictions"][0]["label"] == 7


def test_include_input_returns_the_preprocessed_28_by_28_image(client):
    r = upload(client, [("two.png", png_bytes(draw_digit(2)), "image/png")], include_input="true")
    x = np.array(r.json()["predictions"][0]["input"])
    assert x.shape == (28, 28) and np.abs(x - mnist_like(draw_digit(2))).max() < 1e-3


@pytest.mark.parametrize(
    "body,status,message",
    [
        ({"images": []}, 400, "non-empty"),
        ({"images": [[0.5] * 700]}, 400, "images[0] has shape [700]"),
        ({"images": [[0.5] * 784, [[0.5] * 28] * 27]}, 400, "images[1] has shape [27, 28]"),
        ({"images": [[1.5] * 784]}, 400, "expected [0, 1]"),
        ({"images": [[float("nan")] * 784]}, 400, "images[0] contains NaN or Inf"),
        ({"images": [[0.0] * 784] * 9}, 413, "9 images is more than the limit of 8"),
        ({"pictures": []}, 422, "images: Field required"),
        ({"images": "zero"}, 422, "images"),
    ],
)
def test_bad_json_images_get_a_4xx_naming_the_problem(client, body, status, message):
    import json

    r = client.post(URL, content=json.dumps(body), headers={"content-type": "application/json"})
    assert r.status_code == status, r.text
    assert message in r.json()["error"]


def test_bad_uploads_get_a_4xx_naming_the_file(client):
    good = ("ok.png", png_bytes(draw_digit(1)), "image/png")
    cases = [
        ([("notes.txt", b"hello", "text/plain")], 400, "'notes.txt' is not a readable PNG or JPEG"),
        ([good, ("anim.gif", png_bytes(draw_digit(1), "GIF"), "image/gif")], 400, "'anim.gif' is GIF"),
        (
            [("blank.png", png_bytes(draw_digit(1, ink=(255, 255, 255), paper=(255, 255, 255))), "image/png")],
            400,
            "'blank.png' has no visible digit",
        ),
        ([good] * 9, 413, "limit of 8"),
        ([("huge.png", b"\0" * 600_000, "image/png")], 413, "limit of 500000"),
    ]
    for files, status, message in cases:
        r = upload(client, files)
        assert r.status_code == status and message in r.json()["error"], (message, r.text)


def test_form_fields_that_are_not_files_are_refused(client):
    r = client.post(URL, data={"label": "3"}, files=[("files", ("a.png", png_bytes(draw_digit(3)), "image/png"))])
    assert r.status_code == 400 and "unexpected form field 'label'" in r.json()["error"]


def test_other_content_types_get_415(client):
    r = client.post(URL, content=b"3", headers={"content-type": "text/plain"})
    assert r.status_code == 415 and "application/json" in r.json()["error"]


def test_classify_on_an_image_model_is_refused_naming_it(client):
    r = client.post("/v1/models/astronaut/classify", json={"images": [[0.0] * 784]})
    assert r.status_code == 400
    assert r.json() == {"error": "model 'astronaut' has task 'image'; /classify needs a model with task 'digits'"}
