"""The Python row of `make bench-clients`: the four operations of
BenchmarkClientRows (client/sandbox) through the microvms package, against
one local sandbox; prints {"row": seconds or {"error": why}} as one JSON
line per operation, as it ends. An operation that fails is reported, and
the rest still run."""
import json
import os
import time
from typing import Any, Callable, Dict

from microvms import Sandbox

FILL = "yes 0123456789abcdef | tr -d '\\n' | head -c %d > %s"


def main() -> None:
    mib = int(os.environ.get("MICROVMS_BENCH_MIB", "256"))
    size = mib << 20
    data = b"0123456789abcdef" * (size // 16)
    path = "/tmp/microvms-bench.bin"
    out: Dict[str, Any] = {}

    def timed(name: str, op: Callable[[], None]) -> bool:
        t = time.perf_counter()
        try:
            op()
        except Exception as err:  # reported in the table, not fatal to the other rows
            out[name] = {"error": "%s: %s" % (type(err).__name__, str(err)[:200])}
            print(json.dumps({name: out[name]}), flush=True)
            return False
        out[name] = time.perf_counter() - t
        print(json.dumps({name: out[name]}), flush=True)
        return True

    read_back: Dict[str, bytes] = {}

    def read() -> None:
        # Only the read is on the clock, as in the Go row, which checks the
        # length alone: comparing 256 MiB takes 25 ms here, a twelfth of the
        # row. The bytes are still compared, after the clock (checked()).
        read_back["got"] = sb.files.read_bytes(path)

    def checked(name: str) -> None:
        got = read_back.pop("got", b"")
        if got != data:
            out[name] = {"error": "read %d bytes that are not the %d written" % (len(got), size)}
            print(json.dumps({name: out[name]}), flush=True)

    def stream() -> None:
        n = 0
        for item in sb.stream(["sh", "-c", "yes 0123456789abcdef | head -c %d" % size]):
            if hasattr(item, "text"):
                n += item.size
        if n != size:  # bytes lost behind agentd's output window: reported, not failed
            out["stream-%dMiB#lost" % mib] = size - n
            print(json.dumps({"stream-%dMiB#lost" % mib: size - n}), flush=True)

    def runs() -> None:
        for _ in range(200):
            r = sb.run(["true"])
            assert r.exit_code == 0

    # The write goes last: an engine that refuses a request too long for it
    # exits, and takes the sandbox with it. The read's file is made in the
    # guest, so it does not depend on the write.
    sb = Sandbox.create(local=True)
    try:
        sb.run("true")
        timed("stream-%dMiB" % mib, stream)
        timed("run-x200", runs)
        sb.run(FILL % (size, path))
        if timed("read-%dMiB" % mib, read):
            checked("read-%dMiB" % mib)
        timed("write-%dMiB" % mib, lambda: sb.files.write(path, data))
    finally:
        try:
            sb.terminate()
        except Exception:
            pass
        sb.close()


if __name__ == "__main__":
    main()
