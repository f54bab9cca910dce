"""The floor under the Python and TypeScript rows of `make bench-clients`:
the `microvm engine` both packages drive, spoken to by the least client
there is (requests written whole, answer frames read in 1 MiB buffers and
only counted or matched by id, never parsed). The write row hands the
engine bytes this process holds through a Unix socket it dials
(api/engine.yaml write: a socket localPath with size), as both packages
write, sent with one sendall; the same write from a host file written
before the clock (localPath alone, which net/http sends with sendfile) is
reported beside it as write-...#hostfile, the floor of a caller whose bytes
are already in a file. The read and stream rows read the engine's sink (a
FIFO: the file's raw bytes, the stream's binary frames) as the packages
do, only counting the bytes. Prints {"row": seconds} per operation."""
import json
import os
import select
import subprocess
import shutil
import socket
import sys
import tempfile
import time


def main() -> None:
    mib = int(os.environ.get("MICROVMS_BENCH_MIB", "256"))
    size = mib << 20
    p = subprocess.Popen([os.environ["MICROVM_BIN"], "engine"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=1 << 20)
    assert p.stdin is not None and p.stdout is not None
    rid = 0

    def send(op: str, args: dict) -> bytes:
        nonlocal rid
        rid += 1
        p.stdin.write((json.dumps({"id": rid, "op": op, "args": args}, separators=(",", ":")) + "\n").encode())
        p.stdin.flush()
        return b'{"id":%d,"envelope"' % rid

    def answer(prefix: bytes) -> bytes:
        for line in p.stdout:
            if line.startswith(prefix):
                return line
        sys.exit("the engine exited before answering")

    first = answer(send("create", {"local": True}))
    assert b'"status":"ok"' in first, first[:300]

    # The stream goes through a sink, as both packages' streams do: frames
    # into a FIFO, read here in 1 MiB reads and only counted.
    sinkdir = tempfile.mkdtemp(prefix="microvms-floor-sink-")
    fifo = os.path.join(sinkdir, "frames")
    os.mkfifo(fifo, 0o600)
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    t = time.perf_counter()
    n = 0
    end = send("stream", {"command": ["sh", "-c", "yes 0123456789abcdef | head -c %d" % size], "execId": "floor-stream", "sink": fifo})
    select.select([fd], [], [])  # the engine has opened it
    os.set_blocking(fd, True)
    while True:
        b = os.read(fd, 1 << 20)
        if not b:
            break
        n += len(b)
    line = answer(end)
    took = time.perf_counter() - t
    os.close(fd)
    shutil.rmtree(sinkdir, ignore_errors=True)
    got = json.loads(line)["envelope"].get("data", {}).get("bytes")
    print(json.dumps({"stream-%dMiB" % mib: took}), flush=True)
    if got != size:  # lost behind agentd's output window: reported, not failed
        print(json.dumps({"stream-%dMiB#lost" % mib: size - (got or 0)}), flush=True)

    t = time.perf_counter()
    for i in range(200):
        line = answer(send("run", {"command": ["true"], "execId": "floor-run-%d" % i}))
        assert b'"exitCode":0' in line, line[:300]
    print(json.dumps({"run-x200": time.perf_counter() - t}), flush=True)
    tmp = tempfile.mkdtemp(prefix="microvms-floor-")
    try:
        local = os.path.join(tmp, "data")
        with open(local, "wb") as f:
            f.write(b"0123456789abcdef" * (size // 16))
        path = "/tmp/microvms-bench-floor.bin"
        # In the packages' order and conditions (rows_python.py): the read's
        # file is made in the guest, and the write replaces it.
        fill = "yes 0123456789abcdef | tr -d '\\n' | head -c %d > %s" % (size, path)
        assert b'"exitCode":0' in answer(send("run", {"command": ["sh", "-c", fill], "execId": "floor-fill"}))
        # The read through a sink FIFO, as both packages read a file: its
        # bytes read in 1 MiB reads and only counted.
        fifo = os.path.join(tmp, "back")
        os.mkfifo(fifo, 0o600)
        fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        t = time.perf_counter()
        end = send("read", {"path": path, "sink": fifo})
        select.select([fd], [], [])  # the engine has opened it
        os.set_blocking(fd, True)
        n = 0
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            n += len(b)
        line = answer(end)
        took = time.perf_counter() - t
        os.close(fd)
        ok = b'"status":"ok"' in line and n == size
        print(json.dumps({"read-%dMiB" % mib: took if ok else {"error": line[:300].decode(errors="replace")}}), flush=True)
        # The write from bytes in memory, through a socket the engine
        # dials: the packages' path, without their own code.
        data = b"0123456789abcdef" * (size // 16)
        sock = os.path.join(tmp, "s")
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(sock)
        srv.listen(1)
        t = time.perf_counter()
        end = send("write", {"path": path, "localPath": sock, "size": size})
        conn, _ = srv.accept()
        with conn:
            conn.sendall(data)
            conn.shutdown(socket.SHUT_WR)
        line = answer(end)
        took = time.perf_counter() - t
        srv.close()
        ok = b'"status":"ok"' in line
        print(json.dumps({"write-%dMiB" % mib: took if ok else {"error": line[:300].decode(errors="replace")}}), flush=True)
        del data
        t = time.perf_counter()
        line = answer(send("write", {"path": path, "localPath": local}))
        took = time.perf_counter() - t
        if b'"status":"ok"' in line:
            print(json.dumps({"write-%dMiB#hostfile" % mib: took}), flush=True)
        answer(send("run", {"command": ["rm", "-f", path], "execId": "floor-rm"}))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    p.stdin.close()
    p.wait()


if __name__ == "__main__":
    main()
