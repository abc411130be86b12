"""`python -m service`: serve the model repository with uvicorn.

Options override INR_* environment variables. A start that cannot go on prints one line, `error: …`, naming
the option, and exits with a code (docs/serving.md, "Running it"):

* 2: a bad option or setting, or a model repository that is not a readable folder;
* 3: a port that cannot be listened on (taken, or not allowed): --port / INR_PORT, --grpc-port / INR_GRPC_PORT.

Traces (docs/operations.md, "Traces") are off unless the standard OTEL_* variables or Triton's --trace-config
turn them on; a bad value of either is exit code 2 as well.
"""

from __future__ import annotations

import argparse
import copy
import errno
import logging
import os
import secrets
import socket
import sys
from pathlib import Path

from pydantic import SecretStr, ValidationError

from commandline import OneLineParser, parse_bytes
from modelrepo import StorageUnavailable, is_s3
from telemetry.config import read_config, trace_config_env
from telemetry.logs import configure

from .engine.memory import one_malloc_arena
from .errors import DeviceError
from .settings import Settings

OPTIONS = (
    "models",
    "fit_models",
    "host",
    "port",
    "grpc_port",
    "device",
    "workers",
    "threads",
    "log_level",
    "log_format",
    "cache_config",
    "model_control_mode",
    "repository_poll_secs",
    "load_model",
    "model_loading",
    "memory_budget",
    "pin_model",
    "max_concurrent_loads",
    "session_cache",
    "session_cache_bytes",
    "model_cache",
    "model_cache_bytes",
    "access_default",
    "access_keys",
    "forwarded_allow_ips",
    "http_restricted_api",
)
SECRET = {"http_restricted_api", "access_secret"}  # never echoed in an error
BAD_SETTING, NO_PORT = 2, 3  # exit codes


