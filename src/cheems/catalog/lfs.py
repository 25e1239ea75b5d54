"""Data files kept as Git LFS objects of a GitHub repository (the Cheems releases), fetched once
into the cache and verified.

A repository under Git LFS holds, in place of each large file, a small *pointer* naming the
object by its sha256 and size::

    version https://git-lfs.github.com/spec/v1
    oid sha256:<64 hex digits>
    size <bytes>

The object itself is asked for through the LFS server's Batch API: ``POST
{repository}.git/info/lfs/objects/batch`` (headers ``Accept`` and ``Content-Type``
``application/vnd.git-lfs+json``) with ``{"operation": "download", "transfers": ["basic"],
"objects": [{"oid", "size"}]}``; the answer gives, per object, either ``actions.download``
(``href`` and the ``header`` to send with it) or ``error`` (``code``, ``message``). The basic
transfer is then a plain ``GET`` of ``href``.

An entry's ``files`` pin each split's pointer at the entry's revision; another revision's
pointer is read from the repository's raw files first. Downloads land in
``cache_folder()/catalog/lfs/<sha256>``, written to a temp file and renamed only once their
size and sha256 are checked, so the cache holds verified objects only and a second call asks
the network nothing. Only the standard library (``urllib.request``) is used.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import re
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Callable

from cheems.catalog.hub import NoHubAccess, offline
from cheems.catalog.entry import Entry
from cheems.io import remove_stale_temps, temp_name
from cheems.llm.cache import cache_folder
from cheems.records import CheemsInputError

__all__ = ["CHUNK_BYTES", "LFS_MEDIA_TYPE", "OTHER_REVISION", "POINTER_MAX_BYTES", "POINTER_VERSION", "TIMEOUT_S",
           "LfsPointer", "fetch_release_file", "format_pointer", "parse_pointer", "release_cache_path", "repository_urls"]

TIMEOUT_S = 60.0
"""Seconds any one network operation (connect, a read) may take before the download fails."""
CHUNK_BYTES = 1 << 20
"""Bytes read (and hashed, and reported to ``progress``) at a time."""
POINTER_MAX_BYTES = 1024
"""A pointer file is shorter than this (the LFS specification's limit); a longer file is data."""
BATCH_REPLY_MAX_BYTES = 1 << 20  # the batch answer for one object is a few hundred bytes

LFS_MEDIA_TYPE = "application/vnd.git-lfs+json"
POINTER_VERSION = "version https://git-lfs.github.com/spec/v1"
OTHER_REVISION = ("revision", "or give {} the revision it holds")
"""The remedy of a local copy that is not the pinned revision's."""
_KEY = re.compile(r"[a-z0-9.-]+")
_OID = re.compile(r"sha256:([0-9a-f]{64})")
Progress = Callable[[int, int | None], None]
Notify = Callable[[str], None]


@dataclass(frozen=True)
class LfsPointer:
    """What an LFS pointer names: the object's sha256 (64 lowercase hex digits) and size in bytes."""

    sha256: str
    size: int


def parse_pointer(data: bytes | str) -> LfsPointer | None:
    """The pointer ``data`` holds, or None when it is not a Git LFS pointer (the file itself)."""
    if isinstance(data, bytes):
        if len(data) >= POINTER_MAX_BYTES:
            return None
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError:
            return None
    lines = data.split("\n")
    if lines[-1] == "":
        lines.pop()
    if not lines or lines[0] != POINTER_VERSION:
        return None
    fields = {}
    for line in lines[1:]:  # "key value" lines (the specification sorts the keys after version)
        key, space, value = line.partition(" ")
        if not space or not _KEY.fullmatch(key) or key in fields:
            return None
        fields[key] = value
    oid, size = _OID.fullmatch(fields.get("oid", "")), fields.get("size", "")
    if oid is None or not size.isdigit():
        return None
    return LfsPointer(oid.group(1), int(size))


def format_pointer(pointer: LfsPointer) -> str:
    """The pointer file's text for ``pointer``, as ``git lfs`` writes it."""
    return f"{POINTER_VERSION}\noid sha256:{pointer.sha256}\nsize {pointer.size}\n"


def release_cache_path(sha256: str) -> Path:
    """Where the object ``sha256`` is kept: ``cache_folder()/catalog/lfs/<sha256>``."""
    return cache_folder() / "catalog" / "lfs" / sha256


def repository_urls(entry: Entry) -> tuple[str, str]:
    """``(repository URL, raw-file base URL)`` of an entry whose hub id is ``github:OWNER/NAME``."""
    kind, _, repo = entry.hub_id.partition(":")
    if kind != "github" or repo.count("/") != 1:
        raise CheemsInputError(f"{entry.name}: hub id {entry.hub_id!r} is not github:OWNER/NAME", field="hub_id")
    return f"https://github.com/{repo}", f"https://raw.githubusercontent.com/{repo}"


# ----------------------------------------------------------------------------- the one public call

def fetch_release_file(entry: Entry, split: str | None, *, revision: str | None = None, source: str | None = None,
                       progress: Progress | None = None, notify: Notify | None = None) -> Path:
    """A local, verified copy of ``entry``'s file for ``split`` (None: the entry's default).

    ``revision`` None (or the entry's own) uses the pointer pinned in ``entry.files``; another
    revision reads the pointer from the repository at that revision. ``source`` is a local
    clone (its file is used in place, after checking it is the data and not a pointer, and,
    at the pinned revision, its size and sha256) or an ``http(s)://`` URL standing for the
    repository (batch endpoint ``{source}.git/info/lfs/objects/batch``, raw files at
    ``{source}/raw/{revision}/{path}``). ``progress(done_bytes, total_bytes)`` follows a
    download; ``notify(line)`` hears that one starts. A network failure, an error from the
    LFS server or a file that is not the one pinned is one CheemsInputError.
    """
    spec = _split_file(entry, split)
    pinned = revision is None or revision == entry.revision
    if source is not None and not _is_url(source):
        return _local_file(entry, spec, Path(source).expanduser(), pinned=pinned)
    repo_url, raw_base = repository_urls(entry)
    if source is not None:
        repo_url = raw_base = source.rstrip("/")
        raw_base += "/raw"
    path = spec["path"]
    if offline() and (not pinned or not _cached(release_cache_path(spec["sha256"]), spec["size"])):
        raise NoHubAccess(f"{entry.name}: {path} is not in the cheems cache and HF_DATASETS_OFFLINE/"
                          "HF_HUB_OFFLINE is set; unset it to download once")
    if pinned:
        pointer = LfsPointer(spec["sha256"], spec["size"])
    else:
        found = _remote_pointer(f"{raw_base}/{revision}/{path}", path, progress=progress, notify=notify)
        if isinstance(found, Path):
            return found
        pointer = found
    target = release_cache_path(pointer.sha256)
    if _cached(target, pointer.size):
        return target
    href, header = _download_action(repo_url, pointer, path)
    if notify is not None:
        notify(f"downloading {path} of {repo_url} ({pointer.size / 1e6:.1f} MB)")
    with _get(href, header, what=path) as reply:
        _store(reply, target, what=path, url=href, expected=pointer, progress=progress)
    return target


def _cached(target: Path, size: int) -> bool:
    """Whether ``target`` (named by its sha256, checked when it was stored) is there whole."""
    return target.is_file() and target.stat().st_size == size


def _split_file(entry: Entry, split: str | None) -> dict:
    """``entry.files[split]``, checked: ``{path, sha256, size}``."""
    split = entry.split if split is None else split
    spec = entry.files.get(split)
    if spec is None:
        raise CheemsInputError(f"{entry.name}: no split {split!r}; splits: {', '.join(entry.files) or 'none'}",
                               field="split")
    return spec


def _is_url(source: str) -> bool:
    return source.startswith(("http://", "https://"))


# ----------------------------------------------------------------------------- a local clone

def _local_file(entry: Entry, spec: dict, folder: Path, *, pinned: bool) -> Path:
    """``folder/<path>`` when it holds the data (not a pointer), checked against the pin when
    ``pinned``; never modified or removed."""
    repo_url, _ = repository_urls(entry)
    if not folder.is_dir():
        raise CheemsInputError(f"source {folder} is neither a folder (a clone of {repo_url}) nor an http(s) URL",
                               field="source")
    path = folder / spec["path"]
    if not path.is_file():
        raise CheemsInputError(f"no file {spec['path']} in {folder}; is it a clone of {repo_url}?", file=str(path))
    with open(path, "rb") as f:
        head = f.read(POINTER_MAX_BYTES)
    if parse_pointer(head) is not None:
        raise CheemsInputError(f"is a Git LFS pointer, not the data; run `git lfs pull` in {folder} "
                               "(Git LFS: https://git-lfs.com)", file=str(path))
    if pinned:
        size = path.stat().st_size
        if size != spec["size"]:
            raise CheemsInputError(f"holds {size} bytes, but {entry.name} at {entry.revision} has {spec['size']}; "
                                   "check out that revision", file=str(path), remedy=OTHER_REVISION)
        digest = _file_sha256(path)
        if digest != spec["sha256"]:
            raise CheemsInputError(f"sha256 {digest} is not the pinned {spec['sha256']} of {entry.name} at "
                                   f"{entry.revision}; check out that revision", file=str(path), remedy=OTHER_REVISION)
    return path


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK_BYTES):
            h.update(chunk)
    return h.hexdigest()


