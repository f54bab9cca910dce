"""`make bench-clients`: Python / TypeScript / Go in the same run, against one
local sandbox each, for a file write and read and streamed stdout of
$MICROVMS_BENCH_MIB MiB (256 unset) and 200 short run() calls.

The Go row is BenchmarkClientRows (client/sandbox: the library straight to
agentd); the Python and TypeScript rows (rows_python.py, rows_typescript.mjs)
go through their package's `microvm engine`, and the engine floor
(rows_engine.py) is that engine driven by the least client there is: what
no package on top of it can beat. The runtime floors (floor_python.py,
floor_typescript.mjs) are each language's own least code moving the same
bytes to or from another process (floorpeer, a Go process as the engine
is) through each channel it has, with no engine and no package: the row's
fastest channel is its floor, what no package in that language can beat
however thin the engine (for run, 200 JSON-line round trips). Each
language runs alone, one after the other, so they do not share the
machine's cores, for $MICROVMS_BENCH_ROUNDS rounds (3 unset). Every row
times the same operations in the same order (stream, run, then a read of
a file made in the guest and a write over it; checked, since the order
alone moved Go's write and read by a third or more). The table gives
each cell's median in seconds and, per language, Go's time over its
time (1.00 = as fast as Go; the issue asks for at least 0.80), and for a
package row its floor's time over its own (1.00 = at the floor).

    python3 scripts/bench/clients.py BINDIR   (BINDIR holds microvm and agentd)
"""
import json
import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.dirname(os.path.abspath(__file__))
GO_NAMES: list = []


def go_row(env: dict) -> dict:
    out = subprocess.run(["go", "test", "./client/sandbox/", "-run", "^$", "-bench", "^BenchmarkClientRows$", "-benchtime", "1x", "-count", "1"],
                         cwd=REPO, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("the Go row failed:\n" + out.stdout + out.stderr)
    row = {}
    for name, ns, rest in re.findall(r"^BenchmarkClientRows/(\S+?)(?:-\d+)?\s+\d+\s+(\d+(?:\.\d+)?) ns/op(.*)$", out.stdout, re.M):
        row[name] = float(ns) / 1e9
        lost = re.search(r"(\d+(?:\.\d+)?) lost-bytes", rest)
        if lost:
            row[name + "#lost"] = int(float(lost.group(1)))
    return row


def run_row(argv: list, env: dict, what: str, partial: bool = False) -> dict:
    """One JSON line per operation as it ends, so a driver that dies midway
    keeps the rows it finished; the others name how it died."""
    out = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True)
    row: dict = {}
    for line in out.stdout.splitlines():
        if line.startswith("{"):
            row.update(json.loads(line))
    if out.returncode != 0:
        lines = [l.strip() for l in out.stderr.splitlines() if l.strip()]
        errors = [l for l in lines if "Error" in l or "error" in l] or lines or ["no output"]
        died = "the %s driver exited %d: %s" % (what, out.returncode, " / ".join(errors[:3])[:300])
        for name in ([] if partial else GO_NAMES):
            row.setdefault(name, {"error": died})
        if partial:
            sys.exit(died)
    return row


def check_order(samples: dict) -> None:
    """Every row must time its operations in the Go row's order. A write
    timed first, into a fresh sandbox, and one timed last, over the file
    the read row read, differ by a third (client/sandbox/
    clientrows_bench_test.go), so rows run in different orders compare
    different work: the table would show that difference as the language's."""
    for lang in ("Go", "engine floor", "Python", "TypeScript"):
        for i, r in enumerate(samples[lang]):
            timed = [n for n, v in r.items() if "#" not in n and not isinstance(v, dict)]
            if timed != [n for n in GO_NAMES if n in timed]:
                sys.exit("the %s row timed %s in round %d, the Go row %s: rows timed in different orders compare different work"
                         % (lang, ", ".join(timed), i + 1, ", ".join(GO_NAMES)))


