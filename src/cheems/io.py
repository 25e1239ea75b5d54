"""File plumbing every stage shares: atomic writes, JSON/JSONL writers, resumable JSONL
output, the YAML reader and the garbage-collector pause used while reading big files.

Core module: the standard library, orjson and (for YAML) pyyaml only.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import hashlib
import os
import secrets
import shutil
import stat
from pathlib import Path
from typing import IO, Any, Iterable, Iterator

import orjson

from cheems.records import CheemsInputError

__all__ = ["MAX_JSON_DEPTH", "OVERWRITE_AGAIN", "STORAGE_FAILURES", "WRITE_ERRORS", "ResumableJsonl", "atomic_open",
           "check_input_file", "check_output_folder", "check_outputs", "files_fingerprint", "gc_paused", "glob_escape",
           "json_value_problem", "outputs_together", "process_alive", "read_text_file", "read_yaml_mapping",
           "remove_stale_temps", "same_file", "sidecar", "storage_failure", "temp_name", "write_error", "write_json", "write_jsonl",
           "writes_into"]

WRITE_ERRORS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG, errno.EIO,
                          errno.ENOTDIR, errno.EISDIR, errno.ENAMETOOLONG})
"""OSError numbers that mean "this output cannot be written here" (not a bug): one line to the user."""


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while building many small objects.

    Reading creates hundreds of thousands of long-lived objects and none of them form
    cycles; collections triggered on the way scan the growing heap again and again and
    double the reading time."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


# ----------------------------------------------------------------------------- inputs

def check_input_file(path: str | os.PathLike) -> None:
    """Refuse, naming ``path``, an input that cannot be read as a file: missing, a symbolic
    link that loops or leads nowhere, a folder, or a pipe, device or socket (reading a pipe
    nobody writes to would wait forever). Raises CheemsInputError; reads nothing."""
    name = str(path)
    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise CheemsInputError("is a symbolic link that loops (too many levels of links)", file=name) from None
        if e.errno in (errno.ENOENT, errno.ENOTDIR):
            if os.path.islink(path):
                raise CheemsInputError("is a symbolic link to a file that does not exist", file=name) from None
            raise CheemsInputError("no such file", file=name) from None
        raise CheemsInputError(f"cannot read: {e.strerror or e}", file=name) from None
    if stat.S_ISDIR(mode):
        raise CheemsInputError("is a directory, expected a file", file=name)
    if not stat.S_ISREG(mode):
        raise CheemsInputError("is not a regular file (a pipe, device or socket); save the data to a file "
                               "and give that", file=name)


def read_text_file(path: str | os.PathLike, *, expected: str = "a text file") -> str:
    """The UTF-8 text of ``path``. A folder, a file that cannot be read, or bytes that are not
    UTF-8 are one CheemsInputError naming it (``expected``: what the file should be)."""
    name = str(path)
    try:
        return Path(path).read_bytes().decode("utf-8")
    except IsADirectoryError:
        raise CheemsInputError(f"is a folder, expected {expected}", file=name) from None
    except OSError as e:
        raise CheemsInputError(f"cannot read: {e.strerror or e}", file=name) from None
    except UnicodeDecodeError:
        raise CheemsInputError(f"is not UTF-8 text: expected {expected}", file=name) from None


MAX_JSON_DEPTH = 100
"""Deepest nesting of lists and objects a data row may have. Real rows nest a few levels; the
JSON writer refuses values past 254 levels and the standard parser recurses once per level."""


def json_value_problem(value: Any, *, max_depth: int = MAX_JSON_DEPTH, strings: bool = True) -> tuple[str, str] | None:
    """``(field, message)`` of the first fault of a parsed JSON (or YAML) value, None if it has
    none: a list or object nested deeper than ``max_depth`` levels (the field names the
    top-level key it sits under), or, with ``strings``, a key or string holding a lone
    surrogate such as ``\\ud800`` (not text: no UTF-8 file can hold it). Iterative, O(values)."""
    stack: list[tuple[Any, int, tuple | None]] = [(value, 1, None)]  # (value, depth, (parent path, key))
    while stack:
        v, depth, where = stack.pop()
        if isinstance(v, str):
            bad = _lone_surrogate(v)
            if bad:
                return _field(where), f"holds a lone surrogate ({bad}): not valid text; fix that escape"
            continue
        if not isinstance(v, (dict, list)):
            continue  # a number, true, false or null at the top
        if depth > max_depth:
            top = where
            while top is not None and top[0] is not None:
                top = top[0]
            return _field(top), f"nests deeper than {max_depth} levels of lists and objects"
        children = list(v.items()) if isinstance(v, dict) else list(enumerate(v))
        for key, child in reversed(children):
            if strings and isinstance(key, str) and _lone_surrogate(key):
                return _field(where), f"a key holds a lone surrogate ({_lone_surrogate(key)}): not valid text"
            if isinstance(child, (dict, list)) or (strings and isinstance(child, str)):
                stack.append((child, depth + 1, (where, key)))
    return None


def _lone_surrogate(s: str) -> str | None:
    """The first lone surrogate of ``s`` as an escape (``\\ud800``), or None."""
    if s.isascii():
        return None
    try:
        s.encode("utf-8")
        return None
    except UnicodeEncodeError as e:
        return f"\\u{ord(s[e.start]):04x}"


def _field(where: tuple | None) -> str:
    """``responses[0].content`` from the (parent, key) chain of a value."""
    keys = []
    while where is not None:
        where, key = where
        keys.append(key)
    out = ""
    for key in reversed(keys):
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else str(key))
    return out


# ----------------------------------------------------------------------------- outputs

def files_fingerprint(paths: Iterable[str | os.PathLike]) -> str:
    """A hash of the bytes of every file in ``paths``, in order: whether a run's inputs are
    still what they were."""
    h = hashlib.sha256()
    for p in paths:
        check_input_file(p)
        h.update(b"\0file\0")
        try:
            with open(p, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
        except OSError as e:
            raise CheemsInputError(f"cannot read: {e.strerror or e}", file=str(p)) from None
    return h.hexdigest()[:16]


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether two paths name one file: the same resolved path, or (both existing) the same
    inode, which also catches hard links and different spellings of one path."""
    pa, pb = Path(a), Path(b)
    if _real(pa) == _real(pb):
        return True
    try:
        return pa.exists() and pb.exists() and os.path.samefile(pa, pb)
    except OSError:
        return False