# ----------------------------------------------------------------------------- HTTP

def _failure(what: str, url: str, reason: str) -> CheemsInputError:
    reason = " ".join(str(reason).split()) or "no reason given"
    return NoHubAccess(f"could not download {what} from {url}: {reason}")


def _reason(e: BaseException) -> str:
    """A network error in a few words (``Connection refused``, ``timed out``)."""
    if isinstance(e, urllib.error.URLError) and not isinstance(e, urllib.error.HTTPError):
        e = e.reason if isinstance(e.reason, BaseException) else Exception(str(e.reason))
    if isinstance(e, TimeoutError):
        return f"timed out after {TIMEOUT_S:g} s"
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    return str(e) or type(e).__name__


def _http_error(e: urllib.error.HTTPError) -> str:
    """``HTTP 404`` and the server's own message (the ``message`` of a JSON body, as LFS
    servers send) where it gives one."""
    try:
        body = e.read(64 * 1024)
        message = json.loads(body).get("message")
    except (OSError, ValueError, AttributeError, http.client.HTTPException):
        message = None
    return f"HTTP {e.code}" + (f" ({message})" if isinstance(message, str) and message.strip() else "")


def _open(request: urllib.request.Request, what: str) -> http.client.HTTPResponse:
    """``urlopen`` with the timeout; every failure one CheemsInputError."""
    url = request.full_url
    if not _is_url(url):
        raise _failure(what, url, "not an http(s) URL")
    try:
        return urllib.request.urlopen(request, timeout=TIMEOUT_S)  # http(s) only, checked above
    except urllib.error.HTTPError as e:
        try:
            reason = _http_error(e)
        finally:
            e.close()
        raise _failure(what, url, reason) from None
    except (OSError, http.client.HTTPException, ValueError) as e:
        raise _failure(what, url, _reason(e)) from None


