"""A stream op's sink (api/engine.yaml, stream and follow): the engine writes
the events into a FIFO this process made, as agentd's binary frames, and
this module turns them back into the engine's event dicts, with the exact
bytes beside the text. The bytes then never cross the engine pipe as
JSON-escaped text (lossy for binary output, and most of a stream's cost).
"""
import importlib
import json
import os
import select
import shutil
import socket
import tempfile
from typing import Any, Callable, Dict, Iterator, Optional, Tuple

# The frames are read by the generated agentd client's FrameReader (bounded,
# fuzzed), reached at run time: that package is not written to mypy
# --strict, and a static import would put it under this package's check.
_client: Any = importlib.import_module("microvms_agentd.client")
_models: Any = importlib.import_module("microvms_agentd.models")
FRAME_STDOUT: int = _models.FRAME_STDOUT
FRAME_STDERR: int = _models.FRAME_STDERR
FRAME_GAP: int = _models.FRAME_GAP
FRAME_EXIT: int = _models.FRAME_EXIT

# How often the wait for the engine to open the sink looks for an envelope
# that came instead (a request refused before anything was written).
_POLL_SECONDS = 0.05


def supported() -> bool:
    return hasattr(os, "mkfifo") and hasattr(select, "poll")


# fcntl's F_SETPIPE_SZ (Linux): a 1 MiB FIFO buffer lets the engine write a
# whole frame before this process must wake to read it.
_F_SETPIPE_SZ = 1031
_PIPE_BYTES = 1 << 20


def open_sink() -> Tuple[str, str, int]:
    """A fresh FIFO in a private directory, opened for reading without
    blocking (so the engine's open for writing finds a reader): (dir, path, fd)."""
    d = tempfile.mkdtemp(prefix="microvm-sink-")
    path = os.path.join(d, "frames")
    try:
        os.mkfifo(path, 0o600)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except BaseException:
        shutil.rmtree(d, ignore_errors=True)
        raise
    try:
        import fcntl
        fcntl.fcntl(fd, _F_SETPIPE_SZ, _PIPE_BYTES)
    except (ImportError, OSError):
        pass  # not Linux, or over pipe-max-size: the default buffer works
    return d, path, fd


def close_sink(d: str, fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass
    shutil.rmtree(d, ignore_errors=True)


def wait_for_writer(fd: int, answered: Callable[[], bool]) -> bool:
    """Wait until the engine has opened the sink (data, or its close, is
    readable) or answered without opening it; True for the first. A FIFO no
    writer has opened yet reports neither, so this waits without spinning."""
    p = select.poll()
    p.register(fd, select.POLLIN | select.POLLHUP)
    while True:
        if p.poll(int(_POLL_SECONDS * 1000)):
            return True
        if answered():
            # The engine closes the sink before it answers: one more look
            # tells a sink opened (and perhaps already closed) in between
            # from one never opened.
            return bool(p.poll(0))


def frames(fd: int) -> Iterator[Dict[str, Any]]:
    """The event dicts of the frames in fd, once a writer has opened it,
    until it closes. The fd is read blocking from here: the writer's close
    is the end of file."""
    os.set_blocking(fd, True)
    src = os.fdopen(os.dup(fd), "rb", buffering=1 << 20)
    try:
        reader = _client.FrameReader(src)
        while True:
            f = reader.next()
            if f is None:
                return
            yield event_of(f)
    finally:
        src.close()


def event_of(f: Any) -> Dict[str, Any]:
    """One frame as the engine's event line would carry it, plus the exact
    bytes of an output frame under "data"."""
    if f.type == FRAME_STDOUT or f.type == FRAME_STDERR:
        data = f.payload
        try:
            text, lossy = data.decode("utf-8"), False
        except UnicodeDecodeError:
            text, lossy = data.decode("utf-8", "replace"), True
        return {"event": "output", "stream": "stdout" if f.type == FRAME_STDOUT else "stderr", "offset": f.offset,
                "bytes": len(data), "text": text, "lossy": lossy, "data": data}
    doc = json.loads(f.payload)
    if f.type == FRAME_GAP:
        return {"event": "gap", "from": doc["from"], "to": doc["to"]}
    if f.type == FRAME_EXIT:
        return {"event": "exit", "exitCode": doc.get("exit_code"), "signal": doc.get("signal"),
                "truncated": bool(doc.get("truncated")), "writersMayBeAlive": bool(doc.get("writers_may_be_alive")),
                "offset": doc.get("offset", f.offset)}
    raise ValueError("a sink frame of type %d" % f.type)



def read_all(fd: int, size_hint: Optional[int]) -> bytes:
    """Every byte a writer sends into fd until it closes, read straight into
    one bytes object when the size is known (no second copy)."""
    os.set_blocking(fd, True)
    with os.fdopen(os.dup(fd), "rb", buffering=1 << 20) as src:
        if size_hint is None:
            return src.read()
        data = src.read(size_hint)
        more = src.read()  # the file grew since its size was read
        return data + more if more else data


def sockets_supported() -> bool:
    return hasattr(socket, "AF_UNIX")


def open_socket() -> Tuple[str, str, socket.socket]:
    """A fresh Unix socket listening in a private directory, for a write's
    socket localPath (api/engine.yaml write): (dir, path, server)."""
    d = tempfile.mkdtemp(prefix="microvm-sink-")
    path = os.path.join(d, "s")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        srv.bind(path)
        srv.listen(1)
        srv.settimeout(_POLL_SECONDS)
    except BaseException:
        srv.close()
        shutil.rmtree(d, ignore_errors=True)
        raise
    return d, path, srv


def close_socket(d: str, srv: socket.socket) -> None:
    srv.close()
    shutil.rmtree(d, ignore_errors=True)


def send_through(srv: socket.socket, data: bytes, answered: Callable[[], bool], timeout: Optional[float]) -> None:
    """Send data to the engine once it dials srv, then end it; return at
    once when the engine answered without dialling (a refusal). A send the
    engine cut short (it failed midway and closed its end) is left to its
    answer, which says why; one that takes longer than timeout raises
    socket.timeout."""
    while True:
        try:
            conn, _ = srv.accept()
            break
        except socket.timeout:
            if answered():
                return
    with conn:
        conn.settimeout(timeout)
        try:
            conn.sendall(data)
            conn.shutdown(socket.SHUT_WR)
        except socket.timeout:
            raise
        except OSError:
            pass

