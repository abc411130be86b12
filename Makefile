# One-command entry points. `make serve` and `make test` work on a fresh clone.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PORT ?= 8000

.PHONY: setup serve test models bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

setup: $(BIN)/python
	$(BIN)/pip install -q -e '.[train,serve,dev]'

serve: $(BIN)/python
	$(BIN)/pip install -q -e '.[serve]'
	$(BIN)/python -m service --models models --host 127.0.0.1 --port $(PORT) --device auto

test: setup
	$(BIN)/python -m pytest -q

# Regenerate the bundled models (minutes on 2 CPU cores).
models: setup
	$(BIN)/python -m training fit-image --image astronaut --size 256 --protocol full --scale 10 --width 128 --features 128 --batch-size 8192 --steps 1500 --lr 1e-3 --schedule constant --out models/astronaut --no-progress
	for s in 0 1 2; do $(BIN)/python -m training fit-digits --data-dir ../shared/data/mnist-10k --model sinekan --hidden 128 --epochs 60 --elastic --schedule cosine --seed $$s --no-progress --checkpoint build/digits-seed$$s.pt || exit 1; done
	rm -rf models/digits && $(BIN)/python -m training export-digits --data-dir ../shared/data/mnist-10k --checkpoint build/digits-seed0.pt build/digits-seed1.pt build/digits-seed2.pt --out models/digits

bench: setup
	$(BIN)/python -m bench.quick

clean:
	rm -rf $(VENV) .pytest_cache
