"""The listing of a model repository on S3 (modelrepo/s3.py): keys and ETags into an index of models, no object read.

A model has five keys or more (config.pbtxt, metadata.json, and per version its files and its marker), so listing
10,000 models is 50 pages of 1,000 keys or more. One after the other they cost 50 round trips, each the server's
work on a page and the client's parse of it. So a key space of more than a page is cut into LISTERS ranges listed
side by side, each with ListObjectsV2 from its lower cut (StartAfter) until a key passes the next cut; the ranges
together hold every key exactly once, whatever the cuts, so the cuts only balance the work:

* a rescan cuts by the last listing's models and their number of keys, and asks each range for one key more than
  it had (an unchanged range is read to its end and one key past it, not a page past it);
* a first listing reads one page; when there is more, it reads the names of the rest with a delimiter listing
  (`Delimiter='/'`: one entry a model, not one a file, which S3 servers answer several times faster) and cuts by
  them, each weighed as the first page's models were.

botocore parses every LastModified of a page with dateutil (most of the client's time on a page):
`fast_timestamps` gives a client the C parser of `datetime.fromisoformat` for S3's ISO 8601 times instead.
"""

from __future__ import annotations

import datetime as dt
from concurrent.futures import ThreadPoolExecutor

from .s3layout import CLAIM, MARKER, ModelIndex, Unmarked
from .spec import NAME_RE

PAGE = 1000
LISTERS = 8  # ranges listed at once


def fast_timestamps(session) -> None:
    """A botocore session whose clients parse S3's ISO 8601 timestamps with datetime.fromisoformat (anything else
    with botocore's own parser)."""
    from botocore.utils import parse_timestamp

    def parse(value):
        try:
            found = dt.datetime.fromisoformat(value)
        except (TypeError, ValueError):
            return parse_timestamp(value)
        return found if found.tzinfo is not None else found.replace(tzinfo=dt.timezone.utc)

    session.get_component("response_parser_factory").set_parser_defaults(timestamp_parser=parse)


def list_range(repo, prefix: str, after=None, upto=None, expect=None, first_page: bool = False) -> tuple[list, bool]:
    """The objects under `prefix` whose keys are above `after` and at most `upto` (None: no bound), in key order, and
    whether there are more (only with `first_page`: then one page and no more). `expect`: how many keys the range
    had at the last listing; each request asks for one key more than the rest of them, so an unchanged range is read
    to its end and one key of the next, instead of a page past it."""
    found, token = [], None
    while True:
        args = {"ContinuationToken": token} if token else {"StartAfter": after} if after else {}
        size = PAGE if expect is None or expect < len(found) else min(PAGE, expect - len(found) + 1)
        page = repo.call("LIST", "list_objects_v2", "the listing", Prefix=prefix, MaxKeys=size, **args)
        for obj in page.get("Contents", ()):
            if upto is not None and obj["Key"] > upto:
                return found, False
            found.append(obj)
        if first_page or not page.get("IsTruncated"):
            return found, bool(page.get("IsTruncated"))
        token = page["NextContinuationToken"]


def model_folders(repo, prefix: str, after: str) -> list[str]:
    """The folders ('PREFIX/NAME/') with a key above `after`, in key order: a delimiter listing, one entry a model."""
    found, token = [], None
    while True:
        args = {"ContinuationToken": token} if token else {"StartAfter": after}
        page = repo.call("LIST", "list_objects_v2", "the listing", Prefix=prefix, Delimiter="/", MaxKeys=PAGE, **args)
        found += [p["Prefix"] for p in page.get("CommonPrefixes", ())]
        if not page.get("IsTruncated"):
            return found
        token = page["NextContinuationToken"]


