#!/bin/sh
# Run by the nginx image's entrypoint (/docker-entrypoint.d/*.sh, when executable) before nginx starts:
# the `server` lines of the upstream `api_replicas` (nginx.conf.template), one per api replica, kept current.
# docs/sharding.md, "Sharding".
#
# Why a file of addresses: nginx places each upstream `server` on its consistent-hash ring by the server's
# *name*. The replicas of a scaled service share one DNS name, so `server api:8000 resolve;` (nginx >= 1.27.3)
# would give them all the same ring points and nginx would round-robin among them: no model would stick to a
# replica. Here each replica gets a line of its own, named by its address.
#
# Every NGINX_SHARDS_EVERY_S seconds (1) the script looks NGINX_API_HOST up again; when the set of addresses
# changed, it rewrites NGINX_SHARDS_FILE (atomically) and reloads nginx, which is graceful: requests in flight
# finish on the old workers. It asks the DNS server that nginx's resolver asks (NGINX_RESOLVER, from
# 15-container-resolver.envsh) with busybox's nslookup (Alpine's images have it), else the C library
# (getent). No answer from the DNS server: the last list is kept. The name has no address (no replica runs):
# one server marked `down`, so nginx answers its JSON 503 at once instead of trying dead addresses.
#
#   40-api-shards.sh          write the file, then keep it current in the background (what the entrypoint runs)
#   40-api-shards.sh once     write it once and exit
set -eu

host=${NGINX_API_HOST:?NGINX_API_HOST: the DNS name of the api replicas (compose: api)}
port=${NGINX_API_PORT:-8000}
file=${NGINX_SHARDS_FILE:-/etc/nginx/shards/api.conf}
every=${NGINX_SHARDS_EVERY_S:-1}

say() { echo "$0: $*" >&2; }

# The IPv4 addresses of $host, sorted, one a line, or "-" when the name has none; status 1 when no answer came.
lookup() {
    if command -v busybox >/dev/null 2>&1 && [ -n "${NGINX_RESOLVER:-}" ]; then
        # nginx's resolver syntax: ADDRESS[:PORT], an IPv6 address in brackets
        server=$NGINX_RESOLVER dns_port=53
        case $server in
            \[*\]:*) dns_port=${server##*:} server=${server%:*} ;;
            *:*:*) ;;
            *:*) dns_port=${server##*:} server=${server%:*} ;;
        esac
        server=$(printf %s "$server" | tr -d '[]')
        answer=$(busybox nslookup -type=a -port="$dns_port" "$host" "$server" 2>&1) || true
        case $answer in
            *NXDOMAIN* | *"No answer"*) echo -; return 0 ;;
        esac
        # the server's own line is "Address:<tab>IP:53"; answers are "Address: IP"
        ips=$(printf '%s\n' "$answer" | awk '$1 == "Address:" && $2 ~ /^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$/ { print $2 }')
    else
        ips=$(getent ahostsv4 "$host" 2>/dev/null) || {
            [ $? -eq 2 ] && { echo -; return 0; }  # not found
            return 1
        }
        ips=$(printf '%s\n' "$ips" | awk '{ print $1 }')
    fi
    [ -n "$ips" ] || return 1
    printf '%s\n' "$ips" | sort -u
}

# $1: lookup's answer -> NGINX_SHARDS_FILE, replaced in one rename
write() {
    tmp="$file.tmp.$$"
    printf '%s\n' "$1" | awk -v host="$host" -v port="$port" '
        BEGIN { print "# written by 40-api-shards.sh from the DNS answer for " host "; rewritten when it changes" }
        $1 != "-" && NF { print "server " $1 ":" port ";"; n++ }
        END { if (!n) print "server 127.0.0.1:" port " down;  # no address for " host ": no replica runs" }
    ' >"$tmp"
    mv -f "$tmp" "$file"
}

summary() {
    [ "$1" = - ] && { echo "$host: no address (no replica runs)"; return; }
    echo "$host: $(printf '%s\n' "$1" | wc -l | tr -d ' ') replica(s): $(printf '%s\n' "$1" | tr '\n' ' ')"
}

mkdir -p "$(dirname "$file")"
current=$(lookup) || current=-
write "$current"
say "$(summary "$current")"
[ "${1:-}" = once ] && exit 0

(
    set +e
    pending=
    while sleep "$every"; do
        found=$(lookup) || continue
        if [ "$found" != "$current" ]; then
            current=$found
            write "$current" && pending=1
            say "$(summary "$current")"
        fi
        # before nginx has started (no pid file yet) this fails: tried again at the next round
        if [ -n "$pending" ] && out=$(nginx -s reload 2>&1); then
            pending=
            say "nginx reloaded"
        elif [ -n "$pending" ] && [ -n "${out:-}" ]; then
            say "reload: $out"
        fi
    done
) </dev/null &
