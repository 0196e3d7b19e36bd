"""The raw files the project knows (checksum, size, origin, license); verification; fetch.

The table of registered files is data, not code: ``files.toml`` beside this module,
shipped in the wheel (``[tool.setuptools.package-data]``), read once at import by
:func:`read_table` into :data:`FILES` (:class:`RegisteredFile` by relative path),
:data:`DATASET_FILES` (the files each loader reads, by role) and :data:`USER_FILES` (the
data sets a user supplies). It is TOML, not JSON, because the standard library reads it
(``tomllib``, in every Python the project supports), it carries comments (where a copy
came from, why an entry is as it is), its long strings can be wrapped, and a field left
out takes :class:`RegisteredFile`'s default, so no ``null`` is needed. A malformed table
(a missing or unknown field, a checksum that is not hex of its length, a path registered
twice or not registered) is a :class:`~scalable_softmax.data.errors.DataFormatError`, a
``ValueError`` naming the file and the entry, raised at import.

The data directory (``paths.raw_dir()``, i.e. ``SOFTMAX_DATA_DIR``, default ``data/raw``)
mirrors the layout of the local mirror (``paths.mirror_dir()``, ``DATA_MIRROR``):
``mnist/...``, ``bibtex/...``, ``delicious/...``, ``20newsgroups/...``,
``authors-results/log-tricks-6f9129b/...``. One registered file is derived:
``authors-results/table3-runs-6f9129b.csv`` is built by ``make data`` from the authors'
34 pickles (:mod:`scalable_softmax.data.authors`). Each registered
file is verified by sha256 before use; a mismatch raises
:class:`~scalable_softmax.data.errors.ChecksumError` and the file is not used. A
successful verification is remembered in ``<data dir>/.verified.json`` keyed by the
file's size, mtime, ctime and inode, so later loads only ``stat`` the file (any write
to it or replacement of it changes the ctime or the inode, even if the size and the
mtime are restored). ``make data`` (:func:`fetch`) hashes every file again.

Files the project cannot ship (the Extreme Classification Repository sets) have no
registered checksum. A user who has them can pin them by listing
``<sha256>  <relative path>`` lines (the output format of ``sha256sum``) in
``<data dir>/SHA256SUMS``; files listed there are verified like registered ones.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
import tomllib
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from .. import paths
from .errors import ChecksumError, DataFormatError, MissingDataError

__all__ = ["RegisteredFile", "FILES", "DATASET_FILES", "USER_FILES", "sha256_file",
           "verify_file", "locate", "fetch", "FetchResult", "HOW_TO_GET"]


@dataclass(frozen=True)
class RegisteredFile:
    """A raw file with what is needed to verify and obtain it.

    Attributes
    ----------
    path : str
        Path relative to the data directory (and to the mirror).
    sha256 : str
        Of the file as stored in the mirror.
    bytes : int
        Size of the file as stored in the mirror.
    origin : str
        Where the mirror's copy came from.
    license : str
    dataset : str
        Data set it belongs to.
    required : bool
        Needed by a loader (``False`` for license texts).
    alt_sha256 : tuple of str
        Other accepted sha256 of the whole file (e.g. the upstream tarball).
    content_sha256 : str or None
        sha256 of the decompressed bytes of a ``.gz`` file: a copy compressed
        differently (e.g. downloaded and re-compressed) is accepted when its content
        matches.
    content_md5 : str or None
        md5 of the decompressed bytes of a ``.gz`` file, as upstream publishes it
        (recorded for reference; not checked).
    urls : tuple of str
        Public homes to download from when the mirror lacks the file.
    url_is_raw : bool
        The URLs serve the uncompressed content (it is gzip-compressed on arrival).
    derived_from : tuple of str
        A derived file: the registered raw files it is built from (``fetch`` obtains
        them first, then builds it; it has no URL of its own).
    builder : str
        ``"module:function"`` that builds a derived file,
        ``function(data_dir, spec, inputs) -> sha256``.
    """

    path: str
    sha256: str
    bytes: int
    origin: str
    license: str
    dataset: str
    required: bool = True
    alt_sha256: tuple = ()
    content_sha256: str | None = None
    content_md5: str | None = None
    urls: tuple = ()
    url_is_raw: bool = False
    derived_from: tuple = ()
    builder: str = ""


# --------------------------------------------------------------------------- the table
#: the table of registered files, shipped with the package (read by :func:`read_table`)
TABLE = Path(__file__).with_name("files.toml")

#: what each field of a ``[[file]]`` entry must be (TOML arrays become tuples)
_FIELD_TYPES = {"path": str, "sha256": str, "bytes": int, "origin": str, "license": str,
                "dataset": str, "required": bool, "alt_sha256": list,
                "content_sha256": str, "content_md5": str, "urls": list,
                "url_is_raw": bool, "derived_from": list, "builder": str}
_NEEDED = ("path", "sha256", "bytes", "origin", "license", "dataset")
_HEX_DIGITS = {"sha256": 64, "alt_sha256": 64, "content_sha256": 64, "content_md5": 32}
_USER_KEYS = ("train", "test", "format", "how")


def read_table(path=TABLE) -> tuple[dict, dict, dict]:
    """``(FILES, DATASET_FILES, USER_FILES)`` from the TOML table at ``path``.

    Raises
    ------
    DataFormatError
        A ``ValueError`` naming ``path`` and the entry, when the table is not TOML or an
        entry lacks a field, has an unknown one or one of the wrong type, a checksum
        that is not lowercase hex of its length, a size that is not positive, a path
        registered twice, or names (in ``derived_from`` or ``[dataset_files]``) a path
        that is not registered.
    """
    path = Path(path)
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise DataFormatError(path, f"not valid TOML: {exc}") from None
    extra = sorted(set(doc) - {"file", "dataset_files", "user_files"})
    if extra or not isinstance(doc.get("file"), list):
        raise DataFormatError(path, "expected [[file]] entries, [dataset_files.*] and "
                                    f"[user_files.*] tables only (found {sorted(doc)})")
    files: dict[str, RegisteredFile] = {}
    for n, entry in enumerate(doc["file"], 1):
        for spec in _entries(path, n, entry):
            if spec.path in files:
                raise DataFormatError(path, f"[[file]] entry {n} ({spec.path}): this "
                                            "path is registered twice")
            files[spec.path] = spec
    for spec in files.values():
        absent = [r for r in spec.derived_from if r not in files]
        if absent:
            raise DataFormatError(path, f"[[file]] {spec.path}: derived_from names "
                                        f"paths that are not registered: {absent}")
    return (files, _dataset_files(path, doc.get("dataset_files", {}), files),
            _user_files(path, doc.get("user_files", {})))


def _entries(table: Path, n: int, entry: dict) -> list[RegisteredFile]:
    """The registered file(s) of the ``n``-th ``[[file]]`` entry: the entry itself, or,
    when it has ``each``, one per item ``[name, sha256, bytes]`` of it, the name put
    for ``{name}`` in the entry's path, origin and urls."""
    where = f"[[file]] entry {n} ({entry.get('path', 'no path')})"
    if "each" not in entry:
        return [_registered(table, where, entry)]
    shared = {k: v for k, v in entry.items() if k != "each"}
    if "sha256" in shared or "bytes" in shared or "{name}" not in str(shared.get("path")):
        raise DataFormatError(table, f"{where}: an entry with `each` takes sha256 and "
                                     "bytes from its items, and its path holds {name}")
    if not isinstance(entry["each"], list) or not entry["each"]:
        raise DataFormatError(table, f"{where}: `each` is not a list of [name, sha256, "
                                     "bytes]")
    out = []
    for i, item in enumerate(entry["each"], 1):
        if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], str)
                and item[0]):
            raise DataFormatError(table, f"{where}, item {i} of `each`: {item!r:.80} is "
                                         "not [name, sha256, bytes]")
        name, sha, size = item
        one = {k: _put_name(v, name) if k in ("path", "origin", "urls") else v
               for k, v in shared.items()}
        one.update(sha256=sha, bytes=size)
        out.append(_registered(table, f"{where}, item {i} of `each` ({one['path']})", one))
    return out