class PortUnavailable(Exception):
    """A port the service is to listen on cannot be bound (exit code 3)."""


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m service", description=__doc__.splitlines()[0])
    p.add_argument(
        "--models",
        help="model repository: a folder, or s3://[host:port/]bucket/path in Triton's form, credentials from AWS_* "
        "(INR_MODELS, default: models)",
    )
    p.add_argument(
        "--fit-models",
        metavar="DIR",
        help="the folder fits are written into, served beside --models as Triton serves several repositories; "
        "the fit workers' --models (INR_FIT_MODELS, default: none, fits go into --models)",
    )
    p.add_argument("--host", help="bind address (INR_HOST, default: 127.0.0.1)")
    p.add_argument("--port", help="port (INR_PORT, default: 8000)")
    p.add_argument("--grpc-port", help="KServe V2 gRPC port, 0 = off (INR_GRPC_PORT, default: 8001)")
    p.add_argument("--device", choices=("cpu", "cuda", "auto"), help="onnxruntime device (INR_DEVICE, default: cpu)")
    p.add_argument("--workers", help="uvicorn worker processes (INR_WORKERS, default: 1)")
    p.add_argument("--threads", help="onnxruntime threads per model, 0 = from the CPUs this process may use")
    p.add_argument("--log-level", choices=("debug", "info", "warning", "error"))
    p.add_argument(
        "--log-format",
        choices=("text", "json"),
        help="json: one JSON object per line; both carry the trace and span ids when traces are on "
        "(INR_LOG_FORMAT, default: text)",
    )
    p.add_argument(
        "--trace-config",
        action="append",
        metavar="[opentelemetry,]KEY=VALUE",
        help="traces, in Triton's form; repeatable: mode=opentelemetry turns them on; rate=N (one "
        "request in N; 0: only requests that bring a traceparent), level=OFF; opentelemetry,url="
        "URL, opentelemetry,protocol=grpc|http/protobuf (default: http/protobuf), "
        "opentelemetry,resource=KEY=VALUE, opentelemetry,bsp_max_queue_size=N, bsp_schedule_delay="
        "MS, bsp_max_export_batch_size=N. Over the OTEL_* variables (docs/operations.md, Traces)",
    )
    p.add_argument(
        "--cache-config",
        metavar="local,size=BYTES",
        help="the byte budget of the cache store that renders and response caches share, in Triton's "
        "form (INR_CACHE_CONFIG; default: INR_RENDER_CACHE_BYTES, 64 MiB)",
    )
    control = p.add_argument_group("model control (Triton's options)")
    control.add_argument(
        "--model-control-mode",
        choices=("none", "poll", "explicit"),
        help="none: load all at start; poll: also rescan the repository and load, reload and "
        "unload what changed; explicit: load and unload through /v2/repository "
        "(INR_MODEL_CONTROL_MODE, default: none)",
    )
    control.add_argument("--repository-poll-secs", help="poll mode: seconds between scans (default: 15)")
    control.add_argument(
        "--load-model",
        action="append",
        metavar="NAME",
        help="explicit mode: load NAME at start; repeatable; '*' loads all (INR_LOAD_MODEL)",
    )
    memory = p.add_argument_group("memory budget (docs/operations.md, Memory budget)")
    memory.add_argument(
        "--model-loading",
        choices=("on-demand", "startup"),
        help="on-demand: list the models at start, load each on first use within --memory-budget; startup: "
        "load every model at start and keep it (INR_MODEL_LOADING, default: on-demand)",
    )
    memory.add_argument(
        "--memory-budget",
        metavar="BYTES",
        help="bytes of resident models, e.g. 2GiB; past it the least recently used are unloaded "
        "(INR_MEMORY_BUDGET, default: half the container's memory limit, else the machine's)",
    )
    memory.add_argument(
        "--pin-model",
        action="append",
        metavar="NAME",
        help="load NAME at start and never unload it; repeatable (INR_PIN_MODEL)",
    )
    memory.add_argument(
        "--max-concurrent-loads", help="models loading at once; more wait, then 503 (INR_MAX_CONCURRENT_LOADS)"
    )
    memory.add_argument(
        "--session-cache",
        metavar="DIR",
        help="folder of optimised sessions that later loads of a model read instead of optimising it again; "
        "'off': none; private to this user (INR_SESSION_CACHE, default: $XDG_CACHE_HOME/inr-serve/sessions, else "
        "~/.cache/inr-serve/sessions)",
    )
    memory.add_argument(
        "--session-cache-bytes", metavar="BYTES", help="its size on disk (INR_SESSION_CACHE_BYTES, default: 2GiB)"
    )
    memory.add_argument(
        "--model-cache",
        metavar="DIR",
        help="with --models s3://…: the folder models are pulled into on first use, kept across restarts, "
        "private to this user (INR_MODEL_CACHE, default: $XDG_CACHE_HOME/inr-serve/models, else "
        "~/.cache/inr-serve/models)",
    )
    memory.add_argument(
        "--model-cache-bytes",
        metavar="BYTES",
        help="its version files' size on disk, least recently used out (INR_MODEL_CACHE_BYTES, default: 4GiB)",
    )
    p.add_argument(
        "--access-default",
        choices=("public", "restricted"),
        help="the access of a model whose config.pbtxt names none (INR_ACCESS_DEFAULT, default: public; "
        "docs/access.md); the signing key is INR_ACCESS_SECRET",
    )
    p.add_argument("--access-keys", metavar="FILE", help="the API keys' file (INR_ACCESS_KEYS; python -m service.auth)")
    p.add_argument(
        "--forwarded-allow-ips",
        metavar="ADDRESSES",
        help="the proxies in front whose X-Forwarded-* and trusted user headers are believed, comma-separated "
        "addresses or networks (INR_FORWARDED_ALLOW_IPS, default: none; docs/security.md)",
    )
    control.add_argument(
        "--http-restricted-api",
        action="append",
        metavar="API[,API...]:KEY=VALUE",
        help="requests to these API groups need the header KEY: VALUE, else 403; repeatable, "
        "e.g. model-repository:admin-key=SECRET (INR_HTTP_RESTRICTED_API)",
    )
    return p


