"""Python's runtime floor in `make bench-clients`: the least Python code
moving the rows' $MICROVMS_BENCH_MIB MiB (256 unset) between itself and
another process (floorpeer, a Go process as the engine is; argv[1]) through
each channel Python has, with no engine and no package code, and 200
JSON-line round trips for the run row. Prints {"row@channel": seconds} per
measurement; clients.py keeps each row's fastest channel. The clock runs
from the peer's go (it is started and ready before) until the bytes are all
in this process (read, stream) or all taken by the peer (write)."""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Tuple

PEER = sys.argv[1]
MIB = int(os.environ.get("MICROVMS_BENCH_MIB", "256"))
SIZE = MIB << 20
DATA = b"0123456789abcdef" * (SIZE // 16)
DIR = tempfile.mkdtemp(prefix="microvms-floor-py-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
CHUNK = 1 << 20  # a stream's chunk: fresh bytes each, as a stream hands them out


def peer(*args: str) -> subprocess.Popen:  # type: ignore[type-arg]
    p = subprocess.Popen([PEER, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE if args[1:2] == ("pipe",) and args[0] == "send" else None,
                         stderr=subprocess.PIPE, bufsize=0)
    line = p.stderr.readline().strip()  # type: ignore[union-attr]
    if line != b"ready":
        raise RuntimeError("floorpeer: %r" % line)
    return p


def go(p: subprocess.Popen) -> None:  # type: ignore[type-arg]
    p.stdin.write(b"g")  # type: ignore[union-attr]


def got(p: subprocess.Popen) -> None:  # type: ignore[type-arg]
    line = p.stderr.readline().strip()  # type: ignore[union-attr]
    if line != b"got %d" % SIZE:
        raise RuntimeError("floorpeer: %r" % line)


def finish(p: subprocess.Popen) -> None:  # type: ignore[type-arg]
    for f in (p.stdin, p.stdout, p.stderr):
        if f is not None:
            f.close()
    p.wait()


def readinto_all(read_into: Callable[[memoryview], int]) -> bytearray:
    buf = bytearray(SIZE)
    view = memoryview(buf)
    n = 0
    while n < SIZE:
        m = read_into(view[n:])
        if not m:
            break
        n += m
    if n != SIZE:
        raise RuntimeError("%d bytes, expected %d" % (n, SIZE))
    return buf


def read_fifo() -> float:
    path = os.path.join(DIR, "r.fifo")
    p = peer("send", "fifo", path, str(SIZE))
    fd = os.open(path, os.O_RDONLY)
    t = time.perf_counter()
    go(p)
    readinto_all(lambda v: os.readv(fd, [v]))
    took = time.perf_counter() - t
    os.close(fd)
    os.remove(path)
    finish(p)
    return took


def read_pipe() -> float:
    p = peer("send", "pipe", "-", str(SIZE))
    fd = p.stdout.fileno()  # type: ignore[union-attr]
    t = time.perf_counter()
    go(p)
    readinto_all(lambda v: os.readv(fd, [v]))
    took = time.perf_counter() - t
    finish(p)
    return took


def read_unix() -> float:
    path = os.path.join(DIR, "r.sock")
    p = peer("send", "unix", path, str(SIZE))
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    t = time.perf_counter()
    go(p)
    readinto_all(s.recv_into)
    took = time.perf_counter() - t
    s.close()
    finish(p)
    return took


def read_file() -> float:
    path = os.path.join(DIR, "r.file")
    p = peer("send", "file", path, str(SIZE))
    t = time.perf_counter()
    go(p)
    p.stderr.readline()  # type: ignore[union-attr]
    with open(path, "rb", buffering=0) as f:
        b = f.read()
    took = time.perf_counter() - t
    if len(b) != SIZE:
        raise RuntimeError("%d bytes, expected %d" % (len(b), SIZE))
    os.remove(path)
    finish(p)
    return took


def chunks(read: Callable[[int], bytes]) -> int:
    n = 0
    while True:
        b = read(CHUNK)
        if not b:
            return n
        n += len(b)


def stream_fifo() -> float:
    path = os.path.join(DIR, "s.fifo")
    p = peer("send", "fifo", path, str(SIZE))
    fd = os.open(path, os.O_RDONLY)
    t = time.perf_counter()
    go(p)
    n = chunks(lambda k: os.read(fd, k))
    took = time.perf_counter() - t
    os.close(fd)
    os.remove(path)
    finish(p)
    assert n == SIZE, n
    return took


def stream_pipe() -> float:
    p = peer("send", "pipe", "-", str(SIZE))
    fd = p.stdout.fileno()  # type: ignore[union-attr]
    t = time.perf_counter()
    go(p)
    n = chunks(lambda k: os.read(fd, k))
    took = time.perf_counter() - t
    finish(p)
    assert n == SIZE, n
    return took


def stream_unix() -> float:
    path = os.path.join(DIR, "s.sock")
    p = peer("send", "unix", path, str(SIZE))
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    t = time.perf_counter()
    go(p)
    n = chunks(s.recv)
    took = time.perf_counter() - t
    s.close()
    finish(p)
    assert n == SIZE, n
    return took


def write_all(fd: int) -> None:
    view = memoryview(DATA)
    n = 0
    while n < SIZE:
        n += os.write(fd, view[n:])


def write_fifo() -> float:
    path = os.path.join(DIR, "w.fifo")
    p = peer("recv", "fifo", path, str(SIZE))
    fd = os.open(path, os.O_WRONLY)
    t = time.perf_counter()
    write_all(fd)
    os.close(fd)
    got(p)
    took = time.perf_counter() - t
    os.remove(path)
    finish(p)
    return took


def write_pipe() -> float:
    p = peer("recv", "pipe", "-", str(SIZE))
    t = time.perf_counter()
    write_all(p.stdin.fileno())  # type: ignore[union-attr]
    p.stdin.close()  # type: ignore[union-attr]
    got(p)
    took = time.perf_counter() - t
    finish(p)
    return took


def write_unix() -> float:
    path = os.path.join(DIR, "w.sock")
    p = peer("recv", "unix", path, str(SIZE))
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    t = time.perf_counter()
    s.sendall(DATA)
    s.shutdown(socket.SHUT_WR)
    got(p)
    took = time.perf_counter() - t
    s.close()
    finish(p)
    return took


def write_file() -> float:
    path = os.path.join(DIR, "w.file")
    p = peer("recv", "file", path, str(SIZE))
    t = time.perf_counter()
    with open(path, "wb", buffering=0) as f:
        f.write(DATA)
    p.stdin.write(b"\n")  # type: ignore[union-attr]
    got(p)
    took = time.perf_counter() - t
    os.remove(path)
    finish(p)
    return took


def runs() -> float:
    p = subprocess.Popen([PEER, "echo"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    out = p.stdout
    t = time.perf_counter()
    for i in range(1, 201):
        p.stdin.write((json.dumps({"id": i, "op": "run", "args": {"command": ["true"], "execId": "floor-%d" % i}}, separators=(",", ":")) + "\n").encode())  # type: ignore[union-attr]
        if json.loads(out.readline())["id"] != i:  # type: ignore[union-attr]
            raise RuntimeError("echo out of order")
    took = time.perf_counter() - t
    finish(p)
    return took


ROWS: List[Tuple[str, Dict[str, Callable[[], float]]]] = [
    ("write-%dMiB" % MIB, {"fifo, os.write": write_fifo, "child stdin pipe, os.write": write_pipe,
                           "unix socket, sendall": write_unix, "tmpfs file, write, the peer reads it": write_file}),
    ("read-%dMiB" % MIB, {"fifo, os.readv into one bytearray": read_fifo, "child stdout pipe, os.readv into one bytearray": read_pipe,
                          "unix socket, recv_into one bytearray": read_unix, "tmpfs file the peer wrote, FileIO.read": read_file}),
    ("stream-%dMiB" % MIB, {"fifo, os.read 1 MiB": stream_fifo, "child stdout pipe, os.read 1 MiB": stream_pipe,
                            "unix socket, recv 1 MiB": stream_unix}),
    ("run-x200", {"child stdin/stdout pipes, JSON lines": runs}),
]


def main() -> None:
    try:
        for row, channels in ROWS:
            for channel, fn in channels.items():
                try:
                    v: Any = fn()
                except Exception as err:  # reported in the table, not fatal to the other channels
                    v = {"error": "%s: %s" % (type(err).__name__, str(err)[:200])}
                print(json.dumps({"%s@%s" % (row, channel): v}), flush=True)
    finally:
        shutil.rmtree(DIR, ignore_errors=True)


if __name__ == "__main__":
    main()
