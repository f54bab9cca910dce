"""The `microvm engine` child process and its line protocol (api/engine.yaml).

One engine per process (per event loop for asyncio) serves every Sandbox,
each under its own handle: requests go out as JSON lines on its stdin, a
reader routes reply frames to the request they answer, so a stream and a
file write, of one sandbox or several, can be in flight together. Closing a
sandbox releases its handle (the engine tears down what it launched under
it); closing stdin ends the engine, which tears down everything; so does
this process dying, because the pipe closes with it.
"""
import asyncio
import atexit
import json
import os
import shutil
import subprocess
import threading
import queue
import socket
import weakref
from typing import Any, AsyncIterator, Callable, Dict, Iterator, Mapping, Optional, Tuple, Union

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


def _request_line(rid: int, op: str, args: Mapping[str, Any], handle: Optional[str] = None) -> bytes:
    req: Dict[str, Any] = {"id": rid, "op": op, "args": dict(args)}
    if handle is not None:
        req["sandbox"] = handle
    return (json.dumps(req, separators=(",", ":")) + "\n").encode()


def _answered_into(q: "queue.Queue[Any]", early: "list[Any]") -> "Callable[[], bool]":
    """A check, for a wait on a sink, of whether the request's answer came
    already (a refusal before the engine opened the sink); the answer is
    kept in early."""
    def answered() -> bool:
        try:
            early.append(q.get_nowait())
        except queue.Empty:
            return False
        return True
    return answered


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


