"""The Python row of BenchmarkTTI (client/sandbox): create -> first command's
output, the field's time to interactive, through the microvms package
against a running emulator. argv: control endpoint, image ARN, runs (after
one untimed run). Prints one JSON line per timed run: {"s": seconds} or
{"error": why}."""
import json
import sys
import time

from microvms import Sandbox


def main() -> None:
    endpoint, image, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
    # One untimed run first: it starts the package's engine process, which
    # the timed runs share, as the Go row's runs share their process.
    # BenchmarkTTI runs this driver once per round, so each round has one.
    try:
        warm = Sandbox.create(image=image, control_endpoint=endpoint)
        try:
            warm.run(["true"])
        finally:
            try:
                warm.terminate()
            finally:
                warm.close()
    except Exception:
        pass  # the timed runs report what is wrong
    for _ in range(runs):
        t = time.perf_counter()
        sb = None
        try:
            sb = Sandbox.create(image=image, control_endpoint=endpoint)
            r = sb.run(["echo", "hi"])
            if r.stdout != "hi\n":
                raise RuntimeError("echo printed %r" % r.stdout)
            print(json.dumps({"s": time.perf_counter() - t}), flush=True)
        except Exception as err:  # a failed run is counted, not fatal
            print(json.dumps({"error": "%s: %s" % (type(err).__name__, str(err)[:200])}), flush=True)
        finally:
            if sb is not None:
                try:
                    sb.terminate()
                except Exception:
                    pass
                sb.close()


if __name__ == "__main__":
    main()
