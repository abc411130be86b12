#!/usr/bin/env bash
# Local stand-ins for the base images that the Dockerfile and docker-compose.yml name, for machines
# that cannot pull from a registry (CI here). Each is built from Debian bookworm packages, and only
# when the real image is absent, then tagged with the real name, so that the Dockerfile and the
# compose file build and run unchanged. A user with a registry never runs this.
#
#   deploy/offline-bases/build.sh            # podman, or ENGINE=docker
#
# How they differ from the real images: docs/containers.md, "Offline base images".
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
engine=${ENGINE:-podman}
suite=${DEBIAN_SUITE:-bookworm}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
rootfs_image=localhost/inr-offline/debian:$suite-minbase
# the names the Dockerfile (ARG PYTHON_IMAGE) and docker-compose.yml (services nginx, redis) use
python_image=docker.io/library/python:3.11-slim-bookworm
nginx_image=docker.io/library/nginx:1.29-alpine
redis_image=docker.io/library/redis:7-alpine
debian_image=docker.io/library/debian:bookworm-slim   # deploy/s3/Containerfile (docker-compose.s3.yml's `s3`)

say() { echo "[offline-bases] $*" >&2; }
have() { "$engine" image inspect "$1" >/dev/null 2>&1; }

rootfs() {
  have "$rootfs_image" && return
  command -v debootstrap >/dev/null || { say "debootstrap is missing (apt-get install debootstrap)"; exit 2; }
  local dir
  dir=$(mktemp -d)
  trap 'rm -rf "$dir"' RETURN
  say "debootstrap --variant=minbase $suite (about a minute)"
  debootstrap --variant=minbase "$suite" "$dir" "$mirror" >/dev/null
  rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/*
  tar -C "$dir" -c . | "$engine" import --quiet --change 'CMD ["bash"]' - "$rootfs_image" >/dev/null
}

# NAME CONTAINERFILE [CHECK]: build the stand-in unless NAME is already there. CHECK, a shell command run
# in the image, is what the stack needs of it (the real image passes it): an image that fails it is a
# stand-in built before that need, rebuilt here.
standin() {
  local name=$1 file=$2 check=${3:-} ctx old=
  if have "$name"; then
    if [ -z "$check" ] || "$engine" run --rm --entrypoint sh "$name" -c "$check" >/dev/null 2>&1; then
      say "$name is present: kept"
      return
    fi
    old=$("$engine" image inspect --format '{{.Id}}' "$name")
    say "$name is an older stand-in, without what the stack needs now ($check): rebuilt"
  fi
  rootfs
  ctx=$(mktemp -d)
  trap 'rm -rf "$ctx"' RETURN
  cp "$here"/*-entrypoint.sh "$ctx"/
  # pip inside the builds checks TLS against this machine's CA bundle (which may hold a proxy's CA)
  cp "${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}" "$ctx/host-ca-bundle.crt"
  say "building the stand-in $name"
  "$engine" build --format docker --build-arg "BASE=$rootfs_image" -f "$here/$file" -t "$name" "$ctx" >/dev/null
  if [ -n "$old" ]; then "$engine" image rm "$old" >/dev/null 2>&1 || true; fi  # the older stand-in, if unused
}

if ! have "$debian_image"; then  # Debian's own minimal root: the same packages as the real slim image, less trimmed
  rootfs
  "$engine" tag "$rootfs_image" "$debian_image"
fi
# the headers: the Dockerfile's builder compiles the lattice kernel (setup.py)
standin "$python_image" python.Containerfile \
  "python3 -c 'import os, sysconfig; raise SystemExit(not os.path.isfile(os.path.join(sysconfig.get_config_var(\"INCLUDEPY\"), \"Python.h\")))'"
standin "$nginx_image" nginx.Containerfile 'command -v busybox'   # deploy/nginx/40-api-shards.sh
standin "$redis_image" redis.Containerfile
say "done: $("$engine" image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E 'python:3.11-slim|nginx:1.29|redis:7|debian:bookworm' | tr '\n' ' ')"
