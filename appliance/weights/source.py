"""Where a revision's files come from: the hub, a site's HTTP mirror of it, or a mounted folder.

Every kind uses the hub's own layout, so a plain static copy behind any HTTP server is a mirror:

    {base}/{checkpoint}/resolve/{revision}/{path}                       a file
    {base}/api/models/{checkpoint}/tree/{revision}?recursive=true       the listing (a static file on a mirror)

The listing is the hub's tree API format (a JSON list of `{"type", "path", "size", "oid", "lfs": {"oid", "size"}}`
entries, in pages linked by a `Link: rel="next"` header), parsed here rather than through huggingface_hub: the
appliance needs two fields of it. An LFS entry's `lfs.oid` is the file's sha256; a plain git file's sha256 is
not listed, so its first fetch records it (trust on first use).

A hub token is read from its environment variable or file at each request and sent only as a header: no message,
log line or exception holds it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Annotated, Protocol
from urllib.parse import quote, unquote, urljoin, urlparse

import httpx
import urllib3
from pydantic import ConfigDict, Field, TypeAdapter, ValidationError

from appliance.weights.errors import TransientError, WeightsError

__all__ = ["Body", "FolderSource", "HttpSource", "RemoteFile", "Source", "Token", "open_source"]

CHUNK_BYTES = 1 << 20
_REDIRECTS = urllib3.Retry(connect=0, read=0, status=0, other=0, redirect=5)  # the fetch retries faults with backoff


@dataclass(frozen=True, slots=True)
class RemoteFile:
    path: str
    size: int
    sha256: str | None
    """Known ahead for an LFS file (the listing's) or a locked one; None for a git file fetched the first time."""


@dataclass(frozen=True, slots=True)
class Body:
    """An opened file: its bytes from `offset`, which is 0 where the source could not resume (a 200 to a Range)."""

    offset: int
    chunks: Iterator[bytes]


class Source(Protocol):
    @property
    def location(self) -> str:
        """The base URL or folder, as a lock records it."""
        ...

    def list_files(self, checkpoint: str, revision: str) -> list[RemoteFile]: ...

    def url(self, checkpoint: str, revision: str, path: str) -> str: ...

    def open(self, checkpoint: str, revision: str, path: str, offset: int) -> AbstractContextManager[Body]:
        """The file's bytes from `offset` (or from 0, said by `Body.offset`); TransientError for what a retry
        may mend, WeightsError otherwise."""
        ...


@dataclass(frozen=True, slots=True)
class Token:
    """Where the hub token is: a file's path (which must hold one), else an environment variable's name (unset: no
    token is sent)."""

    env: str | None = None
    file: Path | None = None

    def headers(self) -> dict[str, str]:
        """The Authorization header, read now; a WeightsError names the variable or file, never the value."""
        if self.file is None:
            value = os.environ.get(self.env, "").strip() if self.env else ""
            return {"Authorization": f"Bearer {value}"} if value else {}  # unset: a site mirror may need none
        try:
            value = self.file.read_text().strip()
        except OSError as error:
            raise WeightsError(f"hub token file {self.file}: cannot read it: {error.strerror}") from None
        if not value:
            raise WeightsError(f"hub token file {self.file}: it is empty")
        return {"Authorization": f"Bearer {value}"}


@dataclass(frozen=True, slots=True)
class _Lfs:
    oid: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    size: int


@dataclass(frozen=True, slots=True)
class _TreeEntry:
    # The hub adds fields over time (lastCommit, xetHash, ...): only these are read.
    __pydantic_config__ = ConfigDict(extra="ignore")

    type: str
    path: str
    size: int = 0
    lfs: _Lfs | None = None


_TREE: TypeAdapter[list[_TreeEntry]] = TypeAdapter(list[_TreeEntry])


class HttpSource:
    """The hub, or a mirror in its layout; `read_timeout_s` bounds a stall (no byte for that long)."""

    def __init__(
        self, base: str, *, token: Token | None = None, read_timeout_s: float = 30.0, connect_timeout_s: float = 10.0
    ) -> None:
        self._base = base.rstrip("/")
        self._token = token or Token()
        self._timeout = httpx.Timeout(read_timeout_s, connect=connect_timeout_s)
        self._file_timeout = urllib3.Timeout(connect=connect_timeout_s, read=read_timeout_s)

    @property
    def location(self) -> str:
        return self._base

    def url(self, checkpoint: str, revision: str, path: str) -> str:
        return f"{self._base}/{checkpoint}/resolve/{revision}/{quote(path)}"

    def list_files(self, checkpoint: str, revision: str) -> list[RemoteFile]:
        what = f"the listing of {checkpoint}@{revision}"
        page: str | None = f"{self._base}/api/models/{checkpoint}/tree/{revision}?recursive=true"
        entries: list[_TreeEntry] = []
        with self._client() as client:
            while page is not None:
                response = _guarded(what, page, partial(client.get, page, headers=self._token.headers()))
                _check_status(what, page, response.status_code)
                entries += _tree(what, page, response.content)
                page = self._next_page(what, page, response)
        return [
            RemoteFile(e.path, e.lfs.size if e.lfs else e.size, e.lfs.oid if e.lfs else None)
            for e in entries
            if e.type == "file"
        ]

    @contextmanager
    def open(self, checkpoint: str, revision: str, path: str, offset: int) -> Iterator[Body]:
        url = self.url(checkpoint, revision, path)
        # identity: a Range counts the file's own bytes, not a compressed stream's
        headers = {"Accept-Encoding": "identity", **self._token.headers()}
        if offset:
            headers["Range"] = f"bytes={offset}-"
        # The files go through urllib3 (http.client's reads into large buffers): httpx's receive path streamed a
        # loopback mirror at a third of curl's rate (bench/weights.py), urllib3 at curl's. Redirects are followed
        # (the hub answers a file with one to its CDN) and urllib3 drops the token when the host changes.
        with _connections() as pool:  # closed with the file: no socket outlives its fetch
            try:
                response = pool.request(
                    "GET",
                    url,
                    headers=headers,
                    preload_content=False,
                    decode_content=False,
                    timeout=self._file_timeout,
                    retries=_REDIRECTS,
                )
            except urllib3.exceptions.HTTPError as error:
                raise _transport(path, url, error) from None
            try:
                _check_status(path, url, response.status)
                resumed = response.status == 206 and offset > 0
                answered = response.headers.get("content-range", "")
                if resumed and not answered.startswith(f"bytes {offset}-"):
                    raise WeightsError(f"{path}: {url} answered the range {offset}- with {answered!r}")
                yield Body(offset if resumed else 0, _chunks(path, url, response))
            finally:
                # Closed, not released: a response not read to its end (an error status, a file cancelled or
                # refused mid-body) holds its connection outside the pool that `_connections` closes.
                response.close()

    def _next_page(self, what: str, page: str, response: httpx.Response) -> str | None:
        """The hub's next page of a long listing; only on this source, which the token is sent to."""
        link = response.links.get("next", {}).get("url")
        if link is None:
            return None
        url = urljoin(page, link)
        if not url.startswith(f"{self._base}/"):
            raise WeightsError(f"{what}: {page} links its next page outside {self._base}: {url}")
        return url

    def _client(self) -> httpx.Client:
        # The hub answers a file with a redirect to its CDN; httpx drops the token when the host changes.
        return httpx.Client(timeout=self._timeout, follow_redirects=True)


@contextmanager
def _connections() -> Iterator[urllib3.PoolManager]:
    """A PoolManager whose sockets are closed when the block ends. Its own exit only forgets its pools (urllib3 closes
    a pool's idle connections when the pool is collected), and a response kept by an error's traceback keeps its
    pool, so a connection released to it after a file was read to its end stayed open until a garbage collection."""
    manager = urllib3.PoolManager()
    try:
        yield manager
    finally:
        for key in manager.pools.keys():  # noqa: SIM118 - the container refuses iteration; keys() is its copy
            manager.pools[key].close()
        manager.clear()


def _tree(what: str, url: str, content: bytes) -> list[_TreeEntry]:
    try:
        return _TREE.validate_json(content)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "the document"
        fault = " ".join(first["msg"].split())
        raise WeightsError(f"{what} at {url} is not the hub's tree format: {where}: {fault}") from None


def _guarded(what: str, url: str, call: Callable[[], httpx.Response]) -> httpx.Response:
    try:
        return call()
    except httpx.TransportError as error:
        raise _transport(what, url, error) from None


def _chunks(what: str, url: str, response: urllib3.BaseHTTPResponse) -> Iterator[bytes]:
    try:
        while chunk := response.read(CHUNK_BYTES):
            yield chunk
    except urllib3.exceptions.HTTPError as error:
        raise _transport(what, url, error) from None


def _transport(what: str, url: str, error: httpx.TransportError | urllib3.exceptions.HTTPError) -> TransientError:
    fault: Exception = error
    if isinstance(error, urllib3.exceptions.MaxRetryError) and error.reason is not None:
        fault = error.reason  # the fault itself, not urllib3's wrapping of it
    if isinstance(fault, urllib3.exceptions.ProtocolError) and fault.args:
        detail = str(fault.args[-1])  # the cause: e.g. the server closed the connection without answering
    else:
        detail = str(fault).split(": ", 1)[-1] if isinstance(fault, urllib3.exceptions.HTTPError) else str(fault)
    return TransientError(f"{what}: {type(fault).__name__} from {url}: {' '.join(detail.split()) or 'no detail'}")


def _check_status(what: str, url: str, status: int) -> None:
    if status in (200, 206):
        return
    if status >= 500 or status == 429:
        raise TransientError(f"{what}: HTTP {status} from {url}")
    if status in (401, 403):
        raise WeightsError(f"{what}: HTTP {status} from {url}: the source refused the token (or its absence)")
    raise WeightsError(f"{what}: HTTP {status} from {url}")


class FolderSource:
    """A mounted folder in the hub's layout (an NFS export of a mirror, a removable disk)."""

    def __init__(self, root: Path) -> None:
        self._root = root

    @property
    def location(self) -> str:
        return str(self._root)

    def url(self, checkpoint: str, revision: str, path: str) -> str:
        return str(self._revision_dir(checkpoint, revision) / path)

    def list_files(self, checkpoint: str, revision: str) -> list[RemoteFile]:
        folder = self._revision_dir(checkpoint, revision)
        if not folder.is_dir():
            raise WeightsError(f"{folder}: no such folder: the folder source has no {checkpoint}@{revision}")
        files = sorted(p for p in folder.rglob("*") if p.is_file())
        return [RemoteFile(p.relative_to(folder).as_posix(), p.stat().st_size, None) for p in files]

    @contextmanager
    def open(self, checkpoint: str, revision: str, path: str, offset: int) -> Iterator[Body]:
        file = self._revision_dir(checkpoint, revision) / path
        try:
            opened = file.open("rb")
        except OSError as error:
            raise WeightsError(f"{path}: cannot read {file}: {error.strerror}") from None
        with opened:
            start = offset if offset <= os.fstat(opened.fileno()).st_size else 0
            opened.seek(start)
            yield Body(start, iter(lambda: opened.read(CHUNK_BYTES), b""))

    def _revision_dir(self, checkpoint: str, revision: str) -> Path:
        return self._root / checkpoint / "resolve" / revision


def open_source(location: str, *, token: Token | None = None, read_timeout_s: float = 30.0) -> Source:
    """The source at `location`: an http(s) URL (the token is sent there), a `file:` URL or an absolute folder."""
    if location.startswith(("http://", "https://")):
        return HttpSource(location, token=token, read_timeout_s=read_timeout_s)
    folder = Path(unquote(urlparse(location).path)) if location.startswith("file:") else Path(location)
    if folder.is_absolute():
        return FolderSource(folder)
    raise WeightsError(f"weights source {location!r}: expected an http(s):// URL, a file: URL or an absolute folder")
