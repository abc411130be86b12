# syntax=docker/dockerfile:1
#
# Targets (docker build --target NAME .):
#   runtime  CPU serving image, the default: the service and the model contract (modelrepo),
#            onnxruntime and the bundled models;
#            no torch, no compilers, non-root, settings from INR_* environment variables.
#   gpu      the same service on CUDA 13 + cuDNN 9 with onnxruntime-gpu. It starts with
#            INR_DEVICE=cuda, so with no usable GPU the service exits instead of falling
#            back to the CPU.
#   train    torch (CPU wheels by default) and the training CLI, for fitting models into a
#            mounted models/ folder.
#
# deploy/check_image_commands.py replays the builder and runtime stages outside Docker
# (same install command, same CMD, same HEALTHCHECK); keep their commands plain.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG CUDA_IMAGE=nvidia/cuda:13.1.1-cudnn-runtime-ubuntu24.04

# ---------------------------------------------------------------- builder (CPU serving venv)
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY modelrepo ./modelrepo
COPY service ./service
COPY inr_client ./inr_client
RUN python -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-cache-dir '.[serve]'

# ---------------------------------------------------------------- runtime (CPU serving image)
FROM ${PYTHON_IMAGE} AS runtime
# Two threads for onnxruntime's intra-op pool, matching `cpus: "2"` in docker-compose.yml
# and the Kubernetes CPU limit; raise INR_THREADS and OMP_NUM_THREADS together with the limit.
# Keep-alive 90 s, above the idle timeout of the proxy in front (nginx 75 s, ALB 60 s); on
# SIGTERM (`docker stop`) running requests get 20 s, so stop with a longer timeout
# (compose: stop_grace_period 30s, Kubernetes: terminationGracePeriodSeconds 30).
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    INR_MODELS=/app/models \
    INR_HOST=0.0.0.0 \
    INR_PORT=8000 \
    INR_GRPC_PORT=8001 \
    INR_DEVICE=cpu \
    INR_THREADS=2 \
    OMP_NUM_THREADS=2 \
    INR_TIMEOUT_KEEP_ALIVE=90 \
    INR_GRACEFUL_SHUTDOWN_S=20 \
    INR_FIT_STORE=sqlite:////app/fits/jobs.sqlite
RUN groupadd --system --gid 10001 inr \
 && useradd --system --uid 10001 --gid inr --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin inr
COPY --from=builder /opt/venv /opt/venv
WORKDIR /app
COPY deploy/healthcheck.py ./healthcheck.py
COPY models ./models
# The fits job store's folder (docs/fits.md), INR_FIT_STORE above: a plain `docker run` keeps its jobs
# here; compose mounts the named volume `fits` here, shared with the trainer. A fresh
# named volume takes this folder's owner and mode, so uid 10001 (the api) and group 10001 (the
# trainer runs with it as a supplementary group) can write it; setgid keeps new files in group 10001.
# jobs.sqlite is created here, group-writable, because SQLite creates its database 0644 and gives its
# -wal and -shm files the database's mode: created by either process, it would lock the other out.
RUN mkdir -p /app/fits \
 && touch /app/fits/jobs.sqlite \
 && chown -R 10001:10001 /app/fits \
 && chmod 2775 /app/fits \
 && chmod 664 /app/fits/jobs.sqlite
USER 10001:10001
EXPOSE 8000 8001
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 CMD ["python", "/app/healthcheck.py"]
CMD ["python", "-m", "service"]

# ---------------------------------------------------------------- gpu-builder (CUDA serving venv)
FROM ${CUDA_IMAGE} AS gpu-builder
ARG ORT_GPU_VERSION=1.31.1
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    DEBIAN_FRONTEND=noninteractive
# DL3008 (pin apt versions): the CUDA base tag pins the Ubuntu release, and Ubuntu's archive
# drops superseded package versions, so exact pins would break rebuilds rather than fix them.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md ./
COPY modelrepo ./modelrepo
COPY service ./service
COPY inr_client ./inr_client
RUN python3 -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-cache-dir '.[serve]' \
 && /opt/venv/bin/pip uninstall -y onnxruntime \
 && /opt/venv/bin/pip install --no-cache-dir "onnxruntime-gpu==${ORT_GPU_VERSION}"

# ---------------------------------------------------------------- gpu (CUDA serving image)
FROM ${CUDA_IMAGE} AS gpu
ENV DEBIAN_FRONTEND=noninteractive
# DL3008: see gpu-builder.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 inr \
 && useradd --system --uid 10001 --gid inr --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin inr
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    INR_MODELS=/app/models \
    INR_HOST=0.0.0.0 \
    INR_PORT=8000 \
    INR_GRPC_PORT=8001 \
    INR_DEVICE=cuda \
    INR_THREADS=2 \
    OMP_NUM_THREADS=2 \
    INR_TIMEOUT_KEEP_ALIVE=90 \
    INR_GRACEFUL_SHUTDOWN_S=20 \
    INR_FIT_STORE=sqlite:////app/fits/jobs.sqlite
COPY --from=gpu-builder /opt/venv /opt/venv
WORKDIR /app
COPY deploy/healthcheck.py ./healthcheck.py
COPY models ./models
# the fits job store's folder, as in the runtime stage
RUN mkdir -p /app/fits \
 && touch /app/fits/jobs.sqlite \
 && chown -R 10001:10001 /app/fits \
 && chmod 2775 /app/fits \
 && chmod 664 /app/fits/jobs.sqlite
USER 10001:10001
EXPOSE 8000 8001
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 CMD ["python", "/app/healthcheck.py"]
CMD ["python", "-m", "service"]

# ---------------------------------------------------------------- train (torch, fitting models)
FROM ${PYTHON_IMAGE} AS train
# CPU wheels by default; for CUDA training build with
#   --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu130
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    MPLCONFIGDIR=/tmp/matplotlib
WORKDIR /src
COPY pyproject.toml README.md ./
COPY modelrepo ./modelrepo
COPY training ./training
RUN python -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-cache-dir --index-url "${TORCH_INDEX}" torch==2.13.0 \
 && /opt/venv/bin/pip install --no-cache-dir '.[train]' \
 && groupadd --system --gid 10001 inr \
 && useradd --system --uid 10001 --gid inr --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin inr
WORKDIR /app
# `python -m training worker` reads these: the same store and models folder as the serving image's
ENV INR_FIT_STORE=sqlite:////app/fits/jobs.sqlite \
    INR_MODELS=/app/models
# the fits job store's folder, as in the runtime stage (whichever image first mounts the volume seeds it)
RUN mkdir -p /app/fits \
 && touch /app/fits/jobs.sqlite \
 && chown -R 10001:10001 /app/fits \
 && chmod 2775 /app/fits \
 && chmod 664 /app/fits/jobs.sqlite
USER 10001:10001
ENTRYPOINT ["python", "-m", "training"]
CMD ["--help"]