def _put_name(value, name: str):
    if isinstance(value, str):
        return value.replace("{name}", name)
    if isinstance(value, list):
        return [_put_name(v, name) for v in value]
    return value


def _registered(table: Path, where: str, entry: dict) -> RegisteredFile:
    """One entry of the table as a :class:`RegisteredFile`, checked field by field."""
    missing = [k for k in _NEEDED if k not in entry]
    unknown = sorted(set(entry) - set(_FIELD_TYPES))
    if missing or unknown:
        raise DataFormatError(table, f"{where}: " + "; ".join(
            ([f"missing field(s) {missing}"] if missing else [])
            + ([f"unknown field(s) {unknown}"] if unknown else [])))
    for key, value in entry.items():
        problem = _field_problem(key, value)
        if problem:
            raise DataFormatError(table, f"{where}: field {key} = {value!r:.100}: {problem}")
    if entry.get("derived_from") and ":" not in entry.get("builder", ""):
        raise DataFormatError(table, f"{where}: a derived file (derived_from) needs "
                                     'builder = "module:function"')
    return RegisteredFile(**{k: tuple(v) if isinstance(v, list) else v
                             for k, v in entry.items()})


def _field_problem(key: str, value) -> str:
    """What is wrong with one field's value ("" if nothing)."""
    want = _FIELD_TYPES[key]
    if type(value) is not want:  # exact: `bytes = true` is not a size
        return f"not of type {want.__name__}"
    items = value if want is list else [value]
    if want is list and not all(isinstance(v, str) and v for v in items):
        return "not a list of strings"
    if key in _HEX_DIGITS and not all(re.fullmatch(f"[0-9a-f]{{{_HEX_DIGITS[key]}}}", v)
                                      for v in items):
        return f"not {_HEX_DIGITS[key]} lowercase hex digits"
    if key == "bytes" and value <= 0:
        return "not a positive size"
    if key in _NEEDED and want is str and not value.strip():
        return "empty"
    if key == "path" and (value.startswith("/") or ".." in value.split("/")):
        return "not a path inside the data directory"
    return ""