def _real(path: Path) -> Path:
    """``path`` with its links resolved as far as they go (a link that loops stays as it is,
    where ``Path.resolve`` raises)."""
    return Path(os.path.realpath(path))


def check_outputs(outputs: Iterable[str | os.PathLike | None],
                  inputs: Iterable[str | os.PathLike | None] = ()) -> None:
    """Refuse, before anything is read or written, outputs that would destroy input or cannot
    be written: an output that is one of the inputs (or two outputs that are one file), an
    output that is a folder, or one whose folder is a file or not writable. Raises one
    CheemsInputError naming the output; nothing is touched."""
    outs = [Path(o) for o in outputs if o is not None]
    ins = [Path(i) for i in inputs if i is not None]
    for k, out in enumerate(outs):
        for inp in ins:
            if same_file(out, inp):
                raise CheemsInputError(f"is also an input ({inp}); write the output to another file, "
                                       "the input is left as it is", file=str(out))
        for other in outs[:k]:
            if same_file(out, other):
                raise CheemsInputError(f"is given for two outputs (also {other})", file=str(out))
        problem = _unwritable(out)
        if problem:
            raise CheemsInputError(problem, file=str(out))


def check_output_folder(folder: str | os.PathLike, inputs: Iterable[str | os.PathLike | None] = ()) -> None:
    """Refuse an output folder that is an input (or holds one: a model folder given as both
    start and output would be overwritten), that is a file, or that cannot be made."""
    folder = Path(folder)
    for inp in inputs:
        if inp is None:
            continue
        inp = Path(inp)
        if same_file(folder, inp) or _real(folder) in _real(inp).parents:
            raise CheemsInputError(f"the output folder holds an input ({inp}); choose another folder",
                                   file=str(folder))
    if folder.exists() and not folder.is_dir():
        raise CheemsInputError(f"is {'a file' if folder.is_file() else 'not a folder'}, expected a folder",
                               file=str(folder))
    problem = _unwritable(folder / "file")  # what writing a file into the folder would meet
    if problem:
        raise CheemsInputError(problem, file=str(folder))


def _unwritable(path: Path) -> str | None:
    if path.is_dir():
        return "is a folder, expected a file name"
    if path.exists() and not path.is_file():  # renaming over a device or a pipe would replace it
        return "is not a regular file (a device, pipe or socket); write the output to a file"
    folder = path.parent
    while not folder.exists() and folder != folder.parent:  # the folders up to here get made
        folder = folder.parent
    if not folder.is_dir():
        return f"cannot be created: {folder} is a file, not a folder"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"cannot be written: no permission to write in {folder}"
    return _probe(folder, make_folder=folder != path.parent)


