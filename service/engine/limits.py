"""Row limits per model, in one place: the model's `max_batch_size` (config.pbtxt), lowered by a
service-wide setting when one is set. v1 query, v1 classify, V2 infer and the batcher all use it."""

from __future__ import annotations

from ..errors import TooLarge
from ..settings import Settings
from .runtime import ModelRuntime

CAPS = {
    "image": ("max_query_coords", "INR_MAX_QUERY_COORDS", "coordinates"),
    "digits": ("max_classify_images", "INR_MAX_CLASSIFY_IMAGES", "images"),
    "generic": (None, None, "rows"),  # any graph made elsewhere: its config.pbtxt's max_batch_size alone
}


def row_limit(model: ModelRuntime, settings: Settings) -> tuple[int, str]:
    """The most rows one request may send to `model`, and the setting that raises it."""
    field, env, _ = CAPS[model.task]
    cap = getattr(settings, field) if field else None
    if cap is not None and cap < model.max_batch_size:
        return cap, env
    return model.max_batch_size, f"max_batch_size in {model.name}/config.pbtxt"


def check_rows(model: ModelRuntime, rows: int, settings: Settings) -> None:
    """413 naming the limit and what raises it, for a request of `rows` rows."""
    limit, what = row_limit(model, settings)
    if rows > limit:
        unit = CAPS[model.task][2]
        raise TooLarge(f"{rows} {unit} is more than the limit of {limit} per request for model '{model.name}' ({what})")
