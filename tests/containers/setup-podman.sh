#!/usr/bin/env bash
# Makes Podman usable for tests/containers on a Debian machine like this project's CI (root, no
# systemd, cgroups in hybrid mode, no CAP_SYS_RESOURCE, no registry): packages, then the engine
# settings that these machines need. For the test harness only; the images and the compose file
# need none of it. Idempotent.
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "setup-podman.sh: run as root" >&2; exit 2; }
export DEBIAN_FRONTEND=noninteractive
# netavark + aardvark-dns: bridge networks where services find each other by name (iptables for
# netavark's rules); catatonit: the pause process of `podman kube play`; debootstrap: the offline bases
apt-get install -y -qq --no-install-recommends \
  podman runc netavark aardvark-dns iptables catatonit debootstrap >/dev/null
mkdir -p /etc/containers/containers.conf.d
cat > /etc/containers/containers.conf.d/50-inr-tests.conf <<'CONF'
[containers]
# containers cannot raise rlimits here: stay within the current ones
default_ulimits = ["nofile=20000:20000", "nproc=4096:4096"]
[engine]
# crun fails on these machines ("cgroups in hybrid mode")
runtime = "runc"
CONF
podman info --format 'podman {{.Version.Version}}, runtime {{.Host.OCIRuntime.Name}}, network {{.Host.NetworkBackend}}' 2>/dev/null
