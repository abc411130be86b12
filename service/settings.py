"""Service settings: environment variables with the prefix INR_, overridden by the command line."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from commandline import parse_bytes
from fitstore import DEFAULT as DEFAULT_STORE
from fitstore import check_url
from fitstore.uploads import DEFAULT as DEFAULT_UPLOADS
from fitstore.uploads import SCRATCH, SCRATCH_SETTING
from modelrepo.private_dir import check as check_cache
from modelrepo.private_dir import default_cache

from .auth.restricted import RestrictedGroup, check_groups

MiB = 1024 * 1024
GiB = 1024 * MiB


def cache_size(spec: str) -> int:
    """Bytes from Triton's `local,size=BYTES` (the only cache implementation here is the local one)."""
    kind, _, rest = spec.partition(",")
    key, eq, size = rest.partition("=")
    if kind.strip() != "local" or key.strip() != "size" or not eq:
        raise ValueError("expected local,size=BYTES (Triton's form), e.g. local,size=67108864")
    if not size.strip().isdigit():
        raise ValueError(f"size must be a whole number of bytes, got {size.strip()!r}")
    return int(size)


class Settings(BaseSettings):
    """Every field can be set as INR_<FIELD>, e.g. INR_MODELS=models INR_DEVICE=auto."""

    # hide_input_in_errors: a bad INR_HTTP_RESTRICTED_API must not print its secret in a traceback
    model_config = SettingsConfigDict(env_prefix="INR_", extra="ignore", hide_input_in_errors=True)

    models: str = Field(
        "models",
        description="model repository: a folder of one folder per model, or s3://[host:port/]bucket/path in Triton's "
        "form (AWS_* variables give the credentials; docs/s3.md, 'Models on S3')",
    )
    fit_models: str = Field(
        "",
        description="the folder fits are written into, served beside --models as Triton serves several model "
        "repositories (modelrepo/union.py); the fit workers' --models names the same folder. `make serve` and `make "
        "worker` use build/fitted, so the bundled models/ stay as git has them; empty: fits go into --models",
    )

    @field_validator("fit_models")
    @classmethod
    def _fit_folder(cls, value: str, info) -> str:
        """A folder beside a folder of models: with models on S3 fits are published into the bucket."""
        models = str(info.data.get("models", ""))
        if value and (value.startswith("s3://") or models.startswith("s3://")):
            raise ValueError(
                "a folder beside a --models folder; with models on S3 the fit workers publish into the bucket "
                "(leave INR_FIT_MODELS empty)"
            )
        if value and Path(value).resolve() == Path(models).resolve():
            return ""  # the same folder: one repository
        return value

    model_cache: str = Field(
        default_factory=lambda: str(default_cache("models")),
        description="with models on S3: the local folder the models are pulled into on first use, kept across "
        "restarts and revalidated by ETag; private to this user (modelrepo/private_dir.py; another user's, or one "
        "that group or others can write, is refused); default: $XDG_CACHE_HOME/inr-serve/models, else "
        "~/.cache/inr-serve/models",
    )
    model_cache_bytes: str = Field(
        "4GiB",
        description="with models on S3: the model cache's bytes on disk, as du counts them; past it, the least "
        "recently used version files go",
    )
    s3_settle_s: float = Field(
        30.0,
        ge=1.0,
        le=86400.0,
        description="with models on S3: a version uploaded without this project's .published marker (aws s3 sync, "
        "boto3, rclone) is served once it has no writer's claim, its model.onnx and the files its metadata.json "
        "names are there, and nothing in it or its model's own files is younger than this, by S3's clock "
        "(docs/s3.md, 'Models on S3')",
    )
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    grpc_port: int = Field(8001, ge=0, le=65535, description="KServe V2 gRPC port (Triton's 8001); 0 turns gRPC off")
    device: Literal["cpu", "cuda", "auto"] = "cpu"
    workers: int = Field(1, ge=1, le=64, description="uvicorn worker processes")
    threads: int = Field(
        0,
        ge=0,
        le=256,
        description="onnxruntime intra-op threads per model; 0 = CPUs this "
        "process may use (affinity, cgroup quota) / workers",
    )
    split_rows: int = Field(
        4096,
        ge=0,
        le=1_048_576,
        description="an image model's runs of more rows than this are cut into pieces of about this many rows, "
        "run side by side on INR_THREADS threads shared by every model; 0 = never cut",
    )
    spin: bool = Field(
        False,
        description="onnxruntime threads busy-wait between runs: a little faster on "
        "dedicated cores, much slower when cores are shared",
    )
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["text", "json"] = Field(
        "text", description="json: one JSON object per line (with the trace and span ids when traces are on)"
    )

    # Limits: each one is answered with a 4xx naming it.
    max_query_coords: int | None = Field(
        None,
        ge=1,
        description="coordinates per query or V2 infer request; "
        "unset = the image model's max_batch_size (config.pbtxt)",
    )
    max_render_pixels: int = Field(16_777_216, ge=1, description="width × height × supersample² per render")
    max_supersample: int = Field(8, ge=1, le=16, description="largest supersample factor k (k×k samples)")
    max_classify_images: int | None = Field(
        None,
        ge=1,
        description="images per classify or V2 infer request; unset = the digits model's max_batch_size (config.pbtxt)",
    )
    max_classify_bytes: int = Field(8 * MiB, ge=1, description="bytes of uploaded files per /classify request")
    max_upload_pixels: int = Field(25_000_000, ge=1, description="pixels of one uploaded image (decompression bombs)")
    max_body_bytes: int = Field(16 * MiB, ge=1, description="request body size; larger bodies get 413")
    render_concurrency: int = Field(
        4, ge=1, le=64, description="renders in flight (memory bound: one output image each); more wait for a slot"
    )
    # Small tiles keep a tile's [N, features] intermediates in L2: 8192 ran at 1.2-1.6x the coordinates/s of
    # 65 536 (docs/benchmarks.md, roofline). 4096 was measured beside it (docs/benchmarks.md, grid_render): faster
    # bare, but a 512² IIIF tile has 64 tiles' Python work instead of 36, and through the service it came out
    # 11 % slower.
    render_tile_samples: int = Field(8_192, ge=256, description="model samples per render tile (memory bound)")
    # Render core (service/render/scheduler.py, render_cache.py): tiles of concurrent renders take turns.
    # Tiles side by side on one-thread sessions beat one tile at a time on a multi-thread session: a grid
    # model's graph is many small passes, each a fork and join of the intra-op pool (docs/benchmarks.md, grid_render).
    render_workers: int = Field(
        0,
        ge=0,
        le=64,
        description="threads computing render tiles; the tiles of "
        "the renders in flight take turns on them; 0 = CPUs "
        "this process may use / INR_RENDER_THREADS",
    )
    render_threads: int = Field(
        1,
        ge=1,
        le=256,
        description="onnxruntime intra-op threads of the sessions that compute render tiles (image models on CPU)",
    )
    render_timeout_s: float = Field(
        60.0, gt=0, description="a render still running after this many seconds stops at its next tile and answers 503"
    )
    # Admission by estimated cost (service/render/admission.py): a render's cost is its samples × the model's
    # measured CPU seconds a sample in the render workers (a running estimate per model, version and path).
    render_max_cost_s: float = Field(
        20.0,
        gt=0,
        description="estimated CPU seconds of rendering one render may cost; more is refused up front (413): a "
        "4096² render of a grid model is ~1 s, of the bundled Fourier astronaut ~33 s (1024² at supersample 2: "
        "~8-12 s, which the API docs show)",
    )
    render_cheap_cost_s: float = Field(
        1.0,
        ge=0,
        description="renders estimated at most this many CPU seconds (viewer tiles) have their own "
        "INR_RENDER_CONCURRENCY slots, never queued behind dearer ones",
    )
    render_caller_share: int = Field(
        2,
        ge=1,
        le=64,
        description="dearer renders one caller (a key, or an anonymous client's address) may have in flight "
        "or waiting; more get 429 with Retry-After",
    )
    render_cache_bytes: int = Field(
        64 * MiB, ge=0, description="bytes of encoded renders kept in memory (LRU); 0 turns the cache off"
    )
    cache_config: str = Field(
        "",
        description="Triton's --cache-config local,size=BYTES: the byte budget of the "
        "one cache store that renders and inference responses (models with "
        "response_cache enabled) share; empty = render_cache_bytes",
    )
    render_cache_max_age_s: int = Field(
        60,
        ge=0,
        description="Cache-Control max-age of a render whose URL does "
        "not pin a model version: how long browsers and "
        "nginx may show it after the model changes",
    )

    # Dynamic batching (service/engine/batching.py): concurrent requests to one model share one onnxruntime run.
    batching: bool = Field(True, description="merge concurrent query/classify/infer requests per model")
    max_batch: int | None = Field(
        None,
        ge=1,
        description="rows (coordinates or images) per batched run; unset = each model's max_batch_size (config.pbtxt)",
    )
    batch_policy: Literal["auto", "adaptive", "delay"] = Field(
        "auto",
        description="adaptive: a free instance runs what is queued at once, and requests gather while "
        "the instances are busy (no wait without contention); delay: Triton's fixed wait for "
        "batch-mates (max_queue_delay); auto = delay when INR_MAX_QUEUE_DELAY_MS is set, "
        "else adaptive",
    )
    max_queue_delay_ms: float | None = Field(
        None,
        ge=0,
        le=1000,
        description="with the delay policy, the longest "
        "wait for batch-mates after the oldest queued request; unset = each "
        "model's dynamic_batching max_queue_delay_microseconds (config.pbtxt)",
    )
    max_queue: int = Field(1024, ge=1, description="requests waiting per model; more get 503")
    batch_instances: int = Field(
        2, ge=1, le=64, description="batched runs of one model at once (one gathers while another computes)"
    )
    inline_run_ms: float = Field(
        2.0,
        ge=0,
        le=100,
        description="a request that is the only one in flight, to an "
        "idle model whose last runs took at most this long for its rows, runs on the event "
        "loop instead of a pool thread (saves the hand-off); 0 = always a thread",
    )

    # Connections, deadlines and shutdown. The keep-alive outlives the idle timeouts of the
    # proxies in front (nginx 75 s, AWS ALB 60 s), so that the proxy, not the server, closes an idle
    # connection and never sends on one the server has just closed.
    timeout_keep_alive: float = Field(
        90.0, gt=0, le=3600, description="seconds an idle keep-alive connection stays open"
    )
    graceful_shutdown_s: float = Field(
        20.0, ge=0, le=3600, description="on SIGTERM, seconds running requests get to finish before the process exits"
    )
    queue_timeout_s: float = Field(
        10.0,
        gt=0,
        le=3600,
        description="longest wait for a batch or a render slot; longer waits get 503 with Retry-After",
    )
    header_timeout_s: float = Field(
        10.0, gt=0, le=3600, description="seconds a client may take to send the request line and headers (slowloris)"
    )
    body_timeout_s: float = Field(
        30.0, gt=0, le=3600, description="seconds a client may stay silent while sending a request body"
    )

    # IIIF Image API 3.0 (service/iiif, docs/iiif.md).
    iiif_zoom: int = Field(
        16,
        ge=1,
        le=4096,
        description="IIIF upscaling: maxWidth/maxHeight = the native size × "
        "this (width/height are the native size; `^` sizes "
        "up to this)",
    )
    iiif_base_url: str = Field(
        "",
        description="public URL that /iiif/3 is reached at behind a proxy, "
        "e.g. https://example.org/inr/iiif/3; empty: from the "
        "request and its X-Forwarded-Proto/Host/Port/Prefix",
    )
    iiif_collection_page: int = Field(
        1000, ge=1, le=1000, description="models per page of the IIIF collection; more make it a collection of pages"
    )
    iiif_max_age: int = Field(3600, ge=0, description="Cache-Control max-age of IIIF tiles and info.json, seconds")

    # Fits over HTTP (docs/fits.md): the API queues, workers (python -m training worker) fit.
    fit_store: str = Field(
        DEFAULT_STORE,
        description="the job store the API and the workers "
        "share: sqlite:///PATH (relative to the working directory), redis://HOST:PORT/DB or "
        "postgresql://USER:PASS@HOST/DB",
    )
    fit_max_upload_bytes: int = Field(
        3 * GiB,  # an uncompressed 8-bit RGB TIFF of INR_FIT_MAX_UPLOAD_PIXELS, and its header
        ge=1,
        description="bytes of one uploaded image for POST /v1/fits, streamed to INR_FIT_UPLOADS as it arrives "
        "(its request body may be this plus 64 KiB of multipart envelope)",
    )
    fit_max_upload_pixels: int = Field(
        1_000_000_000,
        ge=1,
        description="pixels of one JPEG, PNG or TIFF uploaded to fit, read from its header; one over "
        "INR_MAX_UPLOAD_PIXELS is kept as a file and read by region, never decoded whole (docs/fits.md)",
    )
    fit_anonymous_max_pixels: int = Field(
        25_000_000,
        ge=1,
        description="pixels a fit queued without credentials may fit (after its size cap): what an anonymous caller "
        "may cost the workers (docs/security.md, 'Worker time'); a key or token is held to INR_FIT_MAX_UPLOAD_PIXELS",
    )
    fit_access: Literal["open", "key"] = Field(
        "open",
        description="open: anyone may queue and cancel fits (as before); key: only a token or API key with the "
        "scope fit (or admin), within its quotas (docs/access.md)",
    )
    fit_uploads: str = Field(
        DEFAULT_UPLOADS,
        description="folder the uploads to fit are streamed into, shared with the workers (worker --uploads), or a "
        "bucket, s3://[host:port/]bucket/path, that they share instead: a large image stays there, read by region, "
        "until its job is split into blocks or ends",
    )
    fit_max_size: int = Field(
        32768,
        ge=16,
        le=32768,
        description="largest cap on the longer side a fit may ask "
        "for (size); without one, an upload is fitted whole at its native size",
    )
    fit_max_steps: int = Field(20_000, ge=1, description="most optimisation steps of one fit")
    fit_block_size: int = Field(
        2048,  # a block's grid stays in the packed dense graph: exact export, fast load (docs/benchmarks.md, giant)
        ge=16,
        le=65536,
        description="the side of the blocks an upload is fitted in, at its native size, when a worker cannot hold it "
        "as one model or the job asks for blocks: each block a job on the queue (docs/fits.md, One model or blocks)",
    )
    fit_block_overlap: int = Field(32, ge=0, le=1024, description="pixels each block reaches into its neighbours")
    fit_max_running: int = Field(1, ge=1, le=64, description="fits running at once across all workers")
    fit_queue_limit: int = Field(4, ge=0, description="fits waiting beyond the running ones; more get 429")
    fit_deadline_s: float = Field(900.0, gt=0, description="wall-clock seconds one fit may run; then it fails")
    fit_stale_s: float = Field(
        15.0,
        gt=0,
        description="a running fit whose worker sent no heartbeat for this long is retried once, then failed",
    )

    # Model control (service/engine/control.py), with Triton's names and meanings.
    model_control_mode: Literal["none", "poll", "explicit"] = Field(
        "none",
        description="none: load every model at start, ignore changes; poll: also rescan the repository "
        "every repository_poll_secs; explicit: load only load_model at start, then only on "
        "POST /v2/repository/models/NAME/load",
    )
    repository_poll_secs: float = Field(15.0, gt=0, le=86_400, description="poll mode: seconds between scans")
    load_model: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="explicit mode: models loaded at start ('*' = all); comma-separated"
    )
    # The memory budget (service/engine/residency.py, docs/operations.md "Memory budget").
    model_loading: Literal["on-demand", "startup"] = Field(
        "on-demand",
        description="on-demand: list the models at start and load each on first use, within memory_budget; "
        "startup: load every model at start (explicit mode: the load_model ones) and keep it",
    )
    memory_budget: str = Field(
        "",
        description="bytes of resident models, e.g. 2GiB or 512MiB; least recently used ones are unloaded past "
        "it; empty: half the container's memory limit, else half the machine's memory",
    )
    session_cache: str = Field(
        default_factory=lambda: str(default_cache("sessions")),
        description="folder of optimised sessions, so that a model's later loads skip onnxruntime's optimisation "
        "(service/engine/session_cache.py); 'off': none; private to this user as the model cache is; default: "
        "$XDG_CACHE_HOME/inr-serve/sessions, else ~/.cache/inr-serve/sessions",
    )
    session_cache_bytes: str = Field("2GiB", description="disk bytes of the session cache; least recently used past it")

    @field_validator("model_cache", "session_cache")
    @classmethod
    def _private_cache(cls, value: str, info) -> str:
        """A cache folder another user could write (theirs, or writable by group or others) is refused at the start,
        before anything is read from it or written to it (modelrepo/private_dir.py)."""
        if info.field_name == "session_cache" and value.strip().lower() in ("", "off"):
            return value
        check_cache(value, f"INR_{info.field_name.upper()}")
        return value

    pin_model: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="models loaded at start and never unloaded; comma-separated"
    )
    max_concurrent_loads: int = Field(
        2, ge=1, le=64, description="models loading at once; more wait for a slot within queue_timeout_s, then get 503"
    )
    # Model access (service/auth/, docs/access.md).
    access_default: Literal["public", "restricted"] = Field(
        "public", description="the policy of a model whose config.pbtxt has no access parameter"
    )
    access_secret: SecretStr = Field(
        SecretStr(""),
        description="the key that signs access tokens, at least 32 characters, the same on every replica; "
        "empty: random at start (tokens end with the process)",
    )
    access_keys: Path | None = Field(
        None, description="the API keys' file (hashed; python -m service.auth keys); none: no keys"
    )
    access_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="origins (scheme://host[:port]) besides this service's own whose pages may log in and get access "
        "tokens (IIIF Auth 2.0's token service); comma-separated",
    )
    access_trusted_header: str = Field(
        "",
        description="IIIF's external pattern: a header a proxy in front sets to the authenticated user (and must "
        "strip from clients' requests), e.g. X-Remote-User; empty: none",
    )
    access_trusted_scopes_header: str = Field(
        "", description="the header the proxy sets to that user's scopes, space- or comma-separated"
    )
    forwarded_allow_ips: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="addresses or networks (10.0.0.0/8; * for any) of the proxies in front whose X-Forwarded-* "
        "headers and trusted user and scopes headers are believed; from any other peer they are removed "
        "(service/server/forwarded.py); comma-separated; empty: no proxy is trusted",
    )
    access_token_ttl_s: int = Field(300, ge=10, le=86_400, description="seconds an access token lives")
    http_restricted_api: Annotated[list[RestrictedGroup], NoDecode] = Field(
        default_factory=list,
        description="API[,API...]:HEADER=VALUE groups that need that header; "
        "several groups separated by ';' (or a JSON list)",
    )

    @field_validator(
        "load_model", "pin_model", "http_restricted_api", "access_origins", "forwarded_allow_ips", mode="before"
    )
    @classmethod
    def _split(cls, value, info):
        """An environment string: a JSON list, or items separated by ',' (models) or ';' (groups)."""
        if isinstance(value, str):
            value = (
                json.loads(value)
                if value.lstrip().startswith("[")
                else [v for v in value.split(";" if info.field_name == "http_restricted_api" else ",") if v.strip()]
            )
        if info.field_name == "http_restricted_api":
            return [RestrictedGroup.parse(v) if isinstance(v, str) else v for v in value]
        return [v.strip() for v in value]

    @field_validator("access_origins")
    @classmethod
    def _access_origins(cls, value: list[str]) -> list[str]:
        for origin in value:
            if not re.fullmatch(r"https?://[A-Za-z0-9.\-\[\]:]+", origin):
                raise ValueError(f"'{origin[:80]}' is not an origin: scheme://host[:port], no path or slash at the end")
        return value

    @field_validator("forwarded_allow_ips")
    @classmethod
    def _forwarded_allow_ips(cls, value: list[str]) -> list[str]:
        from .auth.proxies import parse_networks

        parse_networks(value)  # ValueError naming the bad item
        return value

    @field_validator("access_secret")
    @classmethod
    def _access_secret(cls, value: SecretStr) -> SecretStr:
        if value.get_secret_value() and len(value.get_secret_value().encode()) < 32:
            raise ValueError("must be at least 32 bytes (it signs the access tokens)")
        return value

    @field_validator("fit_uploads", mode="before")
    @classmethod
    def _fit_uploads(cls, value) -> str:
        from fitstore.s3uploads import S3Uploads, is_s3

        value = str(value) if isinstance(value, Path) else value
        if is_s3(value):
            S3Uploads(value)  # its form (ValueError names INR_FIT_UPLOADS)
            check_cache(default_cache(SCRATCH), SCRATCH_SETTING)  # where it is streamed first: private, or refused
        return value

    @field_validator("models", mode="before")
    @classmethod
    def _models(cls, value) -> str:
        """A folder (str or Path) or an s3:// URL, checked for its form here (modelrepo/location.py)."""
        from modelrepo import is_s3, parse_s3

        value = str(value) if isinstance(value, Path) else value
        if isinstance(value, str) and is_s3(value):
            parse_s3(value)
        return value

    @field_validator("memory_budget", "session_cache_bytes", "model_cache_bytes")
    @classmethod
    def _memory_budget(cls, value: str) -> str:
        if value.strip() and parse_bytes(value) <= 0:
            raise ValueError("must be more than 0 bytes")
        return value.strip()

    @field_validator("fit_store")
    @classmethod
    def _fit_store(cls, value: str) -> str:
        check_url(value)  # a StoreError is a ValueError: one line naming the valid forms, at start
        return value

    @field_validator("cache_config")
    @classmethod
    def _cache_config(cls, value: str) -> str:
        if value:
            cache_size(value)
        return value

    @property
    def cache_bytes(self) -> int:
        """The shared cache store's budget: --cache-config's size, else INR_RENDER_CACHE_BYTES."""
        return cache_size(self.cache_config) if self.cache_config else self.render_cache_bytes

    @model_validator(mode="after")
    def _control(self) -> "Settings":
        if self.load_model and self.model_control_mode != "explicit":
            raise ValueError("--load-model needs --model-control-mode explicit")
        if "*" in self.load_model and len(self.load_model) > 1:
            raise ValueError("--load-model '*' must be the only --load-model")
        if self.model_control_mode == "explicit" and self.workers > 1:
            raise ValueError(
                "--model-control-mode explicit needs --workers 1: each worker process has its own "
                "models, and a load or unload request reaches only one of them (poll mode works "
                "with several workers)"
            )
        check_groups(self.http_restricted_api)
        if self.access_trusted_header and not self.forwarded_allow_ips:
            raise ValueError(
                "INR_ACCESS_TRUSTED_HEADER needs INR_FORWARDED_ALLOW_IPS, the addresses of the proxy that sets it: "
                "from any other peer the header is a client's own claim"
            )
        if self.access_trusted_scopes_header and not self.access_trusted_header:
            raise ValueError("INR_ACCESS_TRUSTED_SCOPES_HEADER needs INR_ACCESS_TRUSTED_HEADER")
        return self

    def environment(self) -> dict[str, str]:
        """The settings as INR_* variables, for worker processes; the only place a secret is revealed."""
        env = {}
        for key, value in self.model_dump().items():
            if value is None:  # unset: the worker's default is the same
                continue
            if key == "http_restricted_api":
                value = json.dumps([g.spec() for g in self.http_restricted_api])
            elif isinstance(value, SecretStr):
                value = value.get_secret_value()
            elif isinstance(value, list):
                value = json.dumps(value)
            env[f"INR_{key.upper()}"] = str(value)
        return env
