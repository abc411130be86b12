#!/bin/sh
# Entrypoint of the Redis stand-in (deploy/offline-bases): what the official image's entrypoint does for the
# way docker-compose.yml runs it. Options first (`redis-server` is implied), and protected mode off unless a
# config file given as the first argument sets it: the official image's default, so that the api and the
# trainers reach it over the compose network without a password. The image runs as `redis` already.
set -eu
case "${1:-}" in
  -* | *.conf) set -- redis-server "$@" ;;
esac
if [ "${1:-}" = redis-server ]; then
  shift
  if [ -f "${1:-}" ]; then
    config=$1
    shift
    if grep -q '^protected-mode' "$config"; then set -- redis-server "$config" "$@"
    else set -- redis-server "$config" --protected-mode no "$@"; fi
  else
    set -- redis-server --protected-mode no "$@"
  fi
fi
exec "$@"