def _dataset_files(table: Path, part, files: dict) -> dict[str, dict[str, str]]:
    """``[dataset_files.<name>]``: role -> registered path, at least one per data set."""
    if not isinstance(part, dict):
        raise DataFormatError(table, "dataset_files is not a table of [dataset_files.<name>]")
    out = {}
    for name, roles in part.items():
        if not isinstance(roles, dict) or not roles:
            raise DataFormatError(table, f"[dataset_files.{name}]: no files (role = path)")
        bad = [f"{role} = {rel!r}" for role, rel in roles.items() if rel not in files]
        if bad:
            raise DataFormatError(table, f"[dataset_files.{name}]: not registered files "
                                         f"(the path of a [[file]] entry): {bad}")
        out[name] = dict(roles)
    return out


def _user_files(table: Path, part) -> dict[str, dict]:
    """``[user_files.<name>]``: candidate paths for train and test, format, how."""
    if not isinstance(part, dict):
        raise DataFormatError(table, "user_files is not a table of [user_files.<name>]")
    for name, spec in part.items():
        where = f"[user_files.{name}]"
        if not isinstance(spec, dict) or tuple(spec) != _USER_KEYS:
            raise DataFormatError(table, f"{where}: needs {', '.join(_USER_KEYS)}, in "
                                         "that order, and nothing else")
        if not all(isinstance(spec[r], list) and spec[r]
                   and all(isinstance(c, str) and c for c in spec[r]) for r in _USER_KEYS[:2]):
            raise DataFormatError(table, f"{where}: train and test are lists of paths")
        if not all(isinstance(spec[k], str) and spec[k] for k in _USER_KEYS[2:]):
            raise DataFormatError(table, f"{where}: format and how are strings")
    return dict(part)


_TABLE = read_table(TABLE)
#: every raw file of the mirror, by relative path
FILES: dict[str, RegisteredFile] = _TABLE[0]
#: registered files each loader needs, by role
DATASET_FILES: dict[str, dict[str, str]] = _TABLE[1]
#: user-supplied files (no public copy could be mirrored): candidate relative paths, in
#: the order they are looked for, and where to get them
USER_FILES: dict[str, dict] = _TABLE[2]


def how_to_get(dataset: str | None = None) -> str:
    """What to run to obtain the registered files (of ``dataset``): ``make data`` in a
    checkout of the collection, ``python -m scalable_softmax.data fetch NAME`` for an
    installed library (:func:`scalable_softmax.paths.fetch_command`)."""
    if paths.IN_CHECKOUT:
        return (f"run {paths.fetch_command(dataset)}, which copies the files from the "
                "local mirror named by DATA_MIRROR (the Makefile sets it) or downloads "
                "them from their public homes")
    return (f"run {paths.fetch_command(dataset)}, which downloads them from their public "
            "homes, verifies and stores them (or copies them from a folder named by "
            "DATA_MIRROR)")


HOW_TO_GET = how_to_get()


# --------------------------------------------------------------------------- hashing
def sha256_file(path, *, decompress: bool = False) -> str:
    """sha256 of a file (of its gzip-decompressed content with ``decompress=True``)."""
    h = hashlib.sha256()
    opener = gzip.open if decompress else open
    with opener(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _stamp(path: Path) -> dict:
    """What must not change for an earlier verification to stand: size, mtime, and the
    inode and ctime (which any write or replacement changes, even one that restores the
    size and the mtime)."""
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns,
            "inode": st.st_ino}


