"""A real PostgreSQL server for the fit store tests: Debian's `postgresql` package (initdb and pg_ctl from
/usr/lib/postgresql/VERSION/bin), a fresh cluster in a temporary folder, on a free port on 127.0.0.1, trust
authentication, no fsync. PostgreSQL refuses to run as root; as root (CI), the cluster belongs to the
`postgres` user the package creates and its commands run through `runuser -u postgres`.

It skips with the reason when PostgreSQL or psycopg is missing; with INR_REQUIRE_POSTGRES=1 (CI) it fails.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from bench.common import free_port


def _missing(reason: str):
    if os.environ.get("INR_REQUIRE_POSTGRES") == "1":
        pytest.fail(f"{reason} and INR_REQUIRE_POSTGRES=1")
    pytest.skip(reason)


def _bindir() -> Path | None:
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).resolve().parent
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[4]))
    return Path(dirs[-1]).parent if dirs else None


class PostgresServer:
    def __init__(self):
        bindir = _bindir()
        if bindir is None:
            _missing("PostgreSQL is not installed (apt-get install postgresql)")
        try:
            import psycopg  # noqa: F401 - huey's PostgreSQL storage needs it
        except ImportError:
            _missing("psycopg is not installed (pip install 'psycopg[binary]>=3.2')")
        self.prefix: list[str] = []
        if os.geteuid() == 0:
            if not shutil.which("runuser"):
                _missing("running as root without runuser; PostgreSQL refuses to run as root")
            try:
                import pwd

                owner = pwd.getpwnam("postgres")
            except KeyError:
                _missing("running as root and there is no 'postgres' user to run PostgreSQL as")
            self.prefix = ["runuser", "-u", "postgres", "--"]
        self.dir = Path(tempfile.mkdtemp(prefix="inr-pg-"))
        if self.prefix:
            os.chown(self.dir, owner.pw_uid, owner.pw_gid)
        self.data, self.port = self.dir / "data", free_port()
        self.bindir = bindir
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync")
        options = (
            f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.dir / "log"), "-w", "-t", "60", "start")
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self._wait()

    def _run(self, tool: str, *args: str) -> None:
        done = subprocess.run(
            [*self.prefix, str(self.bindir / tool), *args], capture_output=True, text=True, timeout=120
        )
        if done.returncode != 0:
            raise RuntimeError(f"{tool} failed ({done.returncode}): {done.stderr[-2000:] or done.stdout[-2000:]}")

    def _wait(self) -> None:
        import psycopg

        deadline = time.monotonic() + 30
        while True:
            try:
                psycopg.connect(self.url, connect_timeout=5).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def flush(self) -> None:
        """Drop huey's tables: the next store starts empty (huey creates them again)."""
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute("drop table if exists huey_kv, huey_task, huey_schedule, huey_counter")

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
