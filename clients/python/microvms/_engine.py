"""The `microvm engine` child process and its line protocol (api/engine.yaml).

One engine per Sandbox: requests go out as JSON lines on its stdin, a reader
thread routes reply frames to the request they answer, so a stream and a
file write can be in flight together. Closing stdin ends the engine, which
tears down what it launched; so does this process dying, because the pipe
closes with it.
"""
import asyncio
import json
import os
import shutil
import subprocess
import threading
import queue
from typing import Any, AsyncIterator, Dict, Iterator, Mapping, Optional, Tuple, Union

from . import _sink
from .packaged import bundled_binary
from ._contract import AsyncOps, Ops, StreamEvent
from .errors import MicrovmError, PreconditionError, UnexpectedError, from_envelope
from .errors import TimeoutError as TimeoutError_

BINARY_ENV = "MICROVM_BIN"

_EOF = object()

# How many frames a sink's reader thread runs ahead of an asyncio consumer.
_SINK_WINDOW = 64


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


# The largest request or reply line the engine takes or sends is a whole
# file's base64 (api/engine.yaml maxEngineLine); asyncio's reader needs it.
_LINE_LIMIT = 4 * (64 << 20) // 3 + (1 << 20) + 64


def _request_line(rid: int, op: str, args: Mapping[str, Any]) -> bytes:
    return (json.dumps({"id": rid, "op": op, "args": dict(args)}, separators=(",", ":")) + "\n").encode()


def _dead(binary: str, pid: int, status: Optional[int]) -> UnexpectedError:
    return UnexpectedError(
        "the microvm engine (%s, pid %d) exited before answering (exit status %s); its stderr says why"
        % (binary, pid, status),
        "ERR_UNEXPECTED",
    )


def _data_of(frame: Any) -> Dict[str, Any]:
    env = frame["envelope"]
    if env.get("status") != "ok":
        raise from_envelope(env)
    data: Dict[str, Any] = env["data"]
    return data


class Engine(Ops):
    """A running `microvm engine`; safe to use from several threads."""

    def __init__(self, binary: Optional[str] = None) -> None:
        path = find_binary(binary)
        self.binary = path
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

    def _send(self, op: str, args: Mapping[str, Any]) -> "Tuple[int, queue.Queue[Any]]":
        q: "queue.Queue[Any]" = queue.Queue()
        with self._lock:
            if self._closed:
                raise _dead(self.binary, self._proc.pid, self._proc.poll())
            self._next_id += 1
            rid = self._next_id
            self._pending[rid] = q
            stdin = self._proc.stdin
            assert stdin is not None
            try:
                stdin.write(_request_line(rid, op, args))
                stdin.flush()
            except (BrokenPipeError, ValueError):
                del self._pending[rid]
                raise _dead(self.binary, self._proc.pid, self._proc.poll()) from None
        return rid, q

    def _finish(self, rid: int, frame: Any) -> Dict[str, Any]:
        with self._lock:
            self._pending.pop(rid, None)
        if frame is _EOF:
            raise _dead(self.binary, self._proc.pid, self._proc.poll())
        return _data_of(frame)

    def cancel(self, rid: int) -> None:
        """Ask the engine to end request rid (a watch, a follow, a wait); it answers it as interrupted."""
        with self._lock:
            if rid not in self._pending or self._closed:
                return
        try:
            # Bounded: a hung engine must not hang the caller's timeout.
            self._op_cancel({"requestId": rid}, 10.0)
        except MicrovmError:
            pass

    def _call(self, op: str, args: Mapping[str, Any], timeout: Optional[float] = None) -> Dict[str, Any]:
        rid, q = self._send(op, args)
        try:
            while True:
                try:
                    frame = q.get(timeout=timeout)
                except queue.Empty:
                    raise TimeoutError_(
                        "the engine did not answer %s within %gs; the request was cancelled" % (op, timeout or 0),
                        "ERR_TIMEOUT",
                    ) from None
                if frame is _EOF or "envelope" in frame:
                    return self._finish(rid, frame)
        except TimeoutError_:
            if op != "cancel":
                self.cancel(rid)
            with self._lock:
                self._pending.pop(rid, None)
            raise

    def _stream(self, op: str, args: Mapping[str, Any]) -> Iterator[Union[StreamEvent, Dict[str, Any]]]:
        rid, q = self._send(op, args)
        done = False
        try:
            while True:
                frame = q.get()
                if frame is _EOF or "envelope" in frame:
                    done = True
                    yield self._finish(rid, frame)
                    return
                yield frame["event"]
        finally:
            if not done:
                # The caller stopped iterating (break, close, an exception):
                # end the request so the engine stops sending for it.
                self.cancel(rid)
                with self._lock:
                    self._pending.pop(rid, None)

    def _sink_stream(self, op: str, args: Mapping[str, Any]) -> Iterator[Any]:
        """_stream with the events read as binary frames from a FIFO the
        engine writes (the op's sink), each output event carrying its exact
        bytes under "data"; _stream where there are no FIFOs."""
        if not _sink.supported():
            yield from self._stream(op, args)
            return
        d, path, fd = _sink.open_sink()
        rid: Optional[int] = None
        done = False
        try:
            rid, q = self._send(op, dict(args, sink=path))
            early: "list[Any]" = []

            def answered() -> bool:
                # The envelope came without the sink being opened: a refusal.
                try:
                    early.append(q.get_nowait())
                except queue.Empty:
                    return False
                return True

            if _sink.wait_for_writer(fd, answered):
                yield from _sink.frames(fd)
            frame = early[0] if early else q.get()
            while frame is not _EOF and "envelope" not in frame:
                frame = q.get()  # no event frames come with a sink; skip any
            done = True
            yield self._finish(rid, frame)
        finally:
            # Closing the read end first: an engine still writing gets EPIPE
            # and ends the request, even before the cancel arrives.
            _sink.close_sink(d, fd)
            if not done and rid is not None:
                self.cancel(rid)
                with self._lock:
                    self._pending.pop(rid, None)

    def _sink_read(self, path: str, size_hint: Optional[int], timeout: Optional[float]) -> bytes:
        """The file at path through the read op's sink: the engine writes
        its bytes into a FIFO while this process reads them, instead of a
        whole host file written and then read back."""
        d, fifo, fd = _sink.open_sink()
        rid: Optional[int] = None
        done = False
        try:
            rid, q = self._send("read", {"path": path, "sink": fifo})
            early: "list[Any]" = []

            def answered() -> bool:
                try:
                    early.append(q.get_nowait())
                except queue.Empty:
                    return False
                return True

            # timeout bounds the whole read: past it the request is
            # cancelled, which ends the engine's copy and so this read.
            expired = threading.Event()
            timer: Optional[threading.Timer] = None
            if timeout is not None:
                sent_rid = rid

                def expire() -> None:
                    expired.set()
                    self.cancel(sent_rid)

                timer = threading.Timer(timeout, expire)
                timer.daemon = True
                timer.start()
            try:
                data = _sink.read_all(fd, size_hint) if _sink.wait_for_writer(fd, answered) else b""
                frame = early[0] if early else q.get()
            finally:
                if timer is not None:
                    timer.cancel()
            if expired.is_set():
                done = True  # the cancel was sent; its answer is nobody's
                raise TimeoutError_("read %s did not finish within %gs; the request was cancelled" % (path, timeout or 0), "ERR_TIMEOUT")
            done = True
            sent = self._finish(rid, frame)["bytes"]
            if sent != len(data):
                raise UnexpectedError("read %s: the engine sent %d bytes and %d arrived" % (path, sent, len(data)), "ERR_UNEXPECTED")
            return data
        finally:
            _sink.close_sink(d, fd)
            if not done and rid is not None:
                self.cancel(rid)
                with self._lock:
                    self._pending.pop(rid, None)

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