def _same_stamp(entry: dict | None, stamp: dict) -> bool:
    return bool(entry) and all(entry.get(k) == v for k, v in stamp.items())


_MEMO: dict[str, dict] = {}  # in-process verification cache (also for read-only dirs)
_VERIFIED_NAME = ".verified.json"


def _load_verified(data_dir: Path) -> dict:
    try:
        return json.loads((data_dir / _VERIFIED_NAME).read_text())
    except (OSError, ValueError):
        return {}


def _save_verified(data_dir: Path, rel: str, entry: dict) -> None:
    try:
        cur = _load_verified(data_dir)
        cur[rel] = entry
        atomic_write_bytes(data_dir / _VERIFIED_NAME,
                           json.dumps(cur, indent=1, sort_keys=True).encode())
    except OSError:
        pass  # read-only data dir: the in-process memo still avoids re-hashing


def _user_sums(data_dir: Path) -> dict[str, str]:
    f = data_dir / "SHA256SUMS"
    out = {}
    if f.is_file():
        for ln in f.read_text().splitlines():
            parts = ln.strip().split(None, 1)
            if len(parts) == 2 and len(parts[0]) == 64:
                out[parts[1].lstrip("*").strip()] = parts[0].lower()
    return out


def expected_checksums(rel: str, data_dir: Path) -> RegisteredFile | str | None:
    """The registry entry of ``rel``, or a user-pinned sha256, or ``None``."""
    if rel in FILES:
        return FILES[rel]
    return _user_sums(data_dir).get(rel)


def _check(path: Path, spec) -> tuple[bool, str, str]:
    """(ok, how, sha256 of the file) for one file against its spec."""
    actual = sha256_file(path)
    if isinstance(spec, str):
        return actual == spec, "sha256", actual
    if actual == spec.sha256 or actual in spec.alt_sha256:
        return True, "sha256", actual
    if spec.content_sha256 is not None:
        try:
            if sha256_file(path, decompress=True) == spec.content_sha256:
                return True, "content-sha256", actual
        except (OSError, EOFError, zlib.error):
            pass
    return False, "", actual


def verify_file(path, rel: str | None = None, *, data_dir=None, use_cache: bool = True) -> str:
    """Verify ``path`` against the registered (or user-pinned) sha256.

    Parameters
    ----------
    path : str or Path
        The file.
    rel : str, optional
        Its path relative to the data directory (the registry key); default: relative
        to ``data_dir``.
    data_dir : str or Path, optional
        Data directory (default ``paths.raw_dir()``), where ``.verified.json`` and
        ``SHA256SUMS`` live.
    use_cache : bool
        Trust an earlier verification of the same file (same size, mtime, ctime and
        inode); ``False`` hashes the file again.

    Returns
    -------
    str
        The sha256 of the file, or ``"unverified:<sha256>"`` when no checksum is
        registered for it.

    Raises
    ------
    ChecksumError
        The file does not match; it must not be used.
    """
    path = Path(path).resolve()
    data_dir = Path(data_dir).resolve() if data_dir is not None else paths.raw_dir()
    if rel is None:
        try:
            rel = path.relative_to(data_dir).as_posix()
        except ValueError:
            rel = path.name
    spec = expected_checksums(rel, data_dir)
    stamp = _stamp(path)
    key = f"{path}"
    if use_cache:
        hit = _MEMO.get(key)
        if _same_stamp(hit, stamp) and hit.get("spec") == _spec_id(spec):
            return hit["sha256"]
        disk = _load_verified(data_dir).get(rel)
        if _same_stamp(disk, stamp) and disk.get("spec") == _spec_id(spec):
            _MEMO[key] = disk
            return disk["sha256"]
    if spec is None:
        result = "unverified:" + sha256_file(path)
        _MEMO[key] = dict(stamp, sha256=result, spec=None)
        return result
    ok, how, actual = _check(path, spec)
    if not ok:
        exp = (spec,) if isinstance(spec, str) else (spec.sha256,) + tuple(spec.alt_sha256)
        raise ChecksumError(path, exp, actual, hint=(
            "Delete it and " + HOW_TO_GET + "." if not isinstance(spec, str) else
            f"Update its line in {data_dir / 'SHA256SUMS'} if the new file is intended."))
    entry = dict(stamp, sha256=actual, how=how, spec=_spec_id(spec),
                 verified_at=time.strftime("%Y-%m-%dT%H:%M:%S"))
    _MEMO[key] = entry
    _save_verified(data_dir, rel, entry)
    return actual


