"""The `microvm engine` child process and its line protocol (api/engine.yaml).

One engine per Sandbox: requests go out as JSON lines on its stdin, a reader
thread routes reply frames to the request they answer, so a stream and a
file write can be in flight together. Closing stdin ends the engine, which
tears down what it launched; so does this process dying, because the pipe
closes with it.
"""
import json
import os
import shutil
import subprocess
import threading
import queue
from typing import Any, Dict, Iterator, Mapping, Optional, Union

from .packaged import bundled_binary
from ._contract import Ops, StreamEvent
from .errors import MicrovmError, PreconditionError, UnexpectedError, from_envelope

BINARY_ENV = "MICROVM_BIN"

_EOF = object()


def find_binary(explicit: Optional[str] = None) -> str:
    """The microvm binary: `explicit`, then $MICROVM_BIN, then the wheel's own, then PATH."""
    for candidate, origin in ((explicit, "the binary option"), (os.environ.get(BINARY_ENV), "$" + BINARY_ENV)):
        if candidate:
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                return candidate
            raise PreconditionError("%s names %s, which is not an executable file" % (origin, candidate), "ERR_PRECONDITION")
    found = bundled_binary() or shutil.which("microvm")
    if found:
        return found
    raise PreconditionError(
        "the microvm binary was not found: pass binary=, set $%s, or put microvm on PATH "
        "(`make build` in the repository writes bin/microvm)" % BINARY_ENV,
        "ERR_PRECONDITION",
    )


class Engine(Ops):
    """A running `microvm engine`; safe to use from several threads."""

    def __init__(self, binary: Optional[str] = None) -> None:
        path = find_binary(binary)
        self._proc = subprocess.Popen(
            [path, "engine"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None,
            # Buffered both ways: an unbuffered pipe is read one byte per
            # system call by readline, which made a 32 MiB file read take
            # ~50 s of CPU in this process; buffered it is a few large reads.
            bufsize=1 << 20,
        )
        self._lock = threading.Lock()
        self._next_id = 0
        self._pending: Dict[int, "queue.Queue[Any]"] = {}
        self._closed = False
        self._reader = threading.Thread(target=self._read, name="microvm-engine-reader", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self._proc.pid

    def _read(self) -> None:
        out = self._proc.stdout
        assert out is not None
        for raw in out:
            try:
                frame = json.loads(raw)
            except ValueError:
                continue
            with self._lock:
                q = self._pending.get(frame.get("id"))
            if q is not None:
                q.put(frame)
        with self._lock:
            waiting = list(self._pending.values())
            self._closed = True
        for q in waiting:
            q.put(_EOF)

    def _send(self, op: str, args: Mapping[str, Any]) -> "tuple[int, queue.Queue[Any]]":
        q: "queue.Queue[Any]" = queue.Queue()
        with self._lock:
            if self._closed:
                raise UnexpectedError("the microvm engine has exited", "ERR_UNEXPECTED")
            self._next_id += 1
            rid = self._next_id
            self._pending[rid] = q
            line = json.dumps({"id": rid, "op": op, "args": dict(args)}, separators=(",", ":")) + "\n"
            stdin = self._proc.stdin
            assert stdin is not None
            try:
                stdin.write(line.encode())
                stdin.flush()
            except (BrokenPipeError, ValueError):
                del self._pending[rid]
                raise UnexpectedError("the microvm engine has exited", "ERR_UNEXPECTED") from None
        return rid, q

    def _finish(self, rid: int, frame: Any) -> Dict[str, Any]:
        with self._lock:
            self._pending.pop(rid, None)
        if frame is _EOF:
            raise UnexpectedError(
                "the microvm engine exited before answering (exit status %s); its stderr says why" % self._proc.poll(),
                "ERR_UNEXPECTED",
            )
        env = frame["envelope"]
        if env.get("status") != "ok":
            raise from_envelope(env)
        data: Dict[str, Any] = env["data"]
        return data

    def _call(self, op: str, args: Mapping[str, Any]) -> Dict[str, Any]:
        rid, q = self._send(op, args)
        while True:
            frame = q.get()
            if frame is _EOF or "envelope" in frame:
                return self._finish(rid, frame)

    def _stream(self, op: str, args: Mapping[str, Any]) -> Iterator[Union[StreamEvent, Dict[str, Any]]]:
        rid, q = self._send(op, args)
        while True:
            frame = q.get()
            if frame is _EOF or "envelope" in frame:
                yield self._finish(rid, frame)
                return
            yield frame["event"]

    def close(self, timeout: float = 120.0) -> None:
        """End the engine: it tears down what it launched and stops its emulator."""
        stdin = self._proc.stdin
        if stdin is not None and not stdin.closed:
            try:
                stdin.close()
            except BrokenPipeError:
                pass
        try:
            self._proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._reader.join(timeout=5)
        if self._proc.stdout is not None:
            self._proc.stdout.close()


__all__ = ["Engine", "find_binary", "BINARY_ENV", "MicrovmError"]
