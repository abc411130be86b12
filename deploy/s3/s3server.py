#!/usr/bin/env python3
"""An S3 server on one machine: OpenStack Swift with its S3 API (s3api), all in one process group.

    python3 deploy/s3/s3server.py --dir DIR --port 8333 [--access-key ACCOUNT:USER --secret-key KEY]

Debian's `swift-proxy`, `swift-account`, `swift-container`, `swift-object` and `memcached` packages (Swift is a
production object store; s3api is its S3 front end: SigV4, path-style buckets, ListObjectsV2 pages, ranged and
conditional GETs, multipart uploads). It writes its configuration and one-device rings into DIR (the objects go
to DIR/data; keep DIR and they survive a restart), starts memcached and the four servers, and answers S3 on
127.0.0.1:PORT (`--host 0.0.0.0` in a container) until SIGTERM or SIGINT, when it stops them all. The access key
is Swift's `ACCOUNT:USER` (default from $AWS_ACCESS_KEY_ID, else `inr:inr`), the secret $AWS_SECRET_ACCESS_KEY
(else `inr-secret`). Why Swift and not SeaweedFS: docs/s3.md, "Models on S3".
"""

from __future__ import annotations

import argparse
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

RING_PORTS = {"object": 1, "container": 2, "account": 3}  # offsets from --port: the storage servers' ports

PROXY = """[DEFAULT]
user = {run_as}
bind_ip = {host}
bind_port = {port}
workers = {workers}
swift_dir = {dir}
log_name = s3-proxy
log_level = {log_level}
log_udp_host =
[pipeline:main]
pipeline = catch_errors gatekeeper healthcheck proxy-logging cache listing_formats s3api tempauth copy slo dlo {last}
[app:proxy-server]
use = egg:swift#proxy
account_autocreate = true
node_timeout = 30
conn_timeout = 2
[filter:tempauth]
use = egg:swift#tempauth
user_{account}_{user} = {secret} .admin
[filter:s3api]
use = egg:swift#s3api
location = us-east-1
max_upload_part_num = 10000
allow_multipart_uploads = true
s3_acl = false
[filter:catch_errors]
use = egg:swift#catch_errors
[filter:gatekeeper]
use = egg:swift#gatekeeper
[filter:healthcheck]
use = egg:swift#healthcheck
[filter:proxy-logging]
use = egg:swift#proxy_logging
[filter:cache]
use = egg:swift#memcache
memcache_servers = 127.0.0.1:{memcache}
[filter:listing_formats]
use = egg:swift#listing_formats
[filter:copy]
use = egg:swift#copy
[filter:slo]
use = egg:swift#slo
[filter:dlo]
use = egg:swift#dlo
"""

STORAGE = """[DEFAULT]
user = {run_as}
bind_ip = 127.0.0.1
bind_port = {port}
workers = 0
swift_dir = {dir}
devices = {dir}/data
mount_check = false
disable_fallocate = true
log_name = s3-{kind}
log_level = {log_level}
[pipeline:main]
pipeline = {kind}-server
[app:{kind}-server]
use = egg:swift#{kind}
[{kind}-updater]
interval = 2
"""

SWIFT_CONF = """[swift-hash]
swift_hash_path_suffix = {suffix}
[storage-policy:0]
name = Policy-0
default = yes
"""


def write_config(folder: Path, host: str, port: int, account: str, user: str, secret: str, workers: int) -> None:
    """The configuration and the rings, once: a folder that has them is started as it is."""
    (folder / "data" / "d1").mkdir(parents=True, exist_ok=True)
    level = os.environ.get("S3_LOG_LEVEL", "WARNING")
    run_as = pwd.getpwuid(os.geteuid()).pw_name  # Swift drops to this user (its default, `swift`, may not exist)
    values = {"dir": folder, "host": host, "workers": workers, "log_level": level, "run_as": run_as}
    (folder / "proxy-server.conf").write_text(
        PROXY.format(
            **values,
            last="proxy-logging proxy-server",
            port=port,
            account=account,
            user=user,
            secret=secret,
            memcache=port + 4,
        )
    )
    for kind, offset in RING_PORTS.items():
        (folder / f"{kind}-server.conf").write_text(STORAGE.format(**values, kind=kind, port=port + offset))
    conf = folder / "swift.conf"
    if not conf.exists():
        conf.write_text(SWIFT_CONF.format(suffix=os.urandom(8).hex()))
    for kind, offset in RING_PORTS.items():
        if (folder / f"{kind}.ring.gz").exists():
            continue
        builder = str(folder / f"{kind}.builder")
        for args in (["create", "10", "1", "1"], ["add", f"r1z1-127.0.0.1:{port + offset}/d1", "1"], ["rebalance"]):
            subprocess.run(["swift-ring-builder", builder, *args], check=False, capture_output=True)
        if not (folder / f"{kind}.ring.gz").exists():
            sys.exit(f"error: swift-ring-builder could not build the {kind} ring in {folder}")


