"""Following an exec's output across broken connections (hand-written).

The contract can say that GET /v1/exec/{id}/stream takes an offset and sends
output, gap and exit events; it cannot say how a reader resumes: that the next
unread byte is an output event's offset plus its decoded length, that a gap
moves the reader to its end, and that a body ending without exit means the
connection broke, not the command. That rule lives here.

Where the daemon's /v1/schema document lists binary frames (x-frames), the
stream and run routes are asked for them and output arrives as raw bytes; a
daemon that answers Server-Sent Events anyway (or lists no frames, as the
reference) is read as SSE. Either way the events are the same: output events
are SSEOutput whose data is an OutputChunk (raw bytes in .raw, base64 in
.output only when asked for), then SSEGap and SSEExit as the contract types
them. A frame no conforming writer sends raises FrameError and is never
retried; a body cut inside a frame is a broken connection and is resumed.
"""

from __future__ import annotations

import base64
import binascii
import http.client
import json
import time
from typing import Any, Iterator, Optional, Tuple, Union

from .client import Client, EventStream, Frame, FrameError, FrameStream
from .models import (
    FRAME_EXIT, FRAME_GAP, FRAME_STDERR, FRAME_STDOUT, FRAMES_MEDIA_TYPE, ExitEvent, GapEvent, OutputEvent,
    SSEExit, SSEGap, SSEOutput, StartRequest, StreamKind,
)

Event = Union[SSEOutput, SSEGap, SSEExit]


class OutputChunk(OutputEvent):
    """The data of an output event, holding its bytes as they came: raw from
    binary frames, decoded once from an SSE event's base64. output (the
    contract's base64 field) is computed only when read, for code written
    against the SSE shape; raw is what new code reads."""

    def __init__(self, offset: int, stream: str, raw: Optional[bytes] = None, b64: Optional[str] = None):
        self.offset = offset
        self.stream = stream
        self._raw = raw
        self._b64 = b64

    @property
    def output(self) -> str:
        if self._b64 is None:
            self._b64 = base64.b64encode(self.raw).decode("ascii")
        return self._b64

    @output.setter
    def output(self, value: str) -> None:
        self._b64, self._raw = value, None

    @property
    def raw(self) -> bytes:
        if self._raw is None:
            self._raw = base64.b64decode(self._b64 or "", validate=True)
        return self._raw


class StreamCut(ConnectionError):
    """The stream kept breaking before its exit event. offset is the next
    unread byte: follow(client, exec_id, offset) picks up from there."""

    def __init__(self, exec_id: str, offset: int, cause: BaseException):
        self.exec_id = exec_id
        self.offset = offset
        super().__init__(f"stream of {exec_id} cut at offset {offset}: {cause}")


def output_bytes(event: SSEOutput) -> bytes:
    """An output event's bytes, whether it came as a frame or as SSE."""
    data = event.data
    if isinstance(data, OutputChunk):
        return data.raw
    return base64.b64decode(data.output)


def next_offset(event: Event, offset: int) -> int:
    """The resume point after event, given the resume point before it."""
    if isinstance(event, SSEOutput):
        return event.data.offset + len(output_bytes(event))
    if isinstance(event, SSEGap):
        return max(offset, event.data.to)
    return offset


def _frame_event(f: Frame) -> Event:
    if f.type == FRAME_STDOUT or f.type == FRAME_STDERR:
        kind = StreamKind.STDOUT if f.type == FRAME_STDOUT else StreamKind.STDERR
        return SSEOutput(event="output", data=OutputChunk(f.offset, kind, raw=f.payload))
    try:
        doc = json.loads(f.payload)
        if f.type == FRAME_GAP:
            gap = GapEvent.from_dict(doc)
            if not (isinstance(gap.from_, int) and isinstance(gap.to, int)) or gap.to < gap.from_:
                raise ValueError(f"gap [{gap.from_}, {gap.to}) ends before it starts")
            return SSEGap(event="gap", data=gap)
        if f.type == FRAME_EXIT:
            return SSEExit(event="exit", data=ExitEvent.from_dict(doc))
    except ValueError as e:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise FrameError(f"malformed {'gap' if f.type == FRAME_GAP else 'exit'} frame: {e}") from e
    raise FrameError(f"malformed frame: type {f.type} carries no event")  # FrameReader hands out no other