def settings_from(args: argparse.Namespace) -> Settings:
    given = {k: getattr(args, k) for k in OPTIONS if getattr(args, k) is not None}
    try:
        settings = Settings(**given)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"][:1])
        msg = err["msg"].removeprefix("Value error, ")
        if not where:  # a rule across settings; its message names them
            raise ValueError(msg) from None
        got = "" if where in SECRET else f" (got {err.get('input')!r})"
        raise ValueError(f"--{where.replace('_', '-')}: {msg}{got}") from None
    if is_s3(settings.models):
        present = s3_models(settings, listed=bool(settings.load_model or settings.pin_model))
    else:
        models = Path(settings.models)
        if not models.is_dir():
            raise ValueError(f"--models '{settings.models}' is not a directory")
        try:
            os.listdir(models)
        except OSError as e:
            raise ValueError(f"--models '{settings.models}' cannot be read ({e.strerror})") from None
        present = None
    for option, names in (("--load-model", settings.load_model), ("--pin-model", settings.pin_model)):
        missing = [
            n
            for n in names
            if n != "*" and not (n in present if present is not None else (Path(settings.models) / n).is_dir())
        ]
        if missing:
            raise ValueError(f"{option} {missing[0]}: no model folder '{missing[0]}' in {settings.models}")
    return settings


def s3_models(settings: Settings, listed: bool) -> set[str]:
    """A repository on S3 checked before the start: its bucket and the credentials (one line, exit 2 when S3
    refuses them); a server that does not answer is fatal only with nothing in the disk cache to serve. The models
    listed."""
    from modelrepo.s3 import RepositoryError, S3Repository

    repo = S3Repository(
        settings.models, settings.model_cache, parse_bytes(settings.model_cache_bytes), settle_s=settings.s3_settle_s
    )
    try:
        repo.check()
    except RepositoryError as e:
        raise ValueError(f"--models: {e}") from None
    except StorageUnavailable as e:
        if not any(p.is_dir() for p in repo.root.iterdir()):
            raise ValueError(f"--models: {e}, and the model cache {repo.root} (INR_MODEL_CACHE) is empty") from None
        logging.getLogger("service").warning("--models: %s; starting from the model cache %s", e, repo.root)
    return set(repo.scan()) if listed else set()  # the names, only when options name models (a listing costs)


def check_port(host: str, port: int, option: str) -> None:
    """Bind `host:port` and let it go, as the server will bind it (SO_REUSEADDR, as uvicorn and gRPC do), so
    that a taken port is one line before the models load; PortUnavailable names the option."""
    if not port:
        return
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise ValueError(f"--host {host!r}: {e.strerror}") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(address)
        except OSError as e:
            why = "is taken by another process" if e.errno == errno.EADDRINUSE else f"cannot be bound ({e.strerror})"
            raise PortUnavailable(f"{option}: port {port} on {host} {why}") from None


def check_ports(settings: Settings) -> None:
    check_port(settings.host, settings.port, "--port / INR_PORT")
    if settings.grpc_port == settings.port and settings.port:
        raise ValueError(f"--grpc-port / INR_GRPC_PORT: {settings.grpc_port} is also the HTTP port (--port)")
    check_port(settings.host, settings.grpc_port, "--grpc-port / INR_GRPC_PORT (0 turns gRPC off)")


def probe_cuda(models: str | Path, cache: str | None = None, cache_bytes: str = "4GiB") -> bool:
    """Load the first loadable model on CUDA: True if it runs there, False if no model could be loaded.
    Raises DeviceError when the session does not really run on CUDA (session.get_providers())."""
    from modelrepo import SpecError, open_repository, read_spec, version_numbers

    from .engine.runtime import ModelRuntime, RuntimeOptions

    repo = open_repository(models, cache, max_bytes=parse_bytes(cache_bytes))
    for name in repo.scan():
        try:
            path = repo.folder(name)
            spec = read_spec(path)
        except (SpecError, StorageUnavailable):
            continue
        for n in reversed(spec.version_policy.select(version_numbers(path))):
            if ModelRuntime(path, spec, n, RuntimeOptions(device="cuda", threads=1, repository=repo)).load():
                return True
    return False