class _Process:
    """One `microvm engine` child and its reader thread: every Engine on it
    (one per sandbox handle) shares the request ids and the pipe."""

    def __init__(self, path: str) -> None:
        self.binary = path
        self.owner = os.getpid()
        self.proc = subprocess.Popen(
            [path, "engine"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None,
            # Buffered both ways: an unbuffered pipe is read one byte per
            # system call by readline, which made a 32 MiB file read take
            # ~50 s of CPU in this process; buffered it is a few large reads.
            bufsize=1 << 20,
        )
        self.lock = threading.Lock()
        self.next_id = 0
        self.next_handle = 0
        self.live = 0  # handles not yet released
        self.pending: Dict[int, "queue.Queue[Any]"] = {}
        self.closed = False
        self.reader = threading.Thread(target=self._read, name="microvm-engine-reader", daemon=True)
        self.reader.start()

    def usable(self) -> bool:
        """Alive, and this process's own (a fork's child starts its own)."""
        with self.lock:
            closed = self.closed
        return not closed and self.owner == os.getpid() and self.proc.poll() is None

    def dead(self) -> UnexpectedError:
        return _dead(self.binary, self.proc.pid, self.proc.poll())

    def _read(self) -> None:
        out = self.proc.stdout
        assert out is not None
        for raw in out:
            try:
                frame = json.loads(raw)
            except ValueError:
                continue
            with self.lock:
                q = self.pending.get(frame.get("id"))
            if q is not None:
                q.put(frame)
        with self.lock:
            waiting = list(self.pending.values())
            self.closed = True
        for q in waiting:
            q.put(_EOF)

    def send(self, op: str, args: Mapping[str, Any], handle: Optional[str]) -> "Tuple[int, queue.Queue[Any]]":
        q: "queue.Queue[Any]" = queue.Queue()
        with self.lock:
            if self.closed:
                raise self.dead()
            self.next_id += 1
            rid = self.next_id
            self.pending[rid] = q
            stdin = self.proc.stdin
            assert stdin is not None
            try:
                stdin.write(_request_line(rid, op, args, handle))
                stdin.flush()
            except (BrokenPipeError, ValueError):
                del self.pending[rid]
                raise self.dead() from None
        return rid, q

    def forget(self, rid: int) -> None:
        with self.lock:
            self.pending.pop(rid, None)

    def in_flight(self, rid: int) -> bool:
        with self.lock:
            return rid in self.pending and not self.closed

    def close(self, timeout: float = 120.0) -> None:
        """End the engine: it tears down what it launched, under every handle."""
        stdin = self.proc.stdin
        if stdin is not None and not stdin.closed:
            try:
                stdin.close()
            except BrokenPipeError:
                pass
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.reader.join(timeout=5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


# The engines this process shares among its sandboxes, one per binary and
# environment (api/engine.yaml request sandbox): a create then costs a
# request, not a Go process start. The engine reads its settings (region,
# endpoints, bucket) from the environment it started with, so a changed
# os.environ starts another; one left behind ends with its last sandbox.
# Each is closed at exit, which tears down what it launched.
_shared_lock = threading.Lock()
_shared: Dict[Tuple[str, int], _Process] = {}


def _env_key() -> int:
    return hash(frozenset(os.environ.items()))


def _close_shared() -> None:
    with _shared_lock:
        procs = list(_shared.values())
        _shared.clear()
    for p in procs:
        if p.owner == os.getpid():
            p.close()


atexit.register(_close_shared)


class Engine(Ops):
    """A `microvm engine` as one sandbox sees it; safe to use from several
    threads. Engine(binary) starts an engine of its own (closed with it);
    Engine.shared(binary) is a handle on the process's shared engine
    (released with it, the engine living on for the next sandbox)."""

    def __init__(self, binary: Optional[str] = None, *, _process: Optional[_Process] = None,
                 _handle: Optional[str] = None) -> None:
        self._p = _process if _process is not None else _Process(find_binary(binary))
        self._handle = _handle
        self._released = False
        self.binary = self._p.binary

    @classmethod
    def shared(cls, binary: Optional[str] = None) -> "Engine":
        """A new sandbox handle on this process's engine for binary, started
        (or restarted, when it died) on first use."""
        path = find_binary(binary)
        key = (path, _env_key())
        with _shared_lock:
            p = _shared.get(key)
            if p is None or not p.usable():
                if p is not None and p.owner == os.getpid():
                    p.close(5.0)  # dead already: reap it and its pipes
                p = _Process(path)
                _shared[key] = p
            with p.lock:
                p.next_handle += 1
                p.live += 1
                handle = "sb-%d" % p.next_handle
        return cls(_process=p, _handle=handle)

    @property
    def pid(self) -> int:
        return self._p.proc.pid

    @property
    def handle(self) -> Optional[str]:
        """The sandbox handle on a shared engine; None when the engine is this sandbox's own."""
        return self._handle

    def _send(self, op: str, args: Mapping[str, Any]) -> "Tuple[int, queue.Queue[Any]]":
        return self._p.send(op, args, self._handle)

    def _finish(self, rid: int, frame: Any) -> Dict[str, Any]:
        self._p.forget(rid)
        if frame is _EOF:
            raise self._p.dead()
        return _data_of(frame)

    def cancel(self, rid: int) -> None:
        """Ask the engine to end request rid (a watch, a follow, a wait); it answers it as interrupted."""
        if not self._p.in_flight(rid):
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
            self._p.forget(rid)
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
                self._p.forget(rid)

    def _sink_stream(self, op: str, args: Mapping[str, Any]) -> Iterator[Any]:
        """_stream with the events read as binary frames from a FIFO the
        engine writes (the op's sink), each output event carrying its exact
        bytes under "data". Callers use it where _sink.supported()."""
        d, path, fd = _sink.open_sink()
        rid: Optional[int] = None
        done = False
        try:
            rid, q = self._send(op, dict(args, sink=path))
            early: "list[Any]" = []
            answered = _answered_into(q, early)

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
                self._p.forget(rid)

    def _sink_read(self, path: str, size_hint: Optional[int], timeout: Optional[float],
                   extra: Optional[Dict[str, Any]] = None) -> bytes:
        """The file at path through the read op's sink: the engine writes
        its bytes into a FIFO while this process reads them, instead of a
        whole host file written and then read back."""
        d, fifo, fd = _sink.open_sink()
        rid: Optional[int] = None
        done = False
        try:
            rid, q = self._send("read", {"path": path, "sink": fifo, **(extra or {})})
            early: "list[Any]" = []
            answered = _answered_into(q, early)

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
                self._p.forget(rid)

    def _socket_write(self, args: Mapping[str, Any], data: bytes, timeout: Optional[float]) -> None:
        """A whole file from bytes this process holds, through a Unix socket
        the engine dials (api/engine.yaml write: a socket localPath with
        size): the bytes go as the engine's upload takes them, with no host
        file written first. timeout bounds the send and the answer."""
        d, path, srv = _sink.open_socket()
        rid: Optional[int] = None
        done = False
        try:
            rid, q = self._send("write", dict(args, localPath=path, size=len(data)))
            early: "list[Any]" = []
            try:
                _sink.send_through(srv, data, _answered_into(q, early), timeout)
                frame = early[0] if early else q.get(timeout=timeout)
            except (socket.timeout, queue.Empty):
                raise TimeoutError_("write %s did not finish within %gs; the request was cancelled" % (args["path"], timeout or 0),
                                    "ERR_TIMEOUT") from None
            done = True
            self._finish(rid, frame)
        finally:
            _sink.close_socket(d, srv)
            if not done and rid is not None:
                self.cancel(rid)
                self._p.forget(rid)

    def close(self, timeout: float = 120.0, *, raise_timeout: bool = False) -> None:
        """End this sandbox's part: an own engine ends (tearing down what it
        launched and its emulator); a shared one releases the handle, which
        does the same for this sandbox alone. With raise_timeout, a release
        that takes longer than timeout raises TimeoutError once this side's
        bookkeeping is done; the engine goes on with it (a release takes no
        cancel), and an engine it leaves idle is not stopped under it."""
        if self._handle is None:
            self._p.close(timeout)
            return
        if self._released:
            return
        self._released = True
        late = False  # the release outlived timeout, and goes on in the engine
        if self._p.usable():
            try:
                self._op_release({}, timeout)
            except TimeoutError_:
                late = True
            except MicrovmError:
                pass  # a dead engine took what it launched with it
        with _shared_lock:
            with self._p.lock:
                self._p.live -= 1
                idle = self._p.live == 0
            current = _shared.get((self._p.binary, _env_key())) is self._p
            if idle and not current:
                for k in [k for k, v in _shared.items() if v is self._p]:
                    del _shared[k]
        if idle and not current and self._p.owner == os.getpid() and not late:
            self._p.close(timeout)  # an engine of an environment no longer current, now unused
        if late and raise_timeout:
            raise TimeoutError_(
                "the teardown did not finish within %gs; it goes on in the engine, which never abandons a release" % timeout,
                "ERR_TIMEOUT") from None


class _AsyncProcess:
    """One `microvm engine` child driven from one asyncio event loop: one
    reader task routes reply frames to the queues awaiting them, no threads."""

    def __init__(self, binary: str, proc: "asyncio.subprocess.Process") -> None:
        self.binary = binary
        self.proc = proc
        self.next_id = 0
        self.next_handle = 0
        self.live = 0
        self.pending: Dict[int, "asyncio.Queue[Any]"] = {}
        self.closed = False
        self.write_lock = asyncio.Lock()
        self.keeper: Optional[AsyncIterator[None]] = None
        self.reader = asyncio.get_running_loop().create_task(self._read())

    @classmethod
    async def start(cls, binary: str) -> "_AsyncProcess":
        proc = await asyncio.create_subprocess_exec(
            binary, "engine", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, limit=_LINE_LIMIT
        )
        return cls(binary, proc)

    def usable(self) -> bool:
        return not self.closed and self.proc.returncode is None

    def dead(self) -> UnexpectedError:
        return _dead(self.binary, self.proc.pid, self.proc.returncode)

    async def _read(self) -> None:
        out = self.proc.stdout
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
                q = self.pending.get(frame.get("id"))
                if q is not None:
                    q.put_nowait(frame)
        finally:
            self.closed = True
            for q in self.pending.values():
                q.put_nowait(_EOF)

    async def send(self, op: str, args: Mapping[str, Any], handle: Optional[str]) -> "Tuple[int, asyncio.Queue[Any]]":
        if self.closed:
            raise self.dead()
        self.next_id += 1
        rid = self.next_id
        q: "asyncio.Queue[Any]" = asyncio.Queue()
        self.pending[rid] = q
        stdin = self.proc.stdin
        assert stdin is not None
        try:
            async with self.write_lock:
                stdin.write(_request_line(rid, op, args, handle))
                await stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            del self.pending[rid]
            raise self.dead() from None
        return rid, q

    async def close(self, timeout: float = 120.0) -> None:
        """End the engine: it tears down what it launched, under every handle."""
        stdin = self.proc.stdin
        if stdin is not None and not stdin.is_closing():
            stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), timeout)
        except asyncio.TimeoutError:
            self.proc.kill()
            await self.proc.wait()
        try:
            await asyncio.wait_for(self.reader, 5)
        except (asyncio.TimeoutError, asyncio.CancelledError):
            pass