def _probe(folder: Path, *, make_folder: bool) -> str | None:
    """Create and remove a file (or, where folders are still to be made, a folder) in
    ``folder``: the permission bits do not tell everything (a read-only file system, a kernel
    folder where even root cannot create anything)."""
    probe = temp_name(folder / "probe")
    try:
        if make_folder:
            os.mkdir(probe, 0o700)
        else:
            os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError as e:
        return f"cannot be written: {e.strerror or e} in {folder}"
    with contextlib.suppress(OSError):
        os.rmdir(probe) if make_folder else os.unlink(probe)
    return None


def temp_name(path: Path) -> Path:
    """``.NAME.PID.RANDOM.tmp`` beside ``path``: the PID lets a later run tell a dead run's temp
    file from one a running process is still writing."""
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")


def remove_stale_temps(path: str | os.PathLike) -> int:
    """Remove temp files (or folders) of ``path`` left by runs that were killed (their process
    is gone); returns how many. Temp files of running processes are left alone."""
    path = Path(path)
    if not path.parent.is_dir():
        return 0
    prefix = f".{path.name}."
    removed = 0
    for f in path.parent.glob(f".{glob_escape(path.name)}.*.tmp"):
        pid = f.name[len(prefix):].split(".", 1)[0]
        if pid.isdigit() and not process_alive(int(pid)):
            with contextlib.suppress(OSError):
                shutil.rmtree(f) if f.is_dir() else f.unlink()
                removed += 1
    return removed


def glob_escape(name: str) -> str:
    """``name`` with glob's special characters taken literally."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` of this host still runs (a zombie does not). Where that cannot
    be told (not POSIX, no permission) it counts as running, so its claims wait to expire."""
    if os.name != "posix":
        return True
    try:
        os.kill(pid, 0)  # signal 0: existence check only
    except ProcessLookupError:
        return False
    except OSError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


def write_error(path: str | os.PathLike, e: OSError) -> CheemsInputError:
    """The one-line error of an output that cannot be written (``e.errno`` in WRITE_ERRORS)."""
    return CheemsInputError(f"cannot write: {e.strerror or e}", file=str(path))


STORAGE_FAILURES = {"No space left on device": errno.ENOSPC, "StorageFull": errno.ENOSPC,
                    "Disk quota exceeded": errno.EDQUOT, "Read-only file system": errno.EROFS,
                    "file write failed": errno.EIO}
"""What libraries that write through their own code say when the disk fails them: safetensors
(``SafetensorError: ... IoError(Os { code: 28, kind: StorageFull, ... })``) and torch.save
(``RuntimeError: ... PytorchStreamWriter failed writing file ...: file write failed``)."""


def storage_failure(e: BaseException) -> OSError | None:
    """``e`` as the OSError of an output that cannot be written, or None when it is something else:
    an OSError in WRITE_ERRORS, or a library's error whose message names a storage failure
    (:data:`STORAGE_FAILURES`)."""
    if isinstance(e, OSError):
        return e if e.errno in WRITE_ERRORS else None
    text = str(e)
    for words, number in STORAGE_FAILURES.items():
        if words in text:
            return OSError(number, os.strerror(number))
    return None


