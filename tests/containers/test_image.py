"""The images themselves, built from the unmodified Dockerfile: what runs in them and as whom."""

from __future__ import annotations

from .engine import PYTHON_BASE, RUNTIME_IMAGE, TRAIN_IMAGE


def in_image(engine, image: str, *command: str, check: bool = True):
    return engine("run", "--rm", "--network", "none", "--entrypoint", command[0], image, *command[1:], check=check)


def test_runtime_runs_as_non_root_with_its_healthcheck(images):
    image = images.inspect(RUNTIME_IMAGE)
    config = image["Config"]
    assert config["User"] == "10001:10001"
    healthcheck = image.get("Healthcheck") or config.get("Healthcheck")  # Podman's place, Docker's place
    assert healthcheck["Test"] == ["CMD", "python", "/app/healthcheck.py"]
    assert config["Cmd"] == ["python", "-m", "service"]
    assert in_image(images, RUNTIME_IMAGE, "id", "-u").stdout.strip() == "10001"


def test_runtime_has_no_torch_and_no_training_but_the_client_works(images):
    probe = (
        "import importlib.util as u, sys; "
        "found = [m for m in ('torch', 'training') if u.find_spec(m)]; print(found); sys.exit(bool(found))"
    )
    assert in_image(images, RUNTIME_IMAGE, "python", "-c", probe, check=False).returncode == 0
    assert "usage" in in_image(images, RUNTIME_IMAGE, "python", "-m", "inr_client", "--help").stdout.lower()
    assert in_image(images, RUNTIME_IMAGE, "sh", "-c", "command -v gcc cc g++", check=False).returncode != 0


def test_runtime_has_the_lattice_kernel(images):
    # compiled in the builder (setup.py, an optional extension): an image without it would render grid tiles ~3x slower
    assert in_image(images, RUNTIME_IMAGE, "python", "-c", "import service.engine._latticekernel").returncode == 0
    # and the coded tables' decoder (modelrepo/_tablecode.c): without it numpy decodes them, ~4x slower at a load
    assert in_image(images, RUNTIME_IMAGE, "python", "-c", "import modelrepo._tablecode").returncode == 0


def test_runtime_is_the_base_plus_the_serving_install(images, report):
    extra_mb = (images.image_size(RUNTIME_IMAGE) - images.image_size(PYTHON_BASE)) / 1e6
    report["image_runtime_over_base_mb"] = round(extra_mb)
    assert 0 < extra_mb < 600, f"the runtime image adds {extra_mb:.0f} MB to its base"


def test_train_image_runs_the_training_cli_with_torch(images):
    assert "fit-image" in images("run", "--rm", "--network", "none", TRAIN_IMAGE, "--help").stdout
    version = in_image(images, TRAIN_IMAGE, "python", "-c", "import torch; print(torch.__version__)").stdout
    assert version.startswith("2.13.0")
    assert images.inspect(TRAIN_IMAGE)["Config"]["User"] == "10001:10001"
