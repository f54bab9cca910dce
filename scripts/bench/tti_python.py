"""The Python row of BenchmarkTTI (client/sandbox): create -> first command's
output, the field's time to interactive, through the microvms package
against a running emulator. argv: control endpoint, image ARN, runs. Prints
one JSON line per run: {"s": seconds} or {"error": why}."""
import json
import sys
import time

from microvms import Sandbox


def main() -> None:
    endpoint, image, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
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
