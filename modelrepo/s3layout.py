"""The layout of a model repository on S3 (modelrepo/s3.py, modelrepo/s3publish.py): the marker that publishes a
version, the claims of writers, the mirror's record of ETags, and a model's entry in the listing's index."""

from __future__ import annotations

from dataclasses import dataclass, field

MARKER = ".published"  # NAME/N/.published, written last: the version is listed from then on
CLAIM = ".claim-"  # NAME/N/.claim-TIME-RANDOM: a writer's claim of the number N
MANIFEST = ".etags.json"  # in each model's mirror folder: rel → ETag and sha256 of the copy there, signed


@dataclass
class ModelIndex:
    files: dict[str, tuple[str, int]] = field(default_factory=dict)  # rel → (etag, size): model files, published
    published: tuple[int, ...] = ()
    pending: dict[int, float] = field(default_factory=dict)  # unpublished version → newest object's time (epoch s)

    def stamp(self) -> tuple:
        return tuple(sorted(self.files.items()))
