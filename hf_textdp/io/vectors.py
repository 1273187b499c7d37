"""Reading static word vectors: GloVe text (no header) and word2vec text (``V d`` header).

Format rules are space.md §3: the format is told apart by content, never by file name; gzip is
detected by its magic bytes; ragged rows and non-numbers raise :class:`VectorFileError` naming the
1-based line; words containing whitespace are dropped (and counted); a word given twice is refused, naming
it and both lines (which vector was meant cannot be told).

Speed: the numbers of all rows are parsed by one C-level pass (``numpy.fromstring``, correctly rounded
like ``float()``) when every row has the plain shape ``word`` + d numbers made of ``[0-9eE+-.]``.
Anything else (and any doubt: a count that does not add up, a parse error) goes through the
line-by-line reference parser, which gives the same result and raises the errors of space.md §3. A
successful parse is cached by the SHA-256 of the file's bytes (``vectors/`` in the cache folder;
the ``vector_cache`` switch of :mod:`hf_textdp.settings` turns it off), so a later load costs one read and one hash.
"""

from __future__ import annotations

import gzip
import hashlib
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import settings
from ..errors import VectorFileError
from ..utils.file_trust import private_dir, untrusted
from ..utils.logging import get_logger
from .cache import cache_dir
from .files import atomic_open


__all__ = ["StaticVectors", "read_vectors"]

logger = get_logger(__name__)

_SPLIT = re.compile(r"[ \t]+")
_INT = re.compile(r"^[0-9]+$")


@dataclass(frozen=True)
class StaticVectors:
    """Kept words (ids 0, 1, 2, … in file order), their fp32 vectors and the load summary."""

    words: list[str]
    matrix: np.ndarray  # [V, d] float32
    kind: str  # "glove" or "word2vec"
    file_sha256: str
    dropped_whitespace: int
    dropped_duplicate: int