def events(body: Union[EventStream, FrameStream]) -> Iterator[Event]:
    """The events of one answer of the stream or run route, SSE or frames."""
    if isinstance(body, FrameStream):
        for f in body:
            yield _frame_event(f)
        return
    for ev in body:
        if isinstance(ev, SSEOutput):
            try:
                ev = SSEOutput(event=ev.event, data=OutputChunk(ev.data.offset, ev.data.stream, raw=base64.b64decode(ev.data.output, validate=True), b64=ev.data.output))
            except (binascii.Error, TypeError) as e:
                raise ValueError(f"malformed output event: {e}") from e
        yield ev


def _offers(client: Client) -> Optional[Tuple[bool, bool]]:
    """(run route, binary frames) as the daemon's /v1/schema lists them, read
    once per client; None when the document could not be read (not
    remembered: the next call asks again)."""
    known: Optional[Tuple[bool, bool]] = getattr(client, "_offers", None)
    if known is None:
        try:
            doc: Any = client.schema()
            routes = doc.get("routes", [])
            run = any(r.get("method") == "POST" and r.get("path") == "/v1/exec/run" for r in routes)
            frames = (doc.get("frames") or {}).get("media_type") == FRAMES_MEDIA_TYPE
        except (OSError, http.client.HTTPException, ValueError, AttributeError):
            return None
        known = (run, frames)
        setattr(client, "_offers", known)
    return known


def offers_run(client: Client) -> bool:
    """Whether the daemon serves POST /v1/exec/run, read once per client from
    its /v1/schema document (a reference daemon lists no such route)."""
    o = _offers(client)
    return o is not None and o[0]


def offers_frames(client: Client) -> bool:
    """Whether the daemon's /v1/schema document lists binary frames (x-frames)
    for the stream and run routes (a reference daemon's does not)."""
    o = _offers(client)
    return o is not None and o[1]


def _want_frames(client: Client, frames: Optional[bool]) -> bool:
    return offers_frames(client) if frames is None else frames


def _open_stream(client: Client, exec_id: str, offset: int, frames: Optional[bool]) -> Union[EventStream, FrameStream]:
    if _want_frames(client, frames):
        return client.exec_stream_frames(exec_id, offset=offset)
    return client.exec_stream(exec_id, offset=offset)


def follow(client: Client, exec_id: str, offset: int = 0, *, reconnects: int = 5, backoff: float = 0.2, frames: Optional[bool] = None) -> Iterator[Event]:
    """Yields exec_id's events from offset to its exit event, reconnecting
    from the next unread byte when the connection breaks. Each event is
    yielded once. Raises StreamCut after `reconnects` consecutive breaks with
    no event between them, ApiError (404 unknown_exec, 401, ...) at once, and
    FrameError at once for a frame no conforming writer sends. frames=None
    asks for binary frames where the daemon's /v1/schema lists them; False
    never asks (SSE), True always asks (a daemon may still answer SSE)."""
    failures = 0
    while True:
        try:
            with _open_stream(client, exec_id, offset, frames) as body:
                for event in events(body):
                    failures = 0
                    offset = next_offset(event, offset)
                    yield event
                    if isinstance(event, SSEExit):
                        return
            cause: BaseException = ConnectionError("the body ended without an exit event")
        except (OSError, http.client.HTTPException) as e:
            cause = e
        failures += 1
        if failures > reconnects:
            raise StreamCut(exec_id, offset, cause)
        time.sleep(backoff * failures)


def run(client: Client, request: StartRequest, *, reconnects: int = 5, backoff: float = 0.2, frames: Optional[bool] = None) -> Iterator[Event]:
    """Starts request and yields its events from offset 0 to the exit event.

    Where the daemon offers the run route this is one exchange, and the daemon
    releases the exec with the exit event: there is nothing to ack. Where it
    lists binary frames too, output comes as raw bytes, not base64. A
    connection that breaks before the exit leaves the exec unacked, and the
    rest is followed through the stream route; the caller then acks as after
    follow. Against any other daemon it is exec_start then follow. frames is
    as for follow."""
    if offers_run(client):
        offset = 0
        try:
            body = client.exec_run_frames(request) if _want_frames(client, frames) else client.exec_run(request)
            with body:
                for event in events(body):
                    offset = next_offset(event, offset)
                    yield event
                    if isinstance(event, SSEExit):
                        return
        except (OSError, http.client.HTTPException):
            pass
        yield from follow(client, request.exec_id, offset, reconnects=reconnects, backoff=backoff, frames=frames)
        return
    client.exec_start(request)
    yield from follow(client, request.exec_id, 0, reconnects=reconnects, backoff=backoff, frames=frames)