def median(values: list):
    """The median of a cell's rounds, or the first error if any round failed."""
    errors = [v for v in values if isinstance(v, dict)]
    if errors:
        return errors[0]
    values = sorted(values)
    return values[len(values) // 2]


def floor_rows(rounds: list) -> dict:
    """{row: (fastest channel, its median, {channel: median})} of a runtime
    floor's rounds, whose keys are "row@channel"."""
    per: dict = {}
    for key in rounds[0]:
        name, _, channel = key.partition("@")
        per.setdefault(name, {})[channel] = median([r.get(key, {"error": "no result"}) for r in rounds])
    out = {}
    for name, channels in per.items():
        ok = {ch: v for ch, v in channels.items() if not isinstance(v, dict)}
        best = min(ok, key=ok.__getitem__) if ok else next(iter(channels))
        out[name] = (best, channels[best], channels)
    return out


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    bindir = os.path.abspath(sys.argv[1])
    env = dict(os.environ, MICROVM_BIN=os.path.join(bindir, "microvm"), MICROVM_AGENTD=os.path.join(bindir, "agentd"))
    # Rounds, each language once per round in turn, and the median of each
    # cell: the machine is shared, and one pass swings by 2x.
    rounds = int(os.environ.get("MICROVMS_BENCH_ROUNDS", "3"))
    peer = os.path.join(bindir, "floorpeer")
    built = subprocess.run(["go", "build", "-o", peer, "./scripts/bench/floorpeer"], cwd=REPO, env=env, capture_output=True, text=True)
    if built.returncode != 0:
        sys.exit("building floorpeer failed:\n" + built.stderr)
    samples: dict = {"Go": [], "engine floor": [], "Python": [], "Python floor": [], "TypeScript": [], "Node floor": []}
    for _ in range(rounds):
        samples["Go"].append(go_row(env))
        GO_NAMES[:] = [n for n in samples["Go"][0] if "#" not in n]
        samples["engine floor"].append(run_row([sys.executable, os.path.join(HERE, "rows_engine.py")], env, "engine floor", partial=True))
        samples["Python"].append(run_row([sys.executable, os.path.join(HERE, "rows_python.py")],
                                         dict(env, PYTHONPATH=os.path.join(REPO, "clients", "python"), PYTHONDONTWRITEBYTECODE="1"), "Python"))
        samples["Python floor"].append(run_row([sys.executable, os.path.join(HERE, "floor_python.py"), peer], env, "Python floor", partial=True))
        samples["TypeScript"].append(run_row(["node", os.path.join(HERE, "rows_typescript.mjs"),
                                              os.path.join(REPO, "clients", "typescript", "dist", "src", "sandbox.js")], env, "TypeScript"))
        samples["Node floor"].append(run_row(["node", os.path.join(HERE, "floor_typescript.mjs"), peer], env, "Node floor", partial=True))
    check_order(samples)
    floors = {lang: floor_rows(samples.pop(lang)) for lang in ("Python floor", "Node floor")}
    rows = {lang: {name: median([r.get(name, {"error": "no result"}) for r in rs]) for name in GO_NAMES if lang != "engine floor" or name in rs[0]}
            for lang, rs in samples.items()}
    print("%d rounds, median of each cell" % rounds)
    names = list(rows["Go"])
    langs = ("engine floor", "Python", "Python floor", "TypeScript", "Node floor")
    floor_of = {"Python": "Python floor", "TypeScript": "Node floor"}
    print("| operation | Go | %s |" % " | ".join(langs))
    print("|---|---|---|---|---|---|---|")
    failed = []
    for name in names:
        go = rows["Go"][name]
        cells = ["%.2f s" % go]
        for lang in langs:
            v = floors[lang][name][1] if lang in floors and name in floors[lang] else rows.get(lang, {}).get(name)
            if v is None:
                cells.append("-")
            elif isinstance(v, dict):
                failed.append("%s %s: %s" % (lang, name, v["error"]))
                cells.append("fails (below)")
            elif lang in floor_of and name in floors[floor_of[lang]]:
                # How near the package comes to its language's floor, and
                # to the engine floor both packages stand on.
                eng = rows.get("engine floor", {}).get(name)
                cells.append("%.2f s (%.2fx; %.2f of floor%s)" % (v, go / v, floors[floor_of[lang]][name][1] / v,
                                                                 "; %.2f of engine" % (eng / v) if isinstance(eng, float) else ""))
            else:
                cells.append("%.2f s (%.2fx)" % (v, go / v))
        print("| %s | %s |" % (name, " | ".join(cells)))
    print("(x: Go's time over the language's; 1.00 is as fast as Go. of floor: the language's floor's time over the package's,"
          " of engine: the engine floor's; 1.00 is at the floor)")
    hostfile = [r[k] for r in samples["engine floor"] for k in r if k.endswith("#hostfile")]
    if hostfile:
        print("- engine floor write from a host file (sendfile; a caller whose bytes are already in a file): %.2f s, %.2fx"
              % (median(hostfile), rows["Go"][[n for n in names if n.startswith("write-")][0]] / median(hostfile)))
    print("Runtime floors, each row's channels (median s; * the row's floor):")
    for lang, per in floors.items():
        for name, (best, _, channels) in per.items():
            print("- %s %s: %s" % (lang, name, "; ".join("%s%s %s" % ("*" if ch == best else "", ch, "%.3f s" % v if not isinstance(v, dict) else "fails: " + v["error"])
                                                           for ch, v in channels.items())))
    # Output a reader lost behind agentd's bounded per-exec window (a loaded
    # machine): the time stands, but says less than it seems to.
    for lang, rs in samples.items():
        for i, r in enumerate(rs):
            for key, lost in r.items():
                if key.endswith("#lost"):
                    print("- %s %s round %d: %d bytes lost behind agentd's output window" % (lang, key[:-5], i + 1, lost))
    for line in failed:
        print("- " + line)
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
