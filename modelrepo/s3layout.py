"""The layout of a model repository on S3 (modelrepo/s3.py, modelrepo/s3publish.py): the marker that publishes a
version, the claims of writers, the mirror's record of ETags, and a model's entry in the listing's index."""

from __future__ import annotations

from dataclasses import dataclass, field

MARKER = ".published"  # NAME/N/.published, written last: the version is listed from then on
CLAIM = ".claim-"  # NAME/N/.claim-TIME-RANDOM: a writer's claim of the number N
MANIFEST = ".etags.json"  # in each model's mirror folder: rel → ETag and sha256 of the copy there, signed


@dataclass
class Unmarked:
    """A version without its marker, as the listing shows it: uploaded by another tool (aws s3 sync, boto3, rclone),
    or a writer of ours at work (its claim) or dead. Served only once settled (modelrepo/s3settle.py)."""

    files: dict[str, tuple[str, int]] = field(default_factory=dict)  # 'N/rel' → (etag, size), claims left out
    claimed: bool = False  # a writer's claim object is there
    newest: float = 0.0  # its newest object's LastModified (epoch s, S3's clock)


@dataclass
class ModelIndex:
    files: dict[str, tuple[str, int]] = field(default_factory=dict)  # rel → (etag, size): model files, published
    published: tuple[int, ...] = ()
    pending: dict[int, float] = field(default_factory=dict)  # version without a marker → newest object's time
    unmarked: dict[int, Unmarked] = field(default_factory=dict)  # those versions' objects
    newest: float = 0.0  # the newest of the model's own objects (config.pbtxt, metadata.json, warmup/)
    settled: tuple[int, ...] = ()  # the published versions that have no marker (served as settled)
    held: dict[int, str] = field(default_factory=dict)  # versions without a marker not served, and why

    def stamp(self) -> tuple:
        return tuple(sorted(self.files.items()))