# The engine each event loop shares among its sandboxes, by binary: a
# future, so concurrent creates start one. The loop's end (asyncio.run's
# shutdown of async generators) closes it through _until_loop_ends.
_loop_engines: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Dict[Tuple[str, int], asyncio.Future[_AsyncProcess]]]" = (
    weakref.WeakKeyDictionary()
)


async def _until_loop_ends(p: _AsyncProcess) -> AsyncIterator[None]:
    # An async generator the loop tracks once started: asyncio.run closes
    # it after cancelling the tasks, and its finally ends the engine so
    # nothing it launched outlives the loop.
    try:
        yield None
    finally:
        await p.close()


class AsyncEngine(AsyncOps):
    """A `microvm engine` as one sandbox on one asyncio event loop sees it."""

    def __init__(self, process: _AsyncProcess, handle: Optional[str] = None) -> None:
        self._p = process
        self._handle = handle
        self._released = False
        self.binary = process.binary

    @classmethod
    async def start(cls, binary: Optional[str] = None) -> "AsyncEngine":
        """An engine of its own, ended by close."""
        return cls(await _AsyncProcess.start(find_binary(binary)))

    @classmethod
    async def shared(cls, binary: Optional[str] = None) -> "AsyncEngine":
        """A new sandbox handle on the running loop's engine for binary,
        started (or restarted, when it died) on first use."""
        path = find_binary(binary)
        loop = asyncio.get_running_loop()
        byloop = _loop_engines.setdefault(loop, {})
        key = (path, _env_key())
        fut = byloop.get(key)
        if fut is not None and fut.done() and (fut.cancelled() or fut.exception() is not None or not fut.result().usable()):
            fut = None
        if fut is None:
            fut = loop.create_future()
            byloop[key] = fut
            try:
                p = await _AsyncProcess.start(path)
            except BaseException as e:
                del byloop[key]
                fut.set_exception(e)
                fut.exception()  # retrieved: the waiters, if any, re-raise it
                raise
            keeper = _until_loop_ends(p)
            await keeper.__anext__()
            p.keeper = keeper  # held: the loop tracks it weakly
            fut.set_result(p)
        p = await asyncio.shield(fut)
        p.next_handle += 1
        p.live += 1
        return cls(p, "sb-%d" % p.next_handle)

    @property
    def pid(self) -> int:
        return self._p.proc.pid

    @property
    def handle(self) -> Optional[str]:
        return self._handle

    async def _send(self, op: str, args: Mapping[str, Any]) -> "Tuple[int, asyncio.Queue[Any]]":
        return await self._p.send(op, args, self._handle)

    def _finish(self, rid: int, frame: Any) -> Dict[str, Any]:
        self._p.pending.pop(rid, None)
        if frame is _EOF:
            raise self._p.dead()
        return _data_of(frame)

    async def cancel(self, rid: int) -> None:
        """Ask the engine to end request rid; it answers it as interrupted."""
        if rid not in self._p.pending or self._p.closed:
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
            self._p.pending.pop(rid, None)
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
                self._p.pending.pop(rid, None)

    async def _asink_stream(self, op: str, args: Mapping[str, Any]) -> AsyncIterator[Any]:
        """Engine._sink_stream on asyncio: a thread reads the FIFO's frames
        (at most _SINK_WINDOW ahead of the consumer) while the loop awaits
        them and then the envelope."""
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
                self._p.pending.pop(rid, None)

    async def _asink_read(self, path: str, size_hint: Optional[int], extra: Optional[Dict[str, Any]] = None) -> bytes:
        """Engine._sink_read on asyncio: the FIFO is read in a thread while
        the loop awaits the answer; cancelling the task cancels the read."""
        d, fifo, fd = _sink.open_sink()
        rid: Optional[int] = None
        done = False
        try:
            rid, q = await self._send("read", {"path": path, "sink": fifo, **(extra or {})})
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
                self._p.pending.pop(rid, None)
            _sink.close_sink(d, fd)

    async def _asocket_write(self, args: Mapping[str, Any], data: bytes) -> None:
        """Engine._socket_write on asyncio: the bytes are sent from a thread
        while the loop awaits the answer; cancelling the task cancels the
        write, whose socket the engine then closes, ending the thread's send."""
        d, path, srv = _sink.open_socket()
        rid: Optional[int] = None
        done = False
        try:
            rid, q = await self._send("write", dict(args, localPath=path, size=len(data)))
            envelope = asyncio.ensure_future(q.get())
            await asyncio.get_running_loop().run_in_executor(None, _sink.send_through, srv, data, envelope.done, None)
            frame = await envelope
            done = True
            self._finish(rid, frame)
        finally:
            if not done and rid is not None:
                await asyncio.shield(self.cancel(rid))
                self._p.pending.pop(rid, None)
            _sink.close_socket(d, srv)

    async def close(self, timeout: float = 120.0) -> None:
        """End this sandbox's part: an own engine ends; a shared one releases the handle."""
        if self._handle is None:
            await self._p.close(timeout)
            return
        if self._released:
            return
        self._released = True
        if self._p.usable():
            try:
                await asyncio.wait_for(self._aop_release({}), timeout)
            except (MicrovmError, asyncio.TimeoutError):
                pass
        self._p.live -= 1
        byloop = _loop_engines.get(asyncio.get_running_loop(), {})
        f = byloop.get((self._p.binary, _env_key()))
        current = f is not None and f.done() and not f.cancelled() and f.exception() is None and f.result() is self._p
        if self._p.live == 0 and not current:
            for k in [k for k, v in byloop.items() if v.done() and not v.cancelled() and v.exception() is None and v.result() is self._p]:
                del byloop[k]
            await self._p.close(timeout)  # an engine of an environment no longer current, now unused


__all__ = ["Engine", "AsyncEngine", "find_binary", "BINARY_ENV", "MicrovmError"]
