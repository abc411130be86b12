# syntax=docker/dockerfile:1
#
# Targets (docker build --target NAME .):
#   runtime  CPU serving image, the default: the service, the packages it shares with training (modelrepo,
#            fitstore, telemetry, commandline, bigimage), onnxruntime and the bundled models;
#            no torch, no compilers, non-root, settings from INR_* environment variables.
#   gpu      the same service on CUDA 13 + cuDNN 9 with onnxruntime-gpu. It starts with
#            INR_DEVICE=cuda, so with no usable GPU the service exits instead of falling
#            back to the CPU.
#   train    torch (CPU wheels by default) and the training CLI, for fitting models into a
#            mounted models/ folder.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG CUDA_IMAGE=nvidia/cuda:13.1.1-cudnn-runtime-ubuntu24.04

# ---------------------------------------------------------------- sources (no image of their own)
# What the service and training share, then the serving sources on top of it.
FROM scratch AS shared-src
WORKDIR /src
COPY pyproject.toml README.md ./
COPY modelrepo ./modelrepo
COPY fitstore ./fitstore
COPY telemetry ./telemetry
COPY commandline ./commandline
COPY bigimage ./bigimage

FROM shared-src AS serve-src
COPY setup.py ./
COPY service ./service
COPY inr_client ./inr_client