class AsyncEngine(AsyncOps):
    """A running `microvm engine` driven from one asyncio event loop: one
    reader task routes reply frames to the futures and queues awaiting them,
    no threads."""

    def __init__(self, binary: str, proc: "asyncio.subprocess.Process") -> None:
        self.binary = binary
        self._proc = proc
        self._next_id = 0
        self._pending: Dict[int, "asyncio.Queue[Any]"] = {}
        self._closed = False
        self._write_lock = asyncio.Lock()
        self._reader = asyncio.get_running_loop().create_task(self._read())

    @classmethod
    async def start(cls, binary: Optional[str] = None) -> "AsyncEngine":
        path = find_binary(binary)
        proc = await asyncio.create_subprocess_exec(
            path, "engine", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, limit=_LINE_LIMIT
        )
        return cls(path, proc)

    @property
    def pid(self) -> int:
        return self._proc.pid

    async def _read(self) -> None:
        out = self._proc.stdout
        assert out is not None
        try:
            while True:
                raw = await out.readline()
                if not raw:
                    break
                try:
                    frame = json.loads(raw)
                except ValueError:
                    continue
                q = self._pending.get(frame.get("id"))
                if q is not None:
                    q.put_nowait(frame)
        finally:
            self._closed = True
            for q in self._pending.values():
                q.put_nowait(_EOF)

    async def _send(self, op: str, args: Mapping[str, Any]) -> "Tuple[int, asyncio.Queue[Any]]":
        if self._closed:
            raise _dead(self.binary, self._proc.pid, self._proc.returncode)
        self._next_id += 1
        rid = self._next_id
        q: "asyncio.Queue[Any]" = asyncio.Queue()
        self._pending[rid] = q
        stdin = self._proc.stdin
        assert stdin is not None
        try:
            async with self._write_lock:
                stdin.write(_request_line(rid, op, args))
                await stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            del self._pending[rid]
            raise _dead(self.binary, self._proc.pid, self._proc.returncode) from None
        return rid, q

    def _finish(self, rid: int, frame: Any) -> Dict[str, Any]:
        self._pending.pop(rid, None)
        if frame is _EOF:
            raise _dead(self.binary, self._proc.pid, self._proc.returncode)
        return _data_of(frame)

    async def cancel(self, rid: int) -> None:
        """Ask the engine to end request rid; it answers it as interrupted."""
        if rid not in self._pending or self._closed:
            return
        try:
            await self._aop_cancel({"requestId": rid})
        except MicrovmError:
            pass

    async def _acall(self, op: str, args: Mapping[str, Any]) -> Dict[str, Any]:
        rid, q = await self._send(op, args)
        try:
            while True:
                frame = await q.get()
                if frame is _EOF or "envelope" in frame:
                    return self._finish(rid, frame)
        except asyncio.CancelledError:
            # Shielded: the cancel must reach the engine though this task is
            # being cancelled.
            await asyncio.shield(self.cancel(rid))
            self._pending.pop(rid, None)
            raise

    async def _astream(self, op: str, args: Mapping[str, Any]) -> AsyncIterator[Union[StreamEvent, Dict[str, Any]]]:
        rid, q = await self._send(op, args)
        done = False
        try:
            while True:
                frame = await q.get()
                if frame is _EOF or "envelope" in frame:
                    done = True
                    yield self._finish(rid, frame)
                    return
                yield frame["event"]
        finally:
            if not done:
                await asyncio.shield(self.cancel(rid))
                self._pending.pop(rid, None)

    async def _asink_stream(self, op: str, args: Mapping[str, Any]) -> AsyncIterator[Any]:
        """Engine._sink_stream on asyncio: a thread reads the FIFO's frames
        (at most _SINK_WINDOW ahead of the consumer) while the loop awaits
        them and then the envelope."""
        if not _sink.supported():
            async for x in self._astream(op, args):
                yield x
            return
        d, path, fd = _sink.open_sink()
        loop = asyncio.get_running_loop()
        events: "asyncio.Queue[Any]" = asyncio.Queue()
        window = threading.Semaphore(_SINK_WINDOW)
        stop = threading.Event()
        rid: Optional[int] = None
        done = False
        try:
            rid, q = await self._send(op, dict(args, sink=path))
            envelope = asyncio.ensure_future(q.get())

            def pump() -> None:
                try:
                    if _sink.wait_for_writer(fd, lambda: envelope.done() or stop.is_set()):
                        for ev in _sink.frames(fd):
                            while not window.acquire(timeout=0.1):
                                if stop.is_set():
                                    return
                            loop.call_soon_threadsafe(events.put_nowait, ev)
                    loop.call_soon_threadsafe(events.put_nowait, _EOF)
                except BaseException as e:  # handed to the consumer, never lost in this thread
                    if not stop.is_set():
                        loop.call_soon_threadsafe(events.put_nowait, e)

            threading.Thread(target=pump, name="microvm-sink", daemon=True).start()
            while True:
                item = await events.get()
                if item is _EOF:
                    break
                window.release()
                if isinstance(item, BaseException):
                    raise item
                yield item
            frame = await envelope
            while frame is not _EOF and "envelope" not in frame:
                frame = await q.get()
            done = True
            yield self._finish(rid, frame)
        finally:
            stop.set()
            _sink.close_sink(d, fd)
            if not done and rid is not None:
                await asyncio.shield(self.cancel(rid))
                self._pending.pop(rid, None)

    async def _asink_read(self, path: str, size_hint: Optional[int]) -> bytes:
        """Engine._sink_read on asyncio: the FIFO is read in a thread while
        the loop awaits the answer; cancelling the task cancels the read."""
        d, fifo, fd = _sink.open_sink()
        rid: Optional[int] = None
        done = False
        try:
            rid, q = await self._send("read", {"path": path, "sink": fifo})
            envelope = asyncio.ensure_future(q.get())

            def pull() -> bytes:
                if _sink.wait_for_writer(fd, envelope.done):
                    return _sink.read_all(fd, size_hint)
                return b""

            data = await asyncio.get_running_loop().run_in_executor(None, pull)
            frame = await envelope
            done = True
            sent = self._finish(rid, frame)["bytes"]
            if sent != len(data):
                raise UnexpectedError("read %s: the engine sent %d bytes and %d arrived" % (path, sent, len(data)), "ERR_UNEXPECTED")
            return data
        finally:
            if not done and rid is not None:
                # Ends the engine's copy, and with it the thread's read.
                await asyncio.shield(self.cancel(rid))
                self._pending.pop(rid, None)
            _sink.close_sink(d, fd)

    async def close(self, timeout: float = 120.0) -> None:
        """End the engine: it tears down what it launched and stops its emulator."""
        stdin = self._proc.stdin
        if stdin is not None and not stdin.is_closing():
            stdin.close()
        try:
            await asyncio.wait_for(self._proc.wait(), timeout)
        except asyncio.TimeoutError:
            self._proc.kill()
            await self._proc.wait()
        try:
            await asyncio.wait_for(self._reader, 5)
        except (asyncio.TimeoutError, asyncio.CancelledError):
            pass


__all__ = ["Engine", "AsyncEngine", "find_binary", "BINARY_ENV", "MicrovmError"]
