"""The Python row of `make bench-clients`: the four operations of
BenchmarkClientRows (client/sandbox) through the microvms package, against
one local sandbox; prints {"row": seconds} as one JSON line."""
import json
import os
import time

from microvms import Sandbox


def main() -> None:
    mib = int(os.environ.get("MICROVMS_BENCH_MIB", "256"))
    size = mib << 20
    data = b"0123456789abcdef" * (size // 16)
    path = "/tmp/microvms-bench.bin"
    out = {}
    with Sandbox.create(local=True) as sb:
        sb.run("true")
        t = time.perf_counter()
        sb.files.write(path, data)
        out["write-%dMiB" % mib] = time.perf_counter() - t

        t = time.perf_counter()
        got = sb.files.read_bytes(path)
        out["read-%dMiB" % mib] = time.perf_counter() - t
        assert got == data, "read %d bytes, wrote %d" % (len(got), size)
        del got

        t = time.perf_counter()
        n = 0
        for item in sb.stream(["head", "-c", str(size), "/dev/zero"]):
            if hasattr(item, "text"):
                n += item.size
        out["stream-%dMiB" % mib] = time.perf_counter() - t
        assert n == size, "streamed %d bytes of %d" % (n, size)

        t = time.perf_counter()
        for _ in range(200):
            r = sb.run(["true"])
            assert r.exit_code == 0
        out["run-x200"] = time.perf_counter() - t
        sb.run(["rm", "-f", path])
    print(json.dumps(out))


if __name__ == "__main__":
    main()