class StartFailed(Exception):
    pass


def wait_port(port: int, procs: list[subprocess.Popen], seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for p in procs:
            if p.poll() is not None:
                raise StartFailed(f"{p.args[0]} exited with {p.returncode} at start")
        with socket.socket() as s:
            s.settimeout(0.5)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise StartFailed(f"nothing answers on port {port} after {seconds:g} s")


def stop(procs: list[subprocess.Popen]) -> None:
    for p in reversed(procs):
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dir", required=True, type=Path, help="configuration, rings and objects")
    p.add_argument("--port", type=int, default=8333, help="the S3 port; the next four are the servers' own")
    p.add_argument("--host", default="127.0.0.1", help="the S3 port's address (0.0.0.0 in a container)")
    p.add_argument("--access-key", default=os.environ.get("AWS_ACCESS_KEY_ID", "inr:inr"), help="ACCOUNT:USER")
    p.add_argument("--secret-key", default=os.environ.get("AWS_SECRET_ACCESS_KEY", "inr-secret"))
    p.add_argument("--workers", type=int, default=int(os.environ.get("S3_WORKERS", "1")), help="proxy processes")
    args = p.parse_args()
    account, sep, user = args.access_key.partition(":")
    if not sep or not account.isalnum() or not user.isalnum():
        sys.exit(f"error: --access-key must be ACCOUNT:USER, letters and digits, got {args.access_key!r}")
    for tool in ("swift-ring-builder", "swift-proxy-server", "memcached"):
        if shutil.which(tool) is None:
            sys.exit(
                f"error: {tool} is missing: apt-get install swift-proxy swift-account swift-container "
                "swift-object memcached"
            )
    # Swift's servers re-run `python3` from PATH for their workers: Debian's, whatever venv started this
    for var in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"):
        os.environ.pop(var, None)
    os.environ["PATH"] = "/usr/sbin:/usr/bin:/sbin:/bin:" + os.environ.get("PATH", "")
    folder = args.dir.resolve()
    write_config(folder, args.host, args.port, account, user, args.secret_key, args.workers)
    procs: list[subprocess.Popen] = []
    user_args = ["-u", "root"] if os.geteuid() == 0 else []
    try:
        procs.append(
            subprocess.Popen(["memcached", *user_args, "-l", "127.0.0.1", "-p", str(args.port + 4), "-U", "0"])
        )
        for kind in RING_PORTS:
            procs.append(subprocess.Popen([f"swift-{kind}-server", str(folder / f"{kind}-server.conf")]))
        for offset in (4, *RING_PORTS.values()):
            wait_port(args.port + offset, procs)
        # a listing update the container server could not take at once (a busy machine) is saved by the object
        # server and sent by the updater: without it, such an object would never be listed
        procs.append(subprocess.Popen(["swift-object-updater", str(folder / "object-server.conf")]))
        procs.append(subprocess.Popen(["swift-proxy-server", str(folder / "proxy-server.conf")]))
        wait_port(args.port, procs)
    except StartFailed as e:  # nothing of it stays running (a port another process took meanwhile, say)
        stop(procs)
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 2
    print(f"s3server: S3 on {args.host}:{args.port}, objects in {folder / 'data'}", flush=True)

    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    signal.signal(signal.SIGINT, lambda *_: stopping.append(1))
    try:
        while not stopping and all(p.poll() is None for p in procs):
            time.sleep(0.2)
    finally:
        stop(procs)
    for p in procs:
        if not stopping and p.returncode not in (0, -signal.SIGTERM, None):
            print(f"s3server: {p.args[0]} exited with {p.returncode}", file=sys.stderr, flush=True)
    dead = [p for p in procs if p.returncode not in (0, -signal.SIGTERM, None)]
    return 0 if stopping or not dead else 1


if __name__ == "__main__":
    sys.exit(main())
