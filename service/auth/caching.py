"""Cache-Control, from one place that knows the model's policy (docs/security.md, "Caches").

Every answer made from a model's pixels or description (v1 render, IIIF images and information, manifests, fit
previews) takes its Cache-Control from here. A restricted model's answers are `private`: a shared cache (the nginx
of docker-compose.yml, a CDN) never stores them, so it cannot hand them to the next caller. An answer that depends
on who asks (a restricted image's info.json or manifest, a list of what the caller may see) is also revalidated
each time. Public answers keep their max-age (`immutable` where the URL names a version, whose files never change).
"""

from __future__ import annotations

PINNED_S = 31_536_000  # a year: a version's files never change


def cache_control(restricted: bool, max_age: int, *, immutable: bool = False, per_caller: bool = False) -> str:
    if per_caller:
        return "private, no-cache"
    scope = "private" if restricted else "public"
    return f"{scope}, max-age={max_age}" + (", immutable" if immutable else "")


def render_cache_control(restricted: bool, pinned: bool, max_age: int) -> str:
    """A render or a tile: `immutable` for a version-pinned URL, else `max_age`, after which HTTP caches revalidate
    with the ETag (a 304 costs no render)."""
    return cache_control(restricted, PINNED_S if pinned else max_age, immutable=pinned)
