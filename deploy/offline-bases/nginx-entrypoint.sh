#!/bin/sh
# Entrypoint of the nginx stand-in (deploy/offline-bases). It does what the official image's
# entrypoint documents, for the parts docker-compose.yml uses, with the same names and meaning:
#   /docker-entrypoint.d/*.envsh      sourced, in name order, when executable (they export variables)
#   /docker-entrypoint.d/*.sh         run, in name order, when executable
#   NGINX_ENTRYPOINT_LOCAL_RESOLVERS  set: export NGINX_LOCAL_RESOLVERS, every nameserver of
#                                     /etc/resolv.conf (IPv6 in brackets)
#   NGINX_ENVSUBST_TEMPLATE_DIR       templates, default /etc/nginx/templates
#   NGINX_ENVSUBST_TEMPLATE_SUFFIX    default .template; the output name drops it
#   NGINX_ENVSUBST_OUTPUT_DIR         default /etc/nginx/conf.d
#   NGINX_ENVSUBST_FILTER             only set variables whose names match this regex are substituted
set -eu
say() { echo "$0: $*" >&2; }

if [ "${1:-}" = nginx ] || [ "${1:-}" = nginx-debug ]; then
  if [ -n "${NGINX_ENTRYPOINT_LOCAL_RESOLVERS:-}" ]; then
    NGINX_LOCAL_RESOLVERS=$(awk '$1 == "nameserver" { a = $2; if (a ~ /:/) a = "[" a "]";
                                 printf "%s%s", sep, a; sep = " " }' /etc/resolv.conf)
    export NGINX_LOCAL_RESOLVERS
  fi
  for f in $(find /docker-entrypoint.d -follow -type f -name '*.envsh' 2>/dev/null | sort); do
    if [ -x "$f" ]; then say "sourcing $f"; . "$f"; else say "ignoring $f, not executable"; fi
  done
  for f in $(find /docker-entrypoint.d -follow -type f -name '*.sh' 2>/dev/null | sort); do
    if [ -x "$f" ]; then say "running $f"; "$f"; else say "ignoring $f, not executable"; fi
  done
  templates=${NGINX_ENVSUBST_TEMPLATE_DIR:-/etc/nginx/templates}
  suffix=${NGINX_ENVSUBST_TEMPLATE_SUFFIX:-.template}
  out=${NGINX_ENVSUBST_OUTPUT_DIR:-/etc/nginx/conf.d}
  if [ -d "$templates" ]; then
    # substitute only variables that are set (and match the filter): nginx's own $host, $uri, ... stay
    names=$(env | sed -n 's/^\([A-Za-z_][A-Za-z0-9_]*\)=.*/\1/p' | grep -E -- "${NGINX_ENVSUBST_FILTER:-.}" || true)
    defined=$(printf '${%s} ' $names)
    find "$templates" -follow -type f -name "*$suffix" | while read -r template; do
      relative=${template#"$templates"/}
      target="$out/${relative%"$suffix"}"
      mkdir -p "$(dirname "$target")"
      envsubst "$defined" < "$template" > "$target"
      say "$template -> $target"
    done
  fi
fi
exec "$@"
