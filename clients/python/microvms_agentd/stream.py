"""Following an exec's output across broken connections (hand-written).

The contract can say that GET /v1/exec/{id}/stream takes an offset and sends
output, gap and exit events; it cannot say how a reader resumes: that the next
unread byte is an output event's offset plus its decoded length, that a gap
moves the reader to its end, and that a body ending without exit means the
connection broke, not the command. That rule lives here.
"""

from __future__ import annotations

import base64
import http.client
import time
from typing import Iterator, Union

from .client import Client
from .models import SSEExit, SSEGap, SSEOutput, StartRequest

Event = Union[SSEOutput, SSEGap, SSEExit]


class StreamCut(ConnectionError):
    """The stream kept breaking before its exit event. offset is the next
    unread byte: follow(client, exec_id, offset) picks up from there."""

    def __init__(self, exec_id: str, offset: int, cause: BaseException):
        self.exec_id = exec_id
        self.offset = offset
        super().__init__(f"stream of {exec_id} cut at offset {offset}: {cause}")


def next_offset(event: Event, offset: int) -> int:
    """The resume point after event, given the resume point before it."""
    if isinstance(event, SSEOutput):
        return event.data.offset + len(base64.b64decode(event.data.output))
    if isinstance(event, SSEGap):
        return max(offset, event.data.to)
    return offset


def follow(client: Client, exec_id: str, offset: int = 0, *, reconnects: int = 5, backoff: float = 0.2) -> Iterator[Event]:
    """Yields exec_id's events from offset to its exit event, reconnecting
    from the next unread byte when the connection breaks. Each event is
    yielded once. Raises StreamCut after `reconnects` consecutive breaks with
    no event between them, and ApiError (404 unknown_exec, 401, ...) at once."""
    failures = 0
    while True:
        try:
            with client.exec_stream(exec_id, offset=offset) as events:
                for event in events:
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


def offers_run(client: Client) -> bool:
    """Whether the daemon serves POST /v1/exec/run, read once per client from
    its /v1/schema document (a reference daemon lists no such route)."""
    known = getattr(client, "_offers_run", None)
    if known is None:
        try:
            doc = client.schema()
            known = any(r.get("method") == "POST" and r.get("path") == "/v1/exec/run" for r in doc.get("routes", []))
        except (OSError, http.client.HTTPException, ValueError):
            return False  # not remembered: the next run asks again
        setattr(client, "_offers_run", known)
    return bool(known)


def run(client: Client, request: StartRequest, *, reconnects: int = 5, backoff: float = 0.2) -> Iterator[Event]:
    """Starts request and yields its events from offset 0 to the exit event.

    Where the daemon offers the run route this is one exchange, and the daemon
    releases the exec with the exit event: there is nothing to ack. A
    connection that breaks before the exit leaves the exec unacked, and the
    rest is followed through the stream route; the caller then acks as after
    follow. Against any other daemon it is exec_start then follow."""
    if offers_run(client):
        offset = 0
        try:
            with client.exec_run(request) as events:
                for event in events:
                    offset = next_offset(event, offset)
                    yield event
                    if isinstance(event, SSEExit):
                        return
        except (OSError, http.client.HTTPException):
            pass
        yield from follow(client, request.exec_id, offset, reconnects=reconnects, backoff=backoff)
        return
    client.exec_start(request)
    yield from follow(client, request.exec_id, 0, reconnects=reconnects, backoff=backoff)
