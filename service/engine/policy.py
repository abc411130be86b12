"""What batching may do, per model: rows per run, the wait for batch-mates (the policy) and the
deadlines of a queued request. service/engine/batching.py applies it."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import QueueTimeout
from ..settings import Settings
from .runtime import ModelRuntime

DEFAULT_DELAY = 0.0005  # seconds, for a model whose config.pbtxt has no dynamic_batching block


@dataclass(frozen=True)
class BatchConfig:
    enabled: bool = True
    max_batch: int | None = None  # rows per run; None = each model's max_batch_size
    max_queue_delay: float | None = None  # seconds; None = each model's config.pbtxt delay
    policy: str = "auto"  # adaptive | delay | auto (delay when max_queue_delay is set)
    max_queue: int = 1024  # requests waiting per model
    instances: int = 2  # batches of one model running at once
    queue_timeout: float = 10.0  # seconds a request may wait for its batch
    inline_run: float = 0.0  # seconds: a lone request's run at most this long runs on the loop

    @classmethod
    def from_settings(cls, s: Settings) -> "BatchConfig":
        delay = None if s.max_queue_delay_ms is None else s.max_queue_delay_ms / 1000
        return cls(
            enabled=s.batching,
            max_batch=s.max_batch,
            max_queue_delay=delay,
            policy=s.batch_policy,
            max_queue=s.max_queue,
            instances=s.batch_instances,
            queue_timeout=s.queue_timeout_s,
            inline_run=s.inline_run_ms / 1000,
        )


def deadline(config: BatchConfig, timeout: float | None) -> tuple[float, str]:
    """Seconds a request may wait to start, and the setting that set it (for the error)."""
    if timeout is None or timeout >= config.queue_timeout:
        return config.queue_timeout, "INR_QUEUE_TIMEOUT_S"
    return timeout, "the request's timeout parameter"


def queue_timeout(model: ModelRuntime, waited_for: str, limit: float, what: str) -> QueueTimeout:
    return QueueTimeout(
        f"model '{model.name}': waited {limit:g} s in the queue for {waited_for}, the limit "
        f"({what}); the server is busy, try again later"
    )


def adaptive(config: BatchConfig) -> bool:
    return config.policy == "adaptive" or (config.policy == "auto" and config.max_queue_delay is None)


def queue_delay(model: ModelRuntime, config: BatchConfig) -> float:
    """Seconds to wait for batch-mates. Adaptive: none. A free worker takes what is queued at once, so an
    idle model runs a request at once, and while every worker computes, requests gather for the next batch.
    Delay (Triton's): INR_MAX_QUEUE_DELAY_MS when set, else the model's dynamic_batching
    max_queue_delay_microseconds, else DEFAULT_DELAY."""
    if adaptive(config):
        return 0.0
    if config.max_queue_delay is not None:
        return config.max_queue_delay
    us = model.spec.max_queue_delay_us
    return DEFAULT_DELAY if us is None else us / 1e6


def max_rows(model: ModelRuntime, config: BatchConfig) -> int:
    """Rows per batched run of `model`: its max_batch_size, lowered by INR_MAX_BATCH when set."""
    return min(model.max_batch_size, config.max_batch or model.max_batch_size)
