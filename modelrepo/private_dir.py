"""Private per-user cache folders (the S3 model cache, the session cache) and the key that signs what they hold.

A cache is trusted with what it holds: a model's policy (`config.pbtxt`), its metadata and graphs, optimised
sessions. So it lives where only this user can write: by default `$XDG_CACHE_HOME/inr-serve/KIND`, else
`~/.cache/inr-serve/KIND` (never a predictable name in a folder everyone can write, such as TMPDIR), created with
mode 0700 whatever the umask. A folder that exists is used only when it is a real folder (not a symbolic link)
owned by this user and writable by no group or other user, and none of its parents belongs to another user (the
owner of a parent can rename the folder away and put theirs in its place); otherwise `UnsafeFolder`, one line that
names the folder, what is wrong and the setting to change. A configured folder gets the same checks.

Within the folder, `key` is 32 random bytes in `.key` (created 0600, refused when it is not this user's alone),
and `sign` a keyed digest (HMAC-SHA256) with it: an entry is trusted only when the digest kept beside it verifies,
so a file planted in the folder, or left there before the folder became private, is never used.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
import tempfile
from pathlib import Path

KEY_FILE = ".key"
KEY_BYTES = 32


class UnsafeFolder(ValueError):
    """A cache folder another user could write (or that cannot be made private): one line, naming the setting."""


def default_cache(kind: str) -> Path:
    """`$XDG_CACHE_HOME/inr-serve/KIND` (an absolute XDG_CACHE_HOME only, as the XDG spec says), else
    `~/.cache/inr-serve/KIND`."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path(os.path.expanduser("~")) / ".cache"
    return base / "inr-serve" / kind


def _refuse(folder: Path, problem: str, setting: str) -> UnsafeFolder:
    return UnsafeFolder(
        f"the cache folder {folder} {problem}, so another user could plant files in it: make it this user's with "
        f"mode 0700, or set {setting} to another folder"
    )


def _owner(uid: int) -> str:
    return "this user" if uid == os.geteuid() else f"uid {uid}"


def check(folder: str | os.PathLike, setting: str) -> Path:
    """The absolute `folder`, when it is private or does not exist yet; UnsafeFolder otherwise (see the module)."""
    folder = Path(os.path.abspath(folder))
    me = os.geteuid()
    try:
        st = os.lstat(folder)
    except (FileNotFoundError, NotADirectoryError):
        st = None  # made by `ensure`; a file in its way shows there
    if st is not None:
        if stat.S_ISLNK(st.st_mode):
            raise _refuse(folder, "is a symbolic link", setting)
        if not stat.S_ISDIR(st.st_mode):
            raise _refuse(folder, "is not a folder", setting)
        if st.st_uid != me:
            raise _refuse(folder, f"belongs to uid {st.st_uid}, not to this user (uid {me})", setting)
        if st.st_mode & 0o022:
            who = "group and others" if st.st_mode & 0o022 == 0o022 else "group" if st.st_mode & 0o020 else "others"
            raise _refuse(folder, f"is writable by {who} (mode {stat.S_IMODE(st.st_mode):04o})", setting)
    real = Path(os.path.realpath(folder.parent))
    for parent in (*reversed(real.parents), real):
        try:
            uid = os.stat(parent).st_uid
        except OSError:
            break  # the rest is made by `ensure`
        if uid not in (0, me):
            raise _refuse(folder, f"is inside {parent}, which belongs to {_owner(uid)}", setting)
    return folder


def ensure(folder: str | os.PathLike, setting: str) -> Path:
    """`folder` checked (`check`) and made, with the parents it lacks, each 0700; UnsafeFolder when it cannot be."""
    folder = check(folder, setting)
    missing = []
    for path in (folder, *folder.parents):
        if os.path.lexists(path):
            break
        missing.append(path)
    for path in reversed(missing):
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue  # made meanwhile (another worker process): checked below
        except OSError as e:
            raise UnsafeFolder(f"the cache folder {folder} cannot be made ({e.strerror}): set {setting}") from None
        os.chmod(path, 0o700)  # the umask may have taken bits away; never added any
    return check(folder, setting)


def key(folder: Path, setting: str) -> bytes:
    """The folder's key: `.key`, made once (whole, under a temporary name linked in) with mode 0600; UnsafeFolder
    when it is a link, not this user's, readable or writable by anyone else, or not a key."""
    path = Path(folder) / KEY_FILE
    if not os.path.lexists(path):
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".key-")  # 0600
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(secrets.token_bytes(KEY_BYTES))
            os.link(tmp, path)  # never replaces a key another process made first
        except FileExistsError:
            pass
        finally:
            os.unlink(tmp)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as e:
        raise _refuse(path, f"cannot be read as a key ({e.strerror})", setting) from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        data = f.read(KEY_BYTES + 1)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077 or len(data) != KEY_BYTES:
        raise _refuse(path, f"is not this user's key alone (mode {stat.S_IMODE(st.st_mode):04o})", setting)
    return data


def sign(secret: bytes, *parts: str) -> str:
    """The keyed digest (HMAC-SHA256, hex) of `parts`, each told from the next."""
    return hmac.new(secret, "\0".join(parts).encode(), hashlib.sha256).hexdigest()


def verify(secret: bytes, mac: object, *parts: str) -> bool:
    return isinstance(mac, str) and hmac.compare_digest(mac, sign(secret, *parts))