def _is_float(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


def read_vectors(path: str | Path, *, cache: bool | None = None) -> StaticVectors:
    """Parse a GloVe or word2vec text file (optionally gzip-compressed).

    ``cache``: use the parse cache (``None``: as :func:`hf_textdp.settings.vector_cache_enabled` says)."""
    path = Path(path)
    raw = path.read_bytes()
    sha = hashlib.sha256(raw).hexdigest()
    use = settings.vector_cache_enabled() if cache is None else cache
    cached = _cache_load(sha) if use else None
    if cached is not None:
        return cached
    result = _parse_bytes(raw, path.name, sha)
    if use:
        _cache_store(result)
    return result


def _parse_bytes(raw: bytes, name: str, sha: str) -> StaticVectors:
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except OSError as err:
            raise VectorFileError(f"model: {name} looks gzip-compressed but cannot be decompressed.") from err
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    if b"\x00" in raw[:65536]:
        raise VectorFileError(f"model: {name} is not a UTF-8 text vector file (binary word2vec is not supported).")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise VectorFileError(
            f"model: {name} is not valid UTF-8 at byte {err.start} (binary word2vec is not supported)."
        ) from err
    lines = text.split("\n")
    fast = _parse_fast(lines, name, sha)
    if fast is not None:
        return fast
    return _parse_reference(lines, name, sha)


# --------------------------------------------------------------------------- parse cache
_CACHE_VERSION = "v1"


def _cache_file(sha: str) -> Path:
    return cache_dir() / "vectors" / f"{sha}.{_CACHE_VERSION}.npz"


def _cache_load(sha: str) -> StaticVectors | None:
    """The parse of the file whose bytes hash to ``sha``, if an earlier load cached it (else None).

    The cache is content-addressed (SHA-256 of the file's bytes), so it can only hold this file's
    parse; only successful parses are stored, so every error is raised by the parser itself. Any
    problem reading the entry (missing, truncated, another version) means a fresh parse.
    """
    path = _cache_file(sha)
    if not path.is_file() or untrusted(path) is not None:  # another user's or others-writable entry: parse again
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            matrix = np.ascontiguousarray(z["matrix"], dtype=np.float32)
            words = bytes(z["words"]).decode("utf-8").split("\n") if z["words"].size else []
            kind = str(z["kind"])
            dropped = z["dropped"].tolist()
            digest = str(z["digest"]) if "digest" in z.files else ""
        if matrix.ndim != 2 or matrix.shape[0] != len(words) or kind not in ("glove", "word2vec"):
            return None
        if digest != _parse_digest(matrix, words, kind):  # edited, or an older version's entry
            logger.warning("the vector cache entry %s fails its SHA-256 check: parsing the file again", path)
            return None
        if int(dropped[1]):  # an older version dropped repeated words: parse again, which refuses them
            return None
        return StaticVectors(words, matrix, kind, sha, int(dropped[0]), int(dropped[1]))
    except (OSError, ValueError, KeyError, UnicodeDecodeError, IndexError):
        return None


def _parse_digest(matrix: np.ndarray, words: list[str], kind: str) -> str:
    """The SHA-256 a cached parse is checked by (issue 53, R4): its kind, words and little-endian fp32 matrix."""
    h = hashlib.sha256(f"{kind}\0{matrix.shape}\0".encode())
    h.update("\n".join(words).encode("utf-8"))
    h.update(np.ascontiguousarray(matrix, dtype="<f4").tobytes())
    return h.hexdigest()


def _cache_store(vec: StaticVectors) -> None:
    path = _cache_file(vec.file_sha256)
    try:
        private_dir(path.parent)
        # kept words never contain whitespace (space.md §3), so a newline separates them unambiguously
        words = np.frombuffer("\n".join(vec.words).encode("utf-8"), dtype=np.uint8)
        with atomic_open(path, "wb") as fh:
            np.savez(
                fh,
                matrix=vec.matrix,
                words=words,
                kind=np.str_(vec.kind),
                dropped=np.asarray([vec.dropped_whitespace, vec.dropped_duplicate], dtype=np.int64),
                digest=np.str_(_parse_digest(vec.matrix, vec.words, vec.kind)),
            )
    except OSError as err:  # a read-only or full cache folder only costs speed
        logger.debug("could not write the vector cache: %s", err)


def _fp32(mat64: np.ndarray) -> np.ndarray:
    """The matrix as float32; a value beyond float32 becomes infinite, which the space's row check refuses by name
    (:func:`~hf_textdp.io.weights_check.check_rows`), instead of a warning here."""
    with np.errstate(over="ignore"):
        return mat64.astype(np.float32)


_NUMBER_CHARS = b"0123456789eE+-. \n"


def _parse_fast(lines: list[str], name: str, sha: str) -> StaticVectors | None:
    """The common case in one pass, or ``None`` when the reference parser must decide (same result).

    Accepted: every non-blank row (after stripping blanks and ``\\r``) is a word without spaces or tabs
    followed by exactly d fields separated by single spaces (rows that differ, such as tab-separated
    or multi-field words, are split by the reference rule, row by row), and the numbers are made of
    ``[0-9eE+-.]`` only, where C ``strtod`` and Python ``float()`` accept the same strings and round
    them the same way (both correctly). The parse must yield exactly d numbers per row.
    """
    header = _header(lines, name)
    if header is None:
        return None
    d, header_v, first_no = header
    skip_header = header_v is not None
    words: list[str] = []
    seen: set[str] = set()
    keep_rows: list[int] = []
    numeric: list[str] = []
    dropped_ws = dropped_dup = 0
    for line in lines:
        s = line.strip(" \t\r")
        if not s:
            continue
        if skip_header:
            skip_header = False
            continue
        cut = s.find(" ")
        if cut > 0 and s.count(" ") == d and "\t" not in s and "  " not in s:
            word, nums = s[:cut], s[cut + 1 :]
        else:  # the reference rule for this row; anything irregular goes back to the reference parser
            fields = _SPLIT.split(s)
            if _ragged(fields, d) is not None:
                return None
            n = len(fields)
            word, nums = " ".join(fields[: n - d]), " ".join(fields[n - d :])
        row = len(numeric)
        numeric.append(nums)
        parts = word.split()  # str.split() cuts at exactly the str.isspace() characters
        if len(parts) != 1 or parts[0] != word:
            dropped_ws += 1
            continue
        if word in seen:  # refused by the reference parser, which knows the lines
            return None
        seen.add(word)
        words.append(word)
        keep_rows.append(row)
    n_rows = len(numeric)
    if (header_v is not None and n_rows != header_v) or len(words) < 2:
        return None
    blob = "\n".join(numeric)
    try:
        ascii_blob = blob.encode("ascii")
    except UnicodeEncodeError:
        return None
    if ascii_blob.translate(None, _NUMBER_CHARS):
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # numpy warns (future: raises) when the text does not parse to its end
            values = np.fromstring(blob, dtype=np.float64, sep=" ")
    except (ValueError, DeprecationWarning):
        return None
    if values.size != n_rows * d:
        return None
    mat64 = values.reshape(n_rows, d)
    if len(keep_rows) != n_rows:
        mat64 = mat64[np.asarray(keep_rows, dtype=np.int64)]
    if not np.isfinite(mat64).all():
        return None
    kind = "word2vec" if header_v is not None else "glove"
    return StaticVectors(words, _fp32(mat64), kind, sha, dropped_ws, dropped_dup)


def _first_rows(lines: list[str]) -> tuple[list[str] | None, int, list[str] | None]:
    """Fields of the first non-blank line, its 1-based number, and the fields of the second (or None)."""
    first: list[str] | None = None
    first_no = 0
    for no, line in enumerate(lines, 1):
        s = line.strip(" \t\r")
        if not s:
            continue
        if first is not None:
            return first, first_no, _SPLIT.split(s)
        first, first_no = _SPLIT.split(s), no
    return first, first_no, None


def _layout(first: list[str], second: list[str] | None) -> tuple[int, int | None]:
    """(d, word2vec row count or None): a ``V d`` header counts only when the next row has d numbers.

    d < 1 means the first row holds no number (an error for the reference parser).
    """
    if len(first) == 2 and _INT.match(first[0]) and _INT.match(first[1]) and int(first[0]) >= 1 and int(first[1]) >= 1:
        d = int(first[1])
        if second is not None and len(second) >= d + 1:
            return d, int(first[0])
    return len(first) - 1, None


def _ragged(fields: list[str], d: int) -> str | None:
    """Why ``fields`` is not a word followed by d numbers (space.md §3), or None when it is."""
    n = len(fields)
    if n < d + 1:
        return f"ragged row with {n - 1} values, expected {d}"
    if n > d + 1 and _is_float(fields[n - d - 1]):
        return f"ragged row with more than {d} values"
    return None


def _header(lines: list[str], name: str) -> tuple[int, int | None, int] | None:
    """(d, word2vec row count or None, 1-based line of the first row), or None for an empty file."""
    first, first_no, second = _first_rows(lines)
    if first is None:
        return None
    d, header_v = _layout(first, second)
    if d < 1:
        return None
    return d, header_v, first_no


def _parse_reference(lines: list[str], name: str, sha: str) -> StaticVectors:
    """The line-by-line parser of space.md §3: the reference result and every error message."""
    first, first_no, second = _first_rows(lines)
    if first is None:
        raise VectorFileError(f"model: {name} holds no vectors (the file is empty).")
    d, header_v = _layout(first, second)
    if d < 1:
        raise VectorFileError(f"model: {name} line {first_no}: expected a word followed by at least one number.")
    kind = "word2vec" if header_v is not None else "glove"
    words: list[str] = []
    seen: dict[str, int] = {}  # word: its line
    numbers: list[str] = []
    n_rows = 0
    dropped_ws = 0
    dropped_dup = 0
    skip_header = header_v is not None
    for no, line in enumerate(lines, 1):
        s = line.strip(" \t\r")
        if not s:
            continue
        if skip_header:
            skip_header = False
            continue
        fields = _SPLIT.split(s)
        why = _ragged(fields, d)
        if why is not None:
            raise VectorFileError(f"model: {name} line {no}: {why} (d from line {first_no}).")
        n = len(fields)
        n_rows += 1
        word = " ".join(fields[: n - d])
        if any(ch.isspace() for ch in word):
            dropped_ws += 1
            continue
        if word in seen:
            raise VectorFileError(
                f"model: {name} line {no}: the word {word!r} is given twice (lines {seen[word]} and {no}); each "
                "word may have one vector: remove one of them."
            )
        seen[word] = no
        words.append(word)
        numbers.extend(fields[n - d :])
    if header_v is not None and n_rows != header_v:
        raise VectorFileError(f"model: {name}: the word2vec header says {header_v} rows but the file has {n_rows}.")
    try:
        mat64 = np.asarray(numbers, dtype=np.float64).reshape(len(words), d)
    except ValueError:
        # find the offending line for a precise message
        for no, line in enumerate(lines, 1):
            fields = _SPLIT.split(line.strip(" \t\r"))
            if len(fields) >= d + 1 and not (kind == "word2vec" and no == first_no):
                for f in fields[len(fields) - d :]:
                    if not _is_float(f):
                        raise VectorFileError(f"model: {name} line {no}: {f[:20]!r} is not a number.") from None
        raise VectorFileError(f"model: {name}: a value is not a number.") from None
    if not np.isfinite(mat64).all():
        bad = int(np.nonzero(~np.isfinite(mat64).all(1))[0][0])
        raise VectorFileError(
            f"model: {name}: the vector of kept word #{bad + 1} has a non-finite value (inf or nan)."
        )
    if len(words) < 2:
        raise VectorFileError(f"model: {name} has {len(words)} usable word(s); at least 2 are needed.")
    return StaticVectors(words, _fp32(mat64), kind, sha, dropped_ws, dropped_dup)