def resolve_device(settings: Settings) -> Settings:
    """cuda: refuse to start unless a model session really runs on CUDA.
    auto: CUDA when that works, else CPU; say which."""
    import onnxruntime as ort

    from .engine.sessions import CUDA, check_device_available

    log = logging.getLogger("service")
    if settings.device == "cuda":
        check_device_available("cuda")
        probe_cuda(settings.models, settings.model_cache, settings.model_cache_bytes)
    elif settings.device == "auto":
        device = "cpu"
        if CUDA in ort.get_available_providers():
            try:
                probe_cuda(settings.models, settings.model_cache, settings.model_cache_bytes)
                device = "cuda"
            except DeviceError as e:
                log.warning("--device auto: %s", e)
        log.info("--device auto: using %s", "CUDAExecutionProvider" if device == "cuda" else "CPUExecutionProvider")
        settings = settings.model_copy(update={"device": device})
    return settings


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = settings_from(args)
        env = trace_config_env(args.trace_config)  # the OTEL_* variables, --trace-config over them
        read_config(env)  # checked here, so that a bad one is one line before anything starts
        configure(settings.log_level.upper(), settings.log_format)
        settings = resolve_device(settings)
        check_ports(settings)
    except (ValueError, DeviceError, PortUnavailable) as e:
        sys.stderr.write(f"error: {e}\n")
        return NO_PORT if isinstance(e, PortUnavailable) else BAD_SETTING
    import uvicorn

    if not settings.access_secret.get_secret_value():  # one random key for all the workers of this start
        settings = settings.model_copy(update={"access_secret": SecretStr(secrets.token_urlsafe(48))})
    one_malloc_arena()  # before the threads that would each take an arena (service/engine/memory.py)
    # Worker processes build their own app from the environment, so pass the settings that way.
    os.environ.update(env)
    os.environ.update(settings.environment())
    # The app drains on SIGTERM for up to INR_GRACEFUL_SHUTDOWN_S (service/server/drain.py) before uvicorn's
    # own shutdown starts, which then gives what still runs one more second.
    uvicorn.run(
        "service.app:create_app",
        factory=True,
        host=settings.host,
        port=settings.port,
        workers=settings.workers,
        log_level=settings.log_level,
        log_config=log_config(settings.log_level, settings.log_format),
        timeout_keep_alive=settings.timeout_keep_alive,
        timeout_graceful_shutdown=1,
        http="service.server.guards:HeaderTimeoutProtocol",
        proxy_headers=False,  # the app's own ForwardedHeaders, from INR_FORWARDED_ALLOW_IPS only
    )
    return 0


def log_config(level: str, fmt: str = "text") -> dict:
    """uvicorn's logging config plus the service's own loggers (and modelrepo's), so that every worker process
    logs them; every line with the trace and span ids when a span is current (telemetry.logs), and with
    `fmt` json, every line a JSON object."""
    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    for name in ("service", "modelrepo"):
        config["loggers"][name] = {"handlers": ["default"], "level": level.upper(), "propagate": False}
    # the audit lines of fits and keys (docs/access.md), whatever the level: an operator needs them all
    config["loggers"]["inr.audit"] = {"handlers": ["default"], "level": "INFO", "propagate": False}
    # every line with its trace ids, and no credential a client put in a URL (service/auth/redact.py)
    config["filters"] = {
        "trace": {"()": "telemetry.logs.TraceIds"},
        "redact": {"()": "service.auth.redact.RedactTokens"},
    }
    for handler in config["handlers"].values():
        handler["filters"] = ["trace", "redact"]
    for formatter in config["formatters"].values():
        if fmt == "json":
            formatter.clear()
            formatter["()"] = "telemetry.logs.JsonFormatter"
        else:
            formatter["fmt"] += "%(trace)s"
    return config


if __name__ == "__main__":
    sys.exit(main())