# ---------------------------------------------------------------- builder (CPU serving venv)
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# A C compiler for the lattice kernel (service/engine/_latticekernel.c, setup.py): the runtime image takes the
# built venv, not the compiler. DL3008: the base image's tag pins the Debian release.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev \
 && rm -rf /var/lib/apt/lists/*
COPY --from=serve-src /src /src
WORKDIR /src
RUN python -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-cache-dir '.[serve]'

# ---------------------------------------------------------------- runtime (CPU serving image)
FROM ${PYTHON_IMAGE} AS runtime
# Two threads for onnxruntime's intra-op pool, matching `cpus: "2"` in docker-compose.yml
# and the Kubernetes CPU limit; raise INR_THREADS and OMP_NUM_THREADS together with the limit.
# Keep-alive 90 s, above the idle timeout of the proxy in front (nginx 75 s, ALB 60 s); on
# SIGTERM (`docker stop`) running requests get 20 s, so stop with a longer timeout
# (compose: stop_grace_period 30s, Kubernetes: terminationGracePeriodSeconds 30).
# The caches (session, S3 models) in the container's own /tmp, made 0700 by the user (HOME is /nonexistent).
ENV PATH=/opt/venv/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    INR_HOST=0.0.0.0 INR_PORT=8000 INR_GRPC_PORT=8001 INR_MODELS=/app/models INR_DEVICE=cpu \
    INR_THREADS=2 OMP_NUM_THREADS=2 INR_TIMEOUT_KEEP_ALIVE=90 INR_GRACEFUL_SHUTDOWN_S=20 \
    INR_FIT_STORE=sqlite:////app/fits/jobs.sqlite INR_FIT_UPLOADS=/app/fits/uploads \
    XDG_CACHE_HOME=/tmp/.cache
# The user, and the fit job store's folder (docs/fits.md): a plain `docker run` keeps its jobs here; compose
# mounts the named volume `fits` here, shared with the trainer. A fresh named volume takes this folder's
# owner and mode, so uid 10001 (the api) and group 10001 (the trainer runs with it as a supplementary group)
# can write it; setgid keeps new files in group 10001. jobs.sqlite is created here, group-writable, because
# SQLite creates its database 0644 and gives its -wal and -shm files the database's mode: created by either
# process, it would lock the other out. The gpu and train images do the same.
RUN groupadd --system --gid 10001 inr && useradd --system --uid 10001 --gid inr --no-create-home \
    --home-dir /nonexistent --shell /usr/sbin/nologin inr && mkdir -p /app/fits/uploads && touch /app/fits/jobs.sqlite \
 && chown -R 10001:10001 /app/fits && chmod 2775 /app/fits /app/fits/uploads && chmod 664 /app/fits/jobs.sqlite
COPY --from=builder /opt/venv /opt/venv
WORKDIR /app
COPY deploy/healthcheck.py ./healthcheck.py
COPY models ./models
USER 10001:10001
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 CMD ["python", "/app/healthcheck.py"]
EXPOSE 8000 8001
STOPSIGNAL SIGTERM
CMD ["python", "-m", "service"]

# ---------------------------------------------------------------- gpu-builder (CUDA serving venv)
FROM ${CUDA_IMAGE} AS gpu-builder
ARG ORT_GPU_VERSION=1.31.1
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 DEBIAN_FRONTEND=noninteractive
# DL3008 (pin apt versions): the CUDA base tag pins the Ubuntu release, and Ubuntu's archive
# drops superseded package versions, so exact pins would break rebuilds rather than fix them.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv python3-dev gcc libc6-dev \
 && rm -rf /var/lib/apt/lists/*
COPY --from=serve-src /src /src
WORKDIR /src
RUN python3 -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-cache-dir '.[serve]' \
 && /opt/venv/bin/pip uninstall -y onnxruntime \
 && /opt/venv/bin/pip install --no-cache-dir "onnxruntime-gpu==${ORT_GPU_VERSION}"

# ---------------------------------------------------------------- gpu (CUDA serving image)
FROM ${CUDA_IMAGE} AS gpu
# As the runtime image, on CUDA: INR_DEVICE=cuda refuses to start without a GPU.
ENV DEBIAN_FRONTEND=noninteractive PATH=/opt/venv/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    INR_HOST=0.0.0.0 INR_PORT=8000 INR_GRPC_PORT=8001 INR_MODELS=/app/models INR_DEVICE=cuda \
    INR_THREADS=2 OMP_NUM_THREADS=2 INR_TIMEOUT_KEEP_ALIVE=90 INR_GRACEFUL_SHUTDOWN_S=20 \
    INR_FIT_STORE=sqlite:////app/fits/jobs.sqlite INR_FIT_UPLOADS=/app/fits/uploads \
    XDG_CACHE_HOME=/tmp/.cache
# DL3008: see gpu-builder. The user and the fit store's folder: as in the runtime image.
# hadolint ignore=DL3008
RUN groupadd --system --gid 10001 inr && useradd --system --uid 10001 --gid inr --no-create-home \
    --home-dir /nonexistent --shell /usr/sbin/nologin inr && mkdir -p /app/fits/uploads && touch /app/fits/jobs.sqlite \
 && chown -R 10001:10001 /app/fits && chmod 2775 /app/fits /app/fits/uploads && chmod 664 /app/fits/jobs.sqlite \
 && apt-get update \
 && apt-get install -y --no-install-recommends python3 \
 && rm -rf /var/lib/apt/lists/*
COPY --from=gpu-builder /opt/venv /opt/venv
WORKDIR /app
COPY deploy/healthcheck.py ./healthcheck.py
COPY models ./models
USER 10001:10001
# CUDA's start (the provider, cuDNN, the first sessions) takes longer than the CPU's: a longer start period
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 CMD ["python", "/app/healthcheck.py"]
EXPOSE 8000 8001
STOPSIGNAL SIGTERM
CMD ["python", "-m", "service"]

# ---------------------------------------------------------------- train (torch, fitting models)
FROM ${PYTHON_IMAGE} AS train
# CPU wheels by default; for CUDA training build with
#   --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu130
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
# `python -m training worker` reads INR_FIT_STORE and INR_MODELS: the same store and models folder as the
# serving image's
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 HOME=/tmp MPLCONFIGDIR=/tmp/matplotlib \
    INR_FIT_STORE=sqlite:////app/fits/jobs.sqlite INR_FIT_UPLOADS=/app/fits/uploads INR_MODELS=/app/models
COPY --from=shared-src /src /src
COPY training /src/training
WORKDIR /src
RUN python -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-cache-dir --index-url "${TORCH_INDEX}" torch==2.13.0 \
 && /opt/venv/bin/pip install --no-cache-dir '.[train]'
# the user and the fit store's folder, as in the runtime image (whichever image first mounts the volume seeds it)
RUN groupadd --system --gid 10001 inr && useradd --system --uid 10001 --gid inr --no-create-home \
    --home-dir /nonexistent --shell /usr/sbin/nologin inr && mkdir -p /app/fits/uploads && touch /app/fits/jobs.sqlite \
 && chown -R 10001:10001 /app/fits && chmod 2775 /app/fits /app/fits/uploads && chmod 664 /app/fits/jobs.sqlite
WORKDIR /app
USER 10001:10001
ENTRYPOINT ["python", "-m", "training"]
CMD ["--help"]
