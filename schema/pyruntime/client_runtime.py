"""HTTP client of agentd protocol v1: one method per operation of
api/openapi.yaml, on urllib from the standard library.

A method returns the decoded success body (a dataclass from models, bytes, or
an EventStream of typed SSE events) and raises ApiError for any other status,
with the route's error body decoded when the contract declares one. The
response headers the contract declares (the daemon version) are kept in
Client.last_headers. An operation whose events may also come as binary frames
(x-frames) has a second method, NAME_frames, that asks for them and returns a
FrameStream when the daemon answered with frames; FrameReader reads them and
refuses, never guesses past, any byte no conforming writer sends."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, BinaryIO, Callable, Dict, Iterator, List, Optional, Tuple, Union

from .models import *  # noqa: F401,F403 (the wire types, re-exported for callers)
from .models import (
    FRAME_HEADER_BYTES, FRAME_KEEPALIVE, FRAME_LAST_TYPE, FRAME_MAX_PAYLOAD_BYTES, FRAMES_MEDIA_TYPE, LIMITS,
    VERSION_HEADER, ErrorBody,
)


class ApiError(Exception):
    """A status the call did not succeed with. error is the decoded JSON error
    body (an ErrorBody with its slug) where the contract declares one for the
    status; text is the body as text otherwise (the fs routes answer
    text/plain; 401 and 503 have no body)."""

    def __init__(self, operation: str, status: int, error: Optional[ErrorBody], text: str, headers: Dict[str, str]):
        self.operation = operation
        self.status = status
        self.error = error
        self.text = text
        self.headers = headers
        what = f"{error.error}: {error.detail}" if error is not None else (text or "no body")
        super().__init__(f"{operation}: HTTP {status}: {what}")

    @property
    def slug(self) -> Optional[str]:
        """The machine-readable error slug, when the body carried one."""
        return self.error.error if self.error is not None else None


def _quote(v: str) -> str:
    return urllib.parse.quote(str(v), safe="")


def _query_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _read_all(resp: Any) -> bytes:
    try:
        return resp.read()
    finally:
        resp.close()


def _api_error(operation: str, resp: Any, json_statuses: Tuple[int, ...]) -> ApiError:
    raw = _read_all(resp)
    text = raw.decode("utf-8", "replace")
    body: Optional[ErrorBody] = None
    if resp.status in json_statuses:
        try:
            body = ErrorBody.from_dict(json.loads(raw))
        except ValueError:
            body = None
    return ApiError(operation, resp.status, body, text, dict(resp.headers.items()))


class EventStream:
    """The events of one SSE response, decoded as the contract's event union.
    Iterate it; keepalive comments are skipped; the iteration ends when the
    server ends the body. Close it (or use it as a context manager) to hang up
    early. complete is True once the terminal event was read."""

    def __init__(self, resp: Any, decode: Callable[[Dict[str, Any]], Any]):
        self._resp = resp
        self._decode = decode
        self.complete = False

    def __enter__(self) -> "EventStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self._resp.close()

    def __iter__(self) -> Iterator[Any]:
        event, data, ident = "message", [], None
        try:
            for raw in self._resp:
                line = raw.decode("utf-8").rstrip("\r\n")
                if line == "":
                    if data:
                        frame: Dict[str, Any] = {"event": event, "data": json.loads("\n".join(data))}
                        if ident is not None:
                            frame["id"] = ident
                        yield self._decode(frame)
                    event, data, ident = "message", [], None
                    continue
                if line.startswith(":"):
                    continue
                key, _, value = line.partition(":")
                if value.startswith(" "):
                    value = value[1:]
                if key == "event":
                    event = value
                elif key == "data":
                    data.append(value)
                elif key == "id":
                    ident = value
        finally:
            self._resp.close()


class FrameError(ValueError):
    """Bytes no conforming writer sends, in a body of binary frames: an
    unknown frame type, a keepalive with a payload, or a payload over
    FRAME_MAX_PAYLOAD_BYTES. Not a broken connection: retrying gets the same."""


class FrameCut(ConnectionError):
    """A body of binary frames ended inside a frame: the connection broke,
    not the stream (a body ends cleanly only between frames)."""


class Frame:
    """One frame: its type code (FRAME_*), offset, and payload as it came."""

    __slots__ = ("type", "offset", "payload")

    def __init__(self, type: int, offset: int, payload: bytes):
        self.type = type
        self.offset = offset
        self.payload = payload

    def __repr__(self) -> str:
        return f"Frame(type={self.type}, offset={self.offset}, payload={len(self.payload)} bytes)"


class FrameReader:
    """Reads binary frames (x-frames) from a byte source with read(n). next()
    returns the next frame, or None when the body ends between frames; it
    raises FrameCut when the body ends inside one and FrameError for a frame
    no writer sends. A length is checked before anything is read for it, so
    a body announcing a 4 GiB payload is refused, not allocated."""

    def __init__(self, src: Any):
        self._read = src.read

    def _exactly(self, n: int) -> bytes:
        b = self._read(n)
        if len(b) == n or not b:
            return b
        parts, got = [b], len(b)
        while got < n:
            more = self._read(n - got)
            if not more:
                break
            parts.append(more)
            got += len(more)
        return b"".join(parts)

    def next(self) -> Optional[Frame]:
        hdr = self._exactly(FRAME_HEADER_BYTES)
        if not hdr:
            return None
        if len(hdr) < FRAME_HEADER_BYTES:
            raise FrameCut(f"the body ended {len(hdr)} bytes into a frame header")
        typ = hdr[0]
        offset = int.from_bytes(hdr[1:9], "big")
        n = int.from_bytes(hdr[9:13], "big")
        if typ > FRAME_LAST_TYPE:
            raise FrameError(f"malformed frame: unknown type {typ}")
        if typ == FRAME_KEEPALIVE and n != 0:
            raise FrameError(f"malformed frame: a keepalive with {n} payload bytes")
        if n > FRAME_MAX_PAYLOAD_BYTES:
            raise FrameError(f"malformed frame: a {n}-byte payload is over the {FRAME_MAX_PAYLOAD_BYTES}-byte limit")
        payload = self._exactly(n) if n else b""
        if len(payload) < n:
            raise FrameCut(f"the body ended {len(payload)} bytes into a {n}-byte payload")
        return Frame(typ, offset, payload)


class FrameStream:
    """The frames of one response of binary frames. Iterate it; keepalive
    frames are skipped; the iteration ends when the body ends between frames.
    Close it (or use it as a context manager) to hang up early."""

    def __init__(self, resp: Any):
        self._resp = resp
        self.reader = FrameReader(resp)

    def __enter__(self) -> "FrameStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self._resp.close()

    def __iter__(self) -> Iterator[Frame]:
        try:
            while True:
                f = self.reader.next()
                if f is None:
                    return
                if f.type != FRAME_KEEPALIVE:
                    yield f
        finally:
            self._resp.close()


def _is_frames(resp: Any) -> bool:
    ct = resp.headers.get("Content-Type") or ""
    return ct.split(";", 1)[0].strip().lower() == FRAMES_MEDIA_TYPE


class Client:
    """A client of one agentd. base_url is its endpoint (http://127.0.0.1:9000
    for a local daemon); token is the bearer token the run hook installed, sent
    on every route that declares bearer auth. timeout bounds each socket wait;
    the default is the client-side SSE idle threshold, four keepalive
    intervals, so a live stream never times out and a dead one does."""

    def __init__(self, base_url: str, token: Optional[str] = None, timeout: Optional[float] = None, headers: Optional[Dict[str, str]] = None):
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout if timeout is not None else float(LIMITS["sse_idle_timeout_secs"])
        self.headers = dict(headers or {})
        self.last_headers: Dict[str, str] = {}
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    @property
    def last_version(self) -> Optional[str]:
        """The daemon version header of the last response."""
        return self.last_headers.get(VERSION_HEADER)

    def _send(self, method: str, path: str, query: List[Tuple[str, str]], data: Any, content_type: str, *, bearer: bool, stream: bool, operation: str, accept: str = "") -> Any:
        url = self.base_url + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        req = urllib.request.Request(url, data=data, method=method)
        for k, v in self.headers.items():
            req.add_header(k, v)
        if data is not None and content_type:
            req.add_header("Content-Type", content_type)
        if accept:
            req.add_header("Accept", accept)
        if bearer and self.token is not None:
            req.add_header("Authorization", "Bearer " + self.token)
        try:
            resp = self._opener.open(req, timeout=self.timeout)
        except urllib.error.HTTPError as e:
            resp = e
        except (urllib.error.URLError, socket.timeout, ConnectionError) as e:
            raise ConnectionError(f"{operation}: {method} {url}: {e}") from e
        self.last_headers = {VERSION_HEADER: resp.headers.get(VERSION_HEADER)} if resp.headers.get(VERSION_HEADER) is not None else {}
        return resp