def _spec_id(spec) -> str | None:
    if spec is None:
        return None
    if isinstance(spec, str):
        return spec
    return spec.sha256 + (spec.content_sha256 or "")


# --------------------------------------------------------------------------- locating
def _missing_message(dataset: str, rels: list[str], data_dir: Path, hint: str) -> str:
    lines = [f"{dataset}: missing raw file(s) in the data directory {data_dir}:"]
    lines += [f"  - {data_dir / r}" for r in rels]
    lines.append(f"(the data directory is SOFTMAX_DATA_DIR, default {paths.default_raw_dir()})"
                 f". {hint}")
    return "\n".join(lines)


def _by_hand(rel: str, data_dir: Path) -> str:
    """How to put registered file ``rel`` in place by hand: the URL and the exact name
    to save it under (an uncompressed download is accepted under its own name)."""
    spec = FILES[rel]
    if spec.url_is_raw and rel.endswith(".gz"):
        return (f"  - {spec.urls[0]}\n    saved as {data_dir / rel[:-3]} (or gzipped as "
                f"{data_dir / rel})")
    return f"  - {spec.urls[0]}\n    saved as {data_dir / rel}"


def _adopt_uncompressed(rel: str, data_dir: Path) -> bool:
    """A registered ``.gz`` file whose public home serves it uncompressed, found in
    the data directory under its uncompressed name (downloaded by hand, as the
    missing-file message offers): verified against the registered content sha256 and
    stored gzipped under the registered name. True if it was."""
    spec = FILES[rel]
    raw = data_dir / rel[:-3]
    if not (spec.url_is_raw and spec.content_sha256 and rel.endswith(".gz")
            and raw.is_file()):
        return False
    actual = sha256_file(raw)
    if actual != spec.content_sha256:
        raise ChecksumError(raw, spec.content_sha256, actual,
                            f"It is not the registered content of {rel}: delete it and "
                            + how_to_get(spec.dataset) + ".")
    ok, _ = _try_candidate(raw, spec, data_dir / rel, raw_content=True)
    return ok


def locate(dataset: str, *, data_dir=None, verify: bool = True) -> dict[str, Path]:
    """Paths of the raw files of ``dataset`` in the data directory, verified.

    Parameters
    ----------
    dataset : str
        ``"mnist"``, ``"bibtex"``, ``"delicious"``, ``"20news"`` (registered files) or
        ``"eurlex"``, ``"wiki10"``, ``"amazoncat"``, ``"wikismall"`` (user files).
    data_dir : str or Path, optional
        Default ``paths.raw_dir()``.
    verify : bool
        Check the sha256 (default; cached by size and mtime).

    Returns
    -------
    dict
        role -> absolute path.

    Raises
    ------
    MissingDataError
        Naming the missing files, the directory searched and how to get them.
    ChecksumError
        A file does not match its registered checksum.
    """
    data_dir = Path(data_dir).expanduser().resolve() if data_dir is not None \
        else paths.raw_dir()
    out = {}
    if dataset in DATASET_FILES:
        roles = DATASET_FILES[dataset]
        missing = [rel for rel in roles.values() if not (data_dir / rel).is_file()
                   and not _adopt_uncompressed(rel, data_dir)]
        if missing:
            by_hand = [_by_hand(rel, data_dir) for rel in missing if FILES[rel].urls]
            derived = [rel for rel in missing if FILES[rel].derived_from]
            hint = "To get them, " + how_to_get(dataset)
            if derived:
                hint += ("; " + ", ".join(derived) + f" is built by "
                         f"{paths.fetch_command(dataset)} from registered files it "
                         "downloads or copies first")
            hint += "."
            if by_hand:
                hint += "\nOr download them yourself:\n" + "\n".join(by_hand)
            raise MissingDataError(_missing_message(dataset, missing, data_dir, hint),
                                   files=[str(data_dir / m) for m in missing])
        for role, rel in roles.items():
            p = data_dir / rel
            if verify:
                verify_file(p, rel, data_dir=data_dir)
            out[role] = p
        return out
    if dataset in USER_FILES:
        spec = USER_FILES[dataset]
        missing = []
        for role in ("train", "test"):
            found = next((data_dir / c for c in spec[role] if (data_dir / c).is_file()),
                         None)
            if found is None:
                missing.append(spec[role][0])
            else:
                out[role] = found
        if missing:
            hint = (f"No copy can be fetched automatically: get {spec['how']} and put the "
                    f"files there under one of the names {spec['train']} / {spec['test']} "
                    f"(see data/README.md). Or use the synthetic stand-in "
                    f"load_dataset('{dataset}-surrogate').")
            raise MissingDataError(_missing_message(dataset, missing, data_dir, hint),
                                   files=[str(data_dir / m) for m in missing])
        if verify:
            for p in out.values():
                verify_file(p, p.relative_to(data_dir).as_posix(), data_dir=data_dir)
        return out
    raise ValueError(f"no raw files are registered for data set {dataset!r}")