@contextlib.contextmanager
def writes_into(path: str | os.PathLike) -> Iterator[None]:
    """Around writing a model or a folder at ``path``: a full disk, no permission or a read-only file
    system, however the writing library reports it, is one CheemsInputError naming ``path``."""
    try:
        yield
    except CheemsInputError:
        raise
    except Exception as e:
        failure = storage_failure(e)
        if failure is None:
            raise
        raise write_error(path, failure) from None


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike) -> Iterator[IO[bytes]]:
    """Open ``path`` for binary writing so that it appears whole or not at all.

    Writes go to a temp file in the same folder, renamed over ``path`` on success and
    removed on any error, so a crash never leaves a partial file behind; temp files of
    killed runs are removed first. A place that cannot be written (no permission, disk full,
    a file where a folder should be) is a CheemsInputError naming ``path``."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temps(path)
        tmp = temp_name(path)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask applies, as for open()
    except OSError as e:
        raise write_error(path, e) from None
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(e, OSError) and e.errno in WRITE_ERRORS:
            raise write_error(path, e) from None
        raise


@contextlib.contextmanager
def outputs_together(*paths: str | os.PathLike | None) -> Iterator[list[Path | None]]:
    """Temp paths to write a command's outputs to, renamed to ``paths`` together at the end:
    all outputs appear, or (on any error) none does and the temp files are removed. None
    stays None (an output not asked for); a temp path left unwritten leaves its output as it was."""
    finals = [Path(p) if p is not None else None for p in paths]
    temps = [None if p is None else temp_name(p) for p in finals]
    for p in finals:
        if p is not None:
            try:
                p.parent.mkdir(parents=True, exist_ok=True)
                remove_stale_temps(p)
            except OSError as e:
                raise write_error(p, e) from None
    try:
        try:
            yield temps
            for tmp, final in zip(temps, finals):
                if tmp is not None and tmp.exists():
                    os.replace(tmp, final)
        except CheemsInputError as e:  # an error about a temp file is about its output
            named = {str(t): str(f) for t, f in zip(temps, finals) if t is not None}
            if e.file not in named:
                raise
            raise CheemsInputError(e.message, file=named[e.file], line=e.line, field=e.field,
                                   remedy=e.remedy) from None
        except OSError as e:
            final = next((f for t, f in zip(temps, finals) if t is not None and str(t) == e.filename), None)
            if final is None or e.errno not in WRITE_ERRORS:
                raise
            raise write_error(final, e) from None
    finally:
        for tmp in temps:
            if tmp is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)


def sidecar(output: str | os.PathLike, kind: str, suffix: str = ".jsonl") -> Path:
    """``out.jsonl`` -> ``out.KIND.jsonl`` (or another suffix), ``eval.json`` -> ``eval.KIND.jsonl``:
    files written beside an output."""
    output = Path(output)
    for ext in (".jsonl", ".json"):
        if output.name.endswith(ext):
            return output.with_name(f"{output.name[:-len(ext)]}.{kind}{suffix}")
    return output.with_name(f"{output.stem}.{kind}{suffix}")


def write_jsonl(path: str | os.PathLike, rows: Iterable[dict]) -> int:
    """Write rows as UTF-8 JSONL atomically; returns the row count."""
    n = 0
    with atomic_open(path) as f:
        for row in rows:
            f.write(orjson.dumps(row, option=orjson.OPT_APPEND_NEWLINE | orjson.OPT_SERIALIZE_NUMPY))
            n += 1
    return n


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write one JSON document atomically, indented, UTF-8."""
    with atomic_open(path) as f:
        f.write(orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE | orjson.OPT_SERIALIZE_NUMPY))


YAML_MAX_BYTES = 1 << 20
YAML_MAX_NODES = 100_000
YAML_MAX_DEPTH = 32
"""Limits of a YAML config: a config is small; a file past these (a "billion laughs" of
aliases, deep nesting) is refused before it is built."""


def read_yaml_mapping(path: str | os.PathLike, *, what: str = "a config file") -> dict:
    """A YAML file that must hold a mapping (needs pyyaml); errors name the file.

    Files over YAML_MAX_BYTES, or whose nodes (aliases expanded) exceed YAML_MAX_NODES or nest
    deeper than YAML_MAX_DEPTH, are refused before any value is built."""
    try:
        import yaml
    except ImportError:
        raise CheemsInputError("reading a YAML config needs pyyaml: pip install 'cheems[train]'") from None
    path = Path(path)
    try:
        if path.is_dir():
            raise CheemsInputError("is a folder, expected a YAML file", file=str(path))
        check_input_file(path)
        if path.stat().st_size > YAML_MAX_BYTES:
            raise CheemsInputError(f"is over {YAML_MAX_BYTES >> 20} MiB: not a config file", file=str(path))
        text = path.read_text(encoding="utf-8")
        _check_yaml_size(yaml.compose(text, Loader=yaml.SafeLoader), path)
        data = yaml.safe_load(text)
    except RecursionError:  # the composer recurses once per level, before any limit is counted
        raise CheemsInputError(f"nests deeper than {YAML_MAX_DEPTH} levels: not a config file",
                               file=str(path)) from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        message = " ".join(str(e).split())
        raise CheemsInputError(f"cannot read YAML config: {message[:300]}", file=str(path)) from None
    if not isinstance(data, dict):
        raise CheemsInputError(f"{what} is a mapping of setting: value", file=str(path))
    problem = json_value_problem(data, max_depth=YAML_MAX_DEPTH)
    if problem is not None:
        raise CheemsInputError(problem[1], file=str(path), field=problem[0] or None)
    return data


