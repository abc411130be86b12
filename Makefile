# One-command entry points. `make serve` and `make test` work on a fresh clone.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# `make serve PORT=8002` moves both ports the service opens: HTTP on PORT, KServe V2 gRPC on GRPC_PORT (PORT + 1
# unless given; 0 turns gRPC off).
PORT ?= 8000
GRPC_PORT ?= $(shell expr $(PORT) + 1)
# Where `make worker` writes fitted models and `make serve` serves them from, beside models/ (git ignores build/).
FITS ?= build/fitted

.PHONY: setup serve worker lint format test models photo-model bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

setup: $(BIN)/python
	$(BIN)/pip install -q -e '.[train,serve,client,dev]'

# The server, and the clients the README's examples use beside it (the `client` extra: Triton's HTTP client).
serve: $(BIN)/python
	$(BIN)/pip install -q -e '.[serve,client]'
	$(BIN)/python -m service --models models --fit-models $(FITS) --host 127.0.0.1 --port $(PORT) --grpc-port $(GRPC_PORT) --device auto --model-control-mode poll --repository-poll-secs 2

# A fit worker for POST /v1/fits (docs/fits.md), on the same job store as `make serve`, writing into the fits'
# folder `make serve` serves beside models/ (INR_FIT_MODELS), so the bundled models stay as git has them.
worker: $(BIN)/python
	$(BIN)/pip install -q -e '.[train]'
	$(BIN)/python -m training worker --store sqlite:///build/fits.sqlite --models $(FITS)

# Ruff (pyproject.toml): the format, then the lint rules and import order; `make format` rewrites in place.
lint: setup
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .

format: setup
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# `make test TEST_WORKERS=4` runs the suite on 4 processes (pytest-xdist): a file's tests on one of them,
# tests/containers whole on one (tests/conftest.py). 0, the default until a parallel run is shown green and faster
# here (issue 58), runs it in this one process. The tests marked `serial` (rates and deadlines, which a loaded
# machine misses) run after the parallel part, alone. The slowest tests are listed.
TEST_WORKERS ?= 0
test: lint
ifeq ($(TEST_WORKERS),0)
	$(BIN)/python -m pytest -q --durations=30
else
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not serial" --durations=30
	$(BIN)/python -m pytest -q -m serial --durations=10
endif

# Digits (docs/benchmarks.md, digits_official): the recipe and the members chosen on the validation slice of the
# official MNIST, then the "not a digit" detector (Debian's dataset-fashion-mnist); one graph: the members' logit
# mean, calibrated, with is_digit, float16 weights.
DIGITS_DATA ?= ../shared/data/mnist
DIGITS_OUTLIERS ?= /usr/share/datasets/fashion-mnist
DIGITS_SEEDS := 0 1
DIGITS_RECIPE = --data-dir $(DIGITS_DATA) --model conv-sinekan --hidden 128 --grid 2 --epochs 6 --augment --schedule cosine --no-progress

# The photo (data/photos/README.md: CC0-1.0, 1920×1080) fitted whole at its native size with the grid preset's
# options, read from fitstore.PRESETS["grid"] when the recipe runs, so a changed preset is followed by
# `make models` (or `make photo-model`) with no edit here; then its provenance goes into the model's metadata.
PHOTO ?= dandelion
PHOTO_STEPS ?= 1500
GRID_PRESET = $(BIN)/python -c 'from fitstore import PRESETS; print(" ".join(PRESETS["grid"]["argv"]))'

# Regenerate the bundled models (minutes on 2 CPU cores).
models: setup photo-model
	$(BIN)/python -m training fit-image --image astronaut --size 256 --protocol full --scale 10 --width 128 --features 128 --batch-size 8192 --steps 1500 --lr 1e-3 --schedule constant --out models/astronaut --no-progress
	for s in $(DIGITS_SEEDS); do $(BIN)/python -m training fit-digits $(DIGITS_RECIPE) --seed $$s --checkpoint build/digits-s$$s.pt || exit 1; done
	$(BIN)/python -m training fit-digit-detector --data-dir $(DIGITS_DATA) --outliers-dir $(DIGITS_OUTLIERS) --epochs 3 --max-false-rejection 0.002 --checkpoint build/digits-detector.pt
	rm -rf models/digits && $(BIN)/python -m training export-digits --data-dir $(DIGITS_DATA) --fp16-weights --calibrate --detector build/digits-detector.pt --outliers-dir $(DIGITS_OUTLIERS) --checkpoint $(foreach s,$(DIGITS_SEEDS),build/digits-s$(s).pt) --out models/digits

photo-model: setup
	grid="$$($(GRID_PRESET))" && test -n "$$grid" && rm -rf models/$(PHOTO) && \
	$(BIN)/python -m training fit-image --image data/photos/$(PHOTO).jpg $$grid --protocol full --steps $(PHOTO_STEPS) --no-progress --out models/$(PHOTO) && \
	$(BIN)/python -m training.photo_provenance models/$(PHOTO) data/photos/$(PHOTO).json

bench: setup
	$(BIN)/python -m bench.quick

clean:
	rm -rf $(VENV) .pytest_cache