def _get(url: str, header: dict, *, what: str) -> http.client.HTTPResponse:
    headers = {"User-Agent": "cheems"} | {str(k): str(v) for k, v in header.items()}
    return _open(urllib.request.Request(url, headers=headers, method="GET"), what)


def _download_action(repo_url: str, pointer: LfsPointer, what: str) -> tuple[str, dict]:
    """Ask the repository's LFS server where to download ``pointer``'s object: ``(href, header)``."""
    url = f"{repo_url}.git/info/lfs/objects/batch"
    body = {"operation": "download", "transfers": ["basic"],
            "objects": [{"oid": pointer.sha256, "size": pointer.size}]}
    request = urllib.request.Request(url, data=json.dumps(body).encode("utf-8"), method="POST",
                                     headers={"Accept": LFS_MEDIA_TYPE, "Content-Type": LFS_MEDIA_TYPE,
                                              "User-Agent": "cheems"})
    with _open(request, what) as reply:
        data = _read(reply, BATCH_REPLY_MAX_BYTES + 1, what, url)
    if len(data) > BATCH_REPLY_MAX_BYTES:
        raise _failure(what, url, f"the LFS server's answer is longer than {BATCH_REPLY_MAX_BYTES} bytes")
    try:
        answer = json.loads(data)
    except ValueError:
        raise _failure(what, url, "the LFS server's answer is not JSON") from None
    return _read_action(answer, what, url)


def _read_action(answer: object, what: str, url: str) -> tuple[str, dict]:
    """``(href, header)`` of the download action in a batch answer, or one error saying why not."""
    objects = answer.get("objects") if isinstance(answer, dict) else None
    if not isinstance(objects, list) or not objects or not isinstance(objects[0], dict):
        raise _failure(what, url, "the LFS server's answer lists no object")
    obj = objects[0]
    error = obj.get("error")
    if isinstance(error, dict):
        code = f" (code {error['code']})" if "code" in error else ""
        raise _failure(what, url, f"the LFS server says: {error.get('message') or 'no message'}{code}")
    action = (obj.get("actions") or {}).get("download") if isinstance(obj.get("actions"), dict) else None
    href = action.get("href") if isinstance(action, dict) else None
    if not isinstance(href, str) or not _is_url(href):
        raise _failure(what, url, "the LFS server's answer gives no download link")
    header = action.get("header") or {}
    return href, header if isinstance(header, dict) else {}