def _check_yaml_size(root, path: Path) -> None:
    """Count the nodes of a composed YAML document as built (an alias counts its whole node
    again) and its depth; stop at the first limit passed."""
    count = 0
    stack = [(root, 1)] if root is not None else []
    while stack:
        node, depth = stack.pop()
        count += 1
        if count > YAML_MAX_NODES:
            raise CheemsInputError(f"expands to more than {YAML_MAX_NODES:,} values (aliases repeated over and "
                                   "over?): not a config file", file=str(path))
        if depth > YAML_MAX_DEPTH:
            raise CheemsInputError(f"nests deeper than {YAML_MAX_DEPTH} levels: not a config file", file=str(path))
        value = node.value
        if isinstance(value, list):
            for item in value:
                for child in (item if isinstance(item, tuple) else (item,)):
                    stack.append((child, depth + 1))


OVERWRITE_AGAIN = ("overwrite", "{} starts again")
"""The remedy of a resumable file that cannot be resumed (a :class:`~cheems.records.CheemsInputError`'s)."""


class ResumableJsonl:
    """A JSONL file that a long job appends to as it goes, and picks up after a crash.

    A sidecar ``<name>.meta.json`` records what produced the rows (model, options); resuming
    with different settings is refused instead of silently mixing results. A partial last
    line left by a killed process is cut off on open.
    """

    def __init__(self, path: str | os.PathLike, meta: dict, *, overwrite: bool = False):
        self.path = Path(path)
        self.meta_path = self.meta_path_of(self.path)
        if overwrite:
            for f in (self.path, self.meta_path):
                with contextlib.suppress(FileNotFoundError):
                    f.unlink()
        self.rows: list[dict] = []
        if self.path.exists():
            self.check(self.path, meta)
            self.rows = self._read_and_repair()
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_json(self.meta_path, meta)
        self._f = open(self.path, "ab")

    @staticmethod
    def meta_path_of(path: str | os.PathLike) -> Path:
        """``NAME.meta.json`` beside ``NAME``: the record of what produced the rows."""
        path = Path(path)
        return path.with_name(path.name + ".meta.json")

    @classmethod
    def check(cls, path: str | os.PathLike, meta: dict, *, overwrite: bool = False) -> None:
        """Refuse to resume ``path`` when it was written with other settings or inputs than
        ``meta``, naming what changed; call it before expensive set-up (loading a model)."""
        path = Path(path)
        if overwrite or not path.exists():
            return
        meta_path = cls.meta_path_of(path)
        old = None
        if meta_path.exists():
            try:
                old = orjson.loads(meta_path.read_bytes())
            except (OSError, orjson.JSONDecodeError) as e:
                raise CheemsInputError(f"cannot read the record of how it was made ({e})", file=str(meta_path),
                                       remedy=OVERWRITE_AGAIN) from None
            if not isinstance(old, dict):
                raise CheemsInputError("the record of how it was made is not a JSON object", file=str(meta_path),
                                       remedy=OVERWRITE_AGAIN)
        if old != meta:
            raise CheemsInputError(f"exists and was written with other settings ({_meta_diff(old, meta)})",
                                   file=str(path), remedy=OVERWRITE_AGAIN)

    def _read_and_repair(self) -> list[dict]:
        data = self.path.read_bytes()
        rows, good_end = [], 0
        for line in data.splitlines(keepends=True):
            if not line.endswith(b"\n"):
                break  # cut short by a crash
            try:
                rows.append(orjson.loads(line))
            except orjson.JSONDecodeError:
                break
            good_end += len(line)
        if good_end < len(data):
            with open(self.path, "r+b") as f:
                f.truncate(good_end)
        return rows

    def append(self, rows: Iterable[dict]) -> None:
        """Append rows and push them to disk before returning."""
        self._f.write(b"".join(orjson.dumps(r, option=orjson.OPT_APPEND_NEWLINE) for r in rows))
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> "ResumableJsonl":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _meta_diff(old: dict | None, new: dict) -> str:
    if old is None:
        return "no record of how it was made"
    keys = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    return ", ".join(f"the {k[:-len('_fingerprint')]} changed" if k.endswith("_fingerprint")
                     else f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in keys)
