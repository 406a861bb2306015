"""Downloading a dataset file: checksummed, atomic, resumable, with a clear message when offline.

:func:`download_file` streams ``url`` into ``<dest>.part`` next to the target, verifies the checksum
of the complete file, and only then renames it to ``dest`` (``os.replace``), so ``dest`` either does
not exist or is complete and verified. When the connection drops mid-way the ``.part`` file is kept
and the next call asks the server for the rest with an HTTP ``Range: bytes=<size>-`` request (RFC
9110, section 14); a server that ignores the range answers 200 with the whole file, which then
replaces the partial one. A checksum mismatch deletes the ``.part`` file.
"""
from __future__ import annotations

import hashlib
import http.client
import logging
import os
import re
import socket
import urllib.error
import urllib.request
from pathlib import Path
from typing import Optional

from fedhet.errors import FedhetError

logger = logging.getLogger(__name__)

_CHUNK_BYTES = 1 << 20


class DownloadError(FedhetError, OSError):
    """A file could not be downloaded (offline, unreachable, HTTP error, interrupted transfer)."""


class ChecksumError(DownloadError):
    """A downloaded file's checksum differs from the expected one (the file was removed)."""


def file_digest(path: str | os.PathLike, algorithm: str) -> str:
    """The hex digest of the file at ``path`` (``algorithm`` is a :mod:`hashlib` name, e.g. "md5")."""
    digest = hashlib.new(algorithm)
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK_BYTES), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _hint(manual_hint: Optional[str]) -> str:
    return f"\n{manual_hint}" if manual_hint else ""


def _unreachable_reason(error: BaseException, timeout: float) -> str:
    reason = getattr(error, "reason", error)
    if isinstance(reason, socket.gaierror):
        return f"cannot resolve the host name ({reason}); the machine looks offline"
    if isinstance(reason, (TimeoutError, socket.timeout)):
        return f"no answer within {timeout:g} s; the machine may be offline or the server down"
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused; the server is unreachable (or the machine is offline)"
    return f"{reason}; the machine may be offline or the server unreachable"


def _resume_offset(response: http.client.HTTPResponse, offset: int) -> int:
    """Where the response body starts in the file: ``offset`` for a matching 206, else 0."""
    if offset == 0 or response.status != 206:
        return 0
    match = re.match(r"bytes (\d+)-", response.headers.get("Content-Range", ""))
    return offset if match and int(match.group(1)) == offset else 0


def _verify(part: Path, url: str, expected: dict[str, Optional[str]]) -> None:
    for algorithm, want in expected.items():
        if want is None:
            continue
        found = file_digest(part, algorithm)
        if found.lower() != want.lower():
            part.unlink(missing_ok=True)
            raise ChecksumError(f"{url}: {algorithm} checksum mismatch: expected {want.lower()}, found {found}; "
                                "the downloaded file was removed (the server or a proxy served different bytes)")


def download_file(url: str, dest: str | os.PathLike, *, sha256: Optional[str] = None, md5: Optional[str] = None,
                  timeout: float = 30.0, resume: bool = True, manual_hint: Optional[str] = None) -> Path:
    """Download ``url`` to ``dest`` atomically and return ``dest``.

    ``sha256``/``md5``: expected hex digests of the whole file (each checked when given).
    ``timeout``: seconds to wait for the connection and for each read.
    ``resume``: continue an earlier interrupted download from ``<dest>.part`` via an HTTP range.
    ``manual_hint``: appended to every error message (say how to provide the file by hand).

    Raises :class:`DownloadError` when the host is unreachable, answers with an HTTP error or the
    transfer stops early, and :class:`ChecksumError` when the bytes differ from the checksum.
    ``dest`` is never left half-written.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    offset = part.stat().st_size if resume and part.is_file() else 0
    headers = {"User-Agent": "fedhet"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    logger.info("downloading %s to %s%s", url, dest, f" (resuming at byte {offset})" if offset else "")
    try:
        response = urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout)
    except urllib.error.HTTPError as error:
        if error.code == 416 and offset:
            # The partial file is not a prefix the server can continue (e.g. the file changed): restart.
            part.unlink(missing_ok=True)
            return download_file(url, dest, sha256=sha256, md5=md5, timeout=timeout, resume=False,
                                 manual_hint=manual_hint)
        raise DownloadError(f"cannot download {url}: HTTP {error.code} {error.reason}" + _hint(manual_hint)) from error
    except (urllib.error.URLError, OSError) as error:
        raise DownloadError(f"cannot download {url}: {_unreachable_reason(error, timeout)}"
                            + _hint(manual_hint)) from error

    with response:
        start = _resume_offset(response, offset)
        length = response.headers.get("Content-Length")
        expected_total = start + int(length) if length is not None and length.isdigit() else None
        received = start
        try:
            with open(part, "ab" if start else "wb") as handle:
                for chunk in iter(lambda: response.read(_CHUNK_BYTES), b""):
                    handle.write(chunk)
                    received += len(chunk)
                handle.flush()
                os.fsync(handle.fileno())
        except (OSError, http.client.HTTPException) as error:
            raise DownloadError(f"cannot download {url}: the transfer stopped after {received} bytes ({error}); "
                                f"{part} is kept and the next attempt resumes from it" + _hint(manual_hint)) from error
    # http.client returns a short body without an error when the server closes early: check the length.
    if expected_total is not None and received != expected_total:
        raise DownloadError(f"cannot download {url}: the server announced {expected_total} bytes but sent "
                            f"{received}; {part} is kept and the next attempt resumes from it" + _hint(manual_hint))
    _verify(part, url, {"sha256": sha256, "md5": md5})
    os.replace(part, dest)
    return dest