# ----------------------------------------------------------------------------- receiving bytes

def _store(reply: IO[bytes], target: Path, *, what: str, url: str, expected: LfsPointer | None,
           progress: Progress | None, head: bytes = b"", total: int | None = None) -> Path:
    """Stream ``reply`` (after ``head``, bytes already read from it) into a temp file beside
    ``target``, hashing as it goes, and rename it to ``target`` once checked against
    ``expected`` (size, then sha256). Without ``expected`` (a file whose pin is unknown) the
    target is named by the sha256 received, and ``total`` (a Content-Length) is checked.
    On any failure the temp file is removed. Returns where the file now is."""
    total = expected.size if expected is not None else total
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CheemsInputError(f"cannot create the cache folder: {e.strerror or e}", file=str(target.parent)) from None
    remove_stale_temps(target)  # left by a download that was killed
    tmp = temp_name(target)
    try:
        digest, done = _receive(reply, tmp, what=what, url=url, head=head, total=total, progress=progress)
        if expected is None:
            target = target.with_name(digest)
        if total is not None and done != total:
            got = f"more than {total}" if done > total else str(done)
            raise CheemsInputError(f"{what}: received {got} bytes from {url}, expected {total}; "
                                   "the download was removed", file=str(target))
        if expected is not None and digest != expected.sha256:
            raise CheemsInputError(f"{what}: sha256 {digest} of the download from {url} is not the expected "
                                   f"{expected.sha256}; the download was removed", file=str(target))
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()
    return target


def _receive(reply: IO[bytes], tmp: Path, *, what: str, url: str, head: bytes, total: int | None,
             progress: Progress | None) -> tuple[str, int]:
    """Write ``head`` then the rest of ``reply`` to ``tmp``: ``(sha256, bytes)``. Stops one
    byte past ``total`` (a longer object is wrong, however long it is)."""
    h, done = hashlib.sha256(), 0
    limit = None if total is None else total + 1
    try:
        out = open(tmp, "wb")
    except OSError as e:
        raise CheemsInputError(f"cannot write the download: {e.strerror or e}", file=str(tmp)) from None
    with out:
        chunk = head or _read(reply, _next_read(0, limit), what, url)
        while chunk:
            try:
                out.write(chunk)
            except OSError as e:
                raise CheemsInputError(f"cannot write the download: {e.strerror or e}", file=str(tmp)) from None
            h.update(chunk)
            done += len(chunk)
            if progress is not None:
                progress(done, total)
            if limit is not None and done >= limit:
                break
            chunk = _read(reply, _next_read(done, limit), what, url)
    return h.hexdigest(), done


def _read(reply: IO[bytes], n: int, what: str, url: str) -> bytes:
    """Up to ``n`` bytes of ``reply``; a broken or stalled connection is one CheemsInputError."""
    try:
        return reply.read(n)
    except (OSError, http.client.HTTPException) as e:
        raise _failure(what, url, _reason(e)) from None


def _next_read(done: int, limit: int | None) -> int:
    return CHUNK_BYTES if limit is None else min(CHUNK_BYTES, limit - done)


def _remote_pointer(url: str, what: str, *, progress: Progress | None,
                    notify: Notify | None) -> LfsPointer | Path:
    """The pointer at ``url``, or, where the server sends the file itself, that file stored in
    the cache under its own sha256 (and its path returned)."""
    with _get(url, {}, what=what) as reply:
        head = _read(reply, POINTER_MAX_BYTES, what, url)
        pointer = parse_pointer(head) if len(head) < POINTER_MAX_BYTES else None
        if pointer is not None:
            return pointer
        length = reply.headers.get("Content-Length")
        total = int(length) if length and length.isdigit() else None
        if notify is not None:
            notify(f"downloading {what} from {url}" + (f" ({total / 1e6:.1f} MB)" if total else ""))
        incoming = release_cache_path("incoming")
        return _store(reply, incoming, what=what, url=url, expected=None, progress=progress, head=head, total=total)