def cut(folders: list[str], weights: list[float]) -> list[tuple[str | None, float]]:
    """At most LISTERS ranges of about equal weight: (the folder each range starts with, None for the first; the
    range's weight). A cut at 'PREFIX/NAME/' has every key of NAME above it and every key of the folders before it
    below it, so the ranges between cuts hold every key once."""
    total, ranges, acc = sum(weights), [], 0.0
    for folder, weight in zip(folders, weights):
        if not ranges or acc >= total * len(ranges) / LISTERS:
            ranges.append([folder if ranges else None, 0.0])
        ranges[-1][1] += weight
        acc += weight
    return [(low, weight) for low, weight in ranges] or [(None, 0.0)]


def list_all(repo, prefix: str, index: dict[str, ModelIndex] | None) -> dict[str, ModelIndex]:
    """The index of every model under `prefix`, its key space in LISTERS ranges listed side by side when it is more
    than a page: cut by the last listing's models and their keys (a rescan), else, after a first page, by the
    folders a delimiter listing finds (each weighed as the first page's models were)."""
    base = len(repo.location.prefix)
    if index:
        head, after = [], None
        folders = sorted(f"{prefix}{name}/" for name in index)  # the keys' order
        weights = [_keys(index[f[len(prefix) : -1]]) for f in folders]
        if sum(weights) <= PAGE:
            return build_index(list_range(repo, prefix)[0], base)
    else:
        head, more = list_range(repo, prefix, first_page=True)
        if not more:
            return build_index(head, base)
        after = head[-1]["Key"]
        folders = model_folders(repo, prefix, after)
        per_model = len(head) / max(1, len({o["Key"][len(prefix) :].partition("/")[0] for o in head}))
        weights = [per_model] * len(folders)
    ranges = cut(folders, weights)
    with ThreadPoolExecutor(LISTERS, thread_name_prefix="s3-list") as pool:
        jobs = []
        try:
            for i, (low, weight) in enumerate(ranges):
                high = ranges[i + 1][0] if i + 1 < len(ranges) else None
                jobs.append(pool.submit(list_range, repo, prefix, low or after, high, round(weight)))
            objects = head + [obj for job in jobs for obj in job.result()[0]]
        except BaseException:
            for job in jobs:
                job.cancel()
            raise
    return build_index(objects, base)


def _keys(model: ModelIndex) -> int:
    """The keys a model had at the last listing (its published files, markers, and a few for a pending version)."""
    return len(model.files) + len(model.published) + len(model.pending)


def build_index(objects: list[dict], base: int) -> dict[str, ModelIndex]:
    """Keys (with their ETags, sizes and times) into models: each one's published files and versions, and the
    versions without their marker (modelrepo/s3settle.py serves those that settled). `base`: the length of the
    repository's prefix in each key."""
    versions: dict[tuple[str, int], dict] = {}
    found: dict[str, ModelIndex] = {}
    for obj in objects:
        name, _, rest = obj["Key"][base:].partition("/")
        if not NAME_RE.match(name) or not rest or any(p in ("", ".", "..") for p in rest.split("/")):
            continue  # not a model's file; never a path out of the model's folder in the mirror
        entry = (obj["ETag"].strip('"'), int(obj["Size"]))
        first, _, inner = rest.partition("/")
        if first.isdigit() and str(int(first)) == first and int(first) > 0 and inner:
            v = versions.setdefault((name, int(first)), {"files": {}, "marker": False, "time": 0.0, "claim": False})
            v["time"] = max(v["time"], obj["LastModified"].timestamp())
            if inner == MARKER:
                v["marker"] = True
            elif inner.startswith(CLAIM):
                v["claim"] = True
            else:
                v["files"][f"{first}/{inner}"] = entry
        elif not any(p.startswith(".") for p in rest.split("/")):
            model = found.setdefault(name, ModelIndex())
            model.files[rest] = entry
            model.newest = max(model.newest, obj["LastModified"].timestamp())
    for (name, n), v in sorted(versions.items()):
        model = found.setdefault(name, ModelIndex())
        if v["marker"]:
            model.files.update(v["files"])
            model.published += (n,)
        else:  # served only once settled (modelrepo/s3settle.py)
            model.pending[n] = v["time"]
            model.unmarked[n] = Unmarked(v["files"], v["claim"], v["time"])
    return found