# --------------------------------------------------------------------------- atomic I/O
def _default_mode() -> int:
    """Permissions of a newly created file under the current umask (mkstemp uses 0600)."""
    um = os.umask(0)
    os.umask(um)
    return 0o666 & ~um


def atomic_write_bytes(target, payload: bytes) -> None:
    """Write ``payload`` to ``target`` via a temporary file in the same folder."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.chmod(tmp, _default_mode())
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _atomic_copy(src: Path, target: Path, *, gzip_it: bool = False) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.chmod(tmp, _default_mode())
    try:
        with os.fdopen(fd, "wb") as out, open(src, "rb") as inp:
            if gzip_it:
                with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=9, mtime=0,
                                   filename="") as gz:
                    shutil.copyfileobj(inp, gz, 1 << 20)
            else:
                shutil.copyfileobj(inp, out, 1 << 20)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


# --------------------------------------------------------------------------- fetch
@dataclass
class FetchResult:
    """What :func:`fetch` did for one file."""

    path: str
    status: str  # present | copied | downloaded | built | missing | failed | skipped
    #              | user-present | user-missing
    detail: str = ""
    sha256: str = ""
    tried: list = field(default_factory=list)


def _pooch_download(url: str, dest_dir: Path) -> Path:
    import pooch

    downloader = pooch.HTTPDownloader(progressbar=False, timeout=60)
    fname = "download-" + hashlib.sha256(url.encode()).hexdigest()[:12]
    out = pooch.retrieve(url, known_hash=None, fname=fname, path=dest_dir,
                         downloader=downloader)
    return Path(out)


def _try_candidate(src: Path, spec: RegisteredFile, target: Path, *,
                   raw_content: bool) -> tuple[bool, str]:
    """Verify ``src`` (a mirror copy or a download) and install it at ``target``."""
    if raw_content:  # uncompressed download: check its sha256, gzip it on arrival
        actual = sha256_file(src)
        if actual != spec.content_sha256:
            return False, f"sha256 {actual} != registered content {spec.content_sha256}"
        _atomic_copy(src, target, gzip_it=True)
    else:
        ok, how, actual = _check(src, spec)
        if not ok:
            return False, f"sha256 {actual} does not match the registry"
        _atomic_copy(src, target)
    # verify the installed file as a loader will
    ok, how, actual = _check(target, spec)
    if not ok:  # pragma: no cover - copy corrupted on the way
        target.unlink(missing_ok=True)
        return False, "installed copy failed verification"
    return True, actual


def fetch(datasets=None, *, data_dir=None, mirror=None, download: bool = True,
          downloader=None, verbose: bool = True, raise_on_missing: bool = True
          ) -> list[FetchResult]:
    """Populate the data directory: copy from the mirror, else download; verify all.

    For each registered file of the chosen data sets: a file already in the data
    directory that verifies (its sha256 computed again, every time) is kept; one that
    does not verify is reported and replaced from a verified source; a missing one is
    copied from ``mirror`` (keeping the sub-folder layout) or, when the mirror lacks a
    verified copy and ``download`` is true, downloaded with pooch from its public home. Every copy
    is written to a temporary file next to the target and renamed, so no half-copied file is ever
    left. A derived file (``derived_from``, the authors' CSV) is then built from its verified
    inputs and checked against its own sha256 before it is written (status ``built``);
    only if an input cannot be had is a verified copy of it taken from the mirror.

    Parameters
    ----------
    datasets : list of str, optional
        Default: all registered data sets (mnist, bibtex, delicious, 20news,
        authors-results).
    data_dir, mirror : str or Path, optional
        Default ``paths.raw_dir()`` and ``paths.mirror_dir()``.
    download : bool
        Allow downloads from the public homes.
    downloader : callable, optional
        ``downloader(url, tmp_dir) -> Path`` (default: pooch over HTTP).
    verbose : bool
        Print one line per file and a summary.
    raise_on_missing : bool
        Raise :class:`MissingDataError` at the end if a required file could be had
        from nowhere (after trying every file).

    Returns
    -------
    list of FetchResult
    """
    data_dir = Path(data_dir).expanduser().resolve() if data_dir is not None \
        else paths.raw_dir()
    mirror = Path(mirror).expanduser().resolve() if mirror is not None else paths.mirror_dir()
    names = list(DATASET_FILES) if datasets is None else list(datasets)
    for nm in names:
        if nm not in DATASET_FILES and nm not in USER_FILES:
            raise ValueError(f"unknown data set {nm!r}; choose from "
                             f"{sorted(DATASET_FILES) + sorted(USER_FILES)}")
    downloader = downloader or _pooch_download
    data_dir.mkdir(parents=True, exist_ok=True)
    results: list[FetchResult] = []
    say = print if verbose else (lambda *a, **k: None)
    done: dict[str, FetchResult] = {}
    for rel, spec in FILES.items():   # raw files first, then those derived from them
        if spec.dataset in names and not spec.derived_from:
            done[rel] = _fetch_one(rel, spec, data_dir, mirror, download, downloader, say)
    for rel, spec in FILES.items():
        if spec.dataset in names and spec.derived_from:
            done[rel] = _fetch_derived(rel, spec, data_dir, mirror, done, say)
    results += list(done.values())
    results += _report_user_files(names if datasets is not None else None, data_dir, say)
    counts = {}
    for r in results:
        counts[r.status] = counts.get(r.status, 0) + 1
    say(f"data dir {data_dir}: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
    failed = [r for r in results if r.status in ("missing", "failed")]
    if failed and raise_on_missing:
        raise _missing_files_error(failed, data_dir)
    return results


def _present(res: FetchResult, target: Path, spec, data_dir: Path, say, then: str,
             then_said: str) -> bool:
    """Whether ``target`` is there and verifies (hashed again every time: a stale
    verification is never trusted); ``res`` and ``say`` record what was found, and what
    happens ``then`` to a copy that does not verify."""
    if not target.is_file():
        return False
    rel = res.path
    try:
        res.sha256 = verify_file(target, rel, data_dir=data_dir, use_cache=False)
    except ChecksumError as exc:
        res.tried.append(f"{target}: sha256 {exc.actual} does not match the registered "
                         f"one; {then}")
        say(f"  BAD         {rel}: sha256 {exc.actual} does not match the registered "
            f"{spec.sha256}; {then_said}")
        return False
    res.status, res.detail = "present", "sha256 verified"
    say(f"  present     {rel}  (sha256 verified)")
    return True


def _fetch_one(rel: str, spec, data_dir: Path, mirror: Path, download: bool, downloader,
               say) -> FetchResult:
    """Obtain one registered file for :func:`fetch`: keep it if it verifies, else copy
    it from ``mirror``, else (``download``) download it; the result says how, or what
    was tried."""
    target = data_dir / rel
    res = FetchResult(rel, "missing")
    if _present(res, target, spec, data_dir, say, "replacing it",
                "replacing it from a verified copy"):
        return res
    src = mirror / rel
    if src.is_file():
        ok, info = _try_candidate(src, spec, target, raw_content=False)
        if ok:
            res.status, res.sha256, res.detail = "copied", info, f"from {src}"
        else:
            res.tried.append(f"{src}: {info}")
    else:
        res.tried.append(f"{src}: not there")
    if res.status == "missing" and download:
        _download_one(res, spec, target, data_dir, downloader)
    elif res.status == "missing":
        res.tried.append("downloads disabled")
    if res.status == "missing" and not spec.required:
        res.status = "skipped"
    if res.status in ("copied", "downloaded"):
        _MEMO.pop(str(target.resolve()), None)
        verify_file(target, rel, data_dir=data_dir, use_cache=False)
    say(f"  {res.status:<11} {rel}" + (f"  ({res.detail})" if res.detail else ""))
    return res


def _fetch_derived(rel: str, spec, data_dir: Path, mirror: Path,
                   done: dict, say) -> FetchResult:
    """A derived file for :func:`fetch`: kept if it verifies; else built from its inputs
    (raw files :func:`fetch` has just obtained and verified; the builder hashes their
    bytes again before reading them and checks the result against ``spec.sha256``
    before writing it atomically); else, when an input could not be had, copied from a
    verified copy in ``mirror``."""
    target = data_dir / rel
    res = FetchResult(rel, "missing")
    if _present(res, target, spec, data_dir, say, "rebuilding it", "rebuilding it"):
        return res
    if target.is_file():
        target.unlink()
    absent = [r for r in spec.derived_from
              if r not in done or done[r].status not in ("present", "copied", "downloaded")]
    if not absent:
        import importlib

        module, func = spec.builder.split(":")
        build = getattr(importlib.import_module(module), func)
        try:
            res.sha256 = build(data_dir, spec, [FILES[r] for r in spec.derived_from])
            res.status = "built"
            res.detail = f"from {len(spec.derived_from)} verified files"
        except (ChecksumError, DataFormatError) as exc:
            res.status = "failed"
            res.tried.append(f"building it from {len(spec.derived_from)} files: {exc}")
            say(f"  BAD         {rel}: not built: {exc}")
    else:
        res.tried.append(f"building it: {len(absent)} of its {len(spec.derived_from)} "
                         f"input files could not be had (first: {absent[0]})")
    if res.status in ("missing", "failed"):   # a verified copy of the result will do
        src = mirror / rel
        if src.is_file():
            ok, info = _try_candidate(src, spec, target, raw_content=False)
            if ok:
                res.status, res.sha256, res.detail = "copied", info, f"from {src}"
            else:
                res.tried.append(f"{src}: {info}")
        else:
            res.tried.append(f"{src}: not there")
    if res.status in ("built", "copied"):
        _MEMO.pop(str(target.resolve()), None)
        verify_file(target, rel, data_dir=data_dir, use_cache=False)
    say(f"  {res.status:<11} {rel}" + (f"  ({res.detail})" if res.detail else ""))
    return res


def _download_one(res: FetchResult, spec, target: Path, data_dir: Path,
                  downloader) -> None:
    """Try ``spec``'s URLs in turn until one gives a verified copy at ``target``;
    ``res`` records the outcome (``downloaded``) or every attempt (``tried``)."""
    for url in spec.urls:
        with tempfile.TemporaryDirectory(dir=data_dir, prefix=".download-") as tmp:
            try:
                got = Path(downloader(url, Path(tmp)))
            except Exception as exc:  # no network, HTTP error, ...
                res.tried.append(f"{url}: download failed ({type(exc).__name__}: "
                                 f"{str(exc)[:120]})")
                continue
            raw = spec.url_is_raw and not _looks_gzip(got)
            ok, info = _try_candidate(got, spec, target, raw_content=raw)
            if ok:
                res.status, res.sha256, res.detail = "downloaded", info, f"from {url}"
                return
            res.tried.append(f"{url}: {info}")


def _report_user_files(names, data_dir: Path, say) -> list[FetchResult]:
    """The user-supplied data sets (all, or those in ``names``): verified when present,
    reported as optional when not (their surrogates stand in)."""
    results = []
    for nm, spec in USER_FILES.items():
        if names is not None and nm not in names:
            continue
        n_found = 0
        for role in ("train", "test"):
            found = next((c for c in spec[role] if (data_dir / c).is_file()), None)
            if found:
                n_found += 1
                try:
                    sha = verify_file(data_dir / found, found, data_dir=data_dir,
                                      use_cache=False)
                except ChecksumError as exc:
                    results.append(FetchResult(found, "failed", detail=str(exc)))
                    say(f"  FAILED      {found}: {exc}")
                    continue
                results.append(FetchResult(found, "user-present", sha256=sha))
                say(f"  user file   {found}  sha256 {sha.split(':')[-1]}"
                    + ("  (not pinned: add it to SHA256SUMS)" if sha.startswith("unv") else ""))
            else:
                results.append(FetchResult(spec[role][0], "user-missing",
                                           detail=f"optional; {nm}-surrogate is used"))
        if n_found < 2:
            say(f"  optional    {nm}: not in the data dir ({spec['train'][0]}, ...); "
                f"the synthetic {nm}-surrogate stands in")
    return results


def _missing_files_error(failed, data_dir: Path) -> MissingDataError:
    """The error of :func:`fetch` for required files it could obtain from nowhere: each
    file, where it was wanted, what was tried, and what to do."""
    msg = ["could not obtain these required raw files:"]
    for r in failed:
        msg.append(f"  - {r.path} (wanted at {data_dir / r.path}); tried:")
        msg += [f"      {t}" for t in (r.tried or [r.detail])]
    msg.append(f"Copy them into {data_dir} (same sub-folder layout), or point "
               f"DATA_MIRROR at a folder holding them, or run where the URLs above "
               f"are reachable.")
    return MissingDataError("\n".join(msg), files=[str(data_dir / r.path) for r in failed])


def _looks_gzip(p: Path) -> bool:
    with open(p, "rb") as fh:
        return fh.read(2) == b"\x1f\x8b"
