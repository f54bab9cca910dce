"""The whole lifecycle in local mode, through the real microvm engine and the
real embedded emulator: nothing here is stubbed."""
import os
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request
from typing import Any, AsyncIterator, Dict, List, Optional
from unittest import mock

from microvms import _sink
from microvms import (ERROR_KINDS, Exit, InvalidArgError, OutputChunk, PreconditionError, ProtocolError, Sandbox)
from microvms.errors import ERROR_CLASSES

from .engine_env import alive, guest_inits_of, require_engine

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class ErrorTableTest(unittest.TestCase):
    def test_every_generated_code_has_its_class(self) -> None:
        # Catches: a kind added to api/errors.yaml (regenerated into
        # _contract.ERROR_KINDS) without its class here.
        self.assertEqual(sorted(ERROR_CLASSES), sorted(ERROR_KINDS))
        for code, cls in ERROR_CLASSES.items():
            err = cls("m", code)
            self.assertEqual((err.kind, err.exit_code), ERROR_KINDS[code])

    def test_missing_binary_is_a_precondition(self) -> None:
        # Catches: a lookup that falls through to PATH when the option names
        # a file that is not there, or a bare FileNotFoundError.
        with self.assertRaises(PreconditionError) as ctx:
            Sandbox.create(local=True, binary="/nonexistent/microvm")
        self.assertEqual(ctx.exception.exit_code, 12)
        self.assertIn("/nonexistent/microvm", str(ctx.exception))


def _out(data: bytes, offset: int, stream: str = "stdout") -> Dict[str, Any]:
    return {"event": "output", "stream": stream, "offset": offset, "text": data.decode("utf-8", "replace"),
            "bytes": len(data), "lossy": False, "data": data}


class LinesTest(unittest.TestCase):
    """ExecStream.lines over events as the engine's sink hands them over."""

    # "é café" and a second line, cut inside both é's and between lines; a
    # stderr chunk between the halves; then a gap, and a character begun
    # before it whose continuation byte is after it.
    EVENTS: List[Any] = [_out(b"\xc3", 0), _out(b"err\xc3", 1, "stderr"), _out(b"\xa9 caf\xc3", 5), _out(b"\xa9\nab\nc", 12),
              _out(b"d\n\xe2\x82", 19), {"event": "gap", "from": 23, "to": 40}, _out(b"\xacx", 40),
              {"event": "exit", "exitCode": 0, "signal": None, "truncated": False, "writersMayBeAlive": False, "offset": 42}]
    WANT = ["\u00e9 caf\u00e9", "ab", "cd", "\ufffd\ufffdx"]

    def test_a_character_split_between_chunks_comes_out_whole(self) -> None:
        # Catches: lines() joining each chunk's own text (decoded alone),
        # which makes each split é two U+FFFD; and a gap that lets the bytes
        # after it finish a character begun before it.
        from microvms.sandbox import ExecStream
        self.assertEqual(list(ExecStream(iter(self.EVENTS)).lines()), self.WANT)
        self.assertEqual(list(ExecStream(iter(self.EVENTS)).lines("stderr")), ["err\ufffd"])

    def test_async_lines_match(self) -> None:
        # Catches: AsyncExecStream without lines(), or with a splitter of its own.
        import asyncio
        from microvms.sandbox import AsyncExecStream

        async def events() -> AsyncIterator[Dict[str, Any]]:
            for ev in self.EVENTS:
                yield ev

        async def collect() -> List[str]:
            return [line async for line in AsyncExecStream(events()).lines()]

        self.assertEqual(asyncio.run(collect()), self.WANT)

    def test_a_line_past_max_line_comes_out_in_pieces(self) -> None:
        # Catches: lines() holding a line until its newline whatever its
        # length, so a guest printing without newlines grows this process
        # without bound; and a cut that turns the newline ending an exactly
        # full last piece into an empty line.
        from microvms import InvalidArgError
        from microvms.sandbox import ExecStream
        evs: List[Any] = [_out(b"abcde", 0), _out(b"fghij", 5), _out(b"k\n\nlmnopqrs", 10), _out(b"\n", 21)]
        self.assertEqual(list(ExecStream(iter(evs)).lines(max_line=4)), ["abcd", "efgh", "ijk", "", "lmno", "pqrs"])
        with self.assertRaises(InvalidArgError):
            list(ExecStream(iter(evs)).lines(max_line=0))

    def test_text_alone_still_splits(self) -> None:
        # The engine's event lines (no FIFOs) carry text without data.
        from microvms.sandbox import ExecStream
        evs: List[Any] = [{k: v for k, v in _out(b"one\ntw", 0).items() if k != "data"}, {**_out(b"o\n", 7)}]
        del evs[1]["data"]
        self.assertEqual(list(ExecStream(iter(evs)).lines()), ["one", "two"])


class LifecycleTest(unittest.TestCase):
    def setUp(self) -> None:
        require_engine()

    def test_whole_lifecycle(self) -> None:
        sb = Sandbox.create(local=True)
        engine_pid = sb._engine.pid
        guests = guest_inits_of(engine_pid)
        self.assertEqual(len(guests), 1, "one guest init under the engine")
        try:
            self.assertEqual(sb.lifecycle, "RUNNING")

            ok = sb.run("echo hi")
            self.assertEqual((ok.exit_code, ok.stdout, ok.ok), (0, "hi\n", True))
            # Usage rides on the result; the wrong edit is dropping it in _from.
            self.assertIsNotNone(ok.usage)
            assert ok.usage is not None
            self.assertEqual(ok.usage["stdoutBytes"], 3)
            self.assertFalse(ok.oom_killed)
            # A guest without a delegated cgroup refuses limits rather than
            # run the command unlimited.
            with self.assertRaises(ProtocolError) as refused:
                sb.run("true", limits={"memory_bytes": 64 << 20})
            self.assertIn("limits", refused.exception.message)
            # A non-zero exit is a result: the wrong edit is raising on it.
            three = sb.run("echo oops >&2; exit 3")
            self.assertEqual((three.exit_code, three.stderr, three.ok), (3, "oops\n", False))
            argv = sb.run(["printf", "%s|", "a b", "c"])
            self.assertEqual(argv.stdout, "a b|c|")

            # Line by line while it runs: the command waits for a file the
            # test writes only after seeing the first line, so output held
            # back until exit makes it exit 9 instead of printing "two".
            gate = "/tmp/stream-gate"
            script = ("echo one; i=0; while [ ! -e %s ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; "
                      "[ -e %s ] || exit 9; echo two" % (gate, gate))
            seen = []
            st = sb.stream(script)
            for line in st.lines():
                seen.append(line)
                if line == "one":
                    sb.files.write(gate, "")
            self.assertEqual(seen, ["one", "two"])
            assert st.exit is not None
            self.assertEqual(st.exit.exit_code, 0)
            # A character whose bytes leave the guest in two writes, so in
            # two chunks: lines() puts it back together.
            split = list(sb.stream("printf '\\303'; sleep 0.4; printf '\\251t\\n'").lines())
            self.assertEqual(split, ["\u00e9t"])
            # 100,000 bytes with no newline, bounded at 30,000 characters.
            cut = [len(line) for line in sb.stream("head -c 100000 /dev/zero | tr '\\0' a").lines(max_line=30000)]
            self.assertEqual(cut, [30000, 30000, 30000, 10000])
            items = list(sb.stream("echo x; exit 4"))
            self.assertIsInstance(items[0], OutputChunk)
            self.assertIsInstance(items[-1], Exit)
            self.assertEqual(items[-1].exit_code, 4)  # type: ignore[union-attr]

            sb.files.write("/work/notes.txt", "kept\n")
            self.assertEqual(sb.files.read("/work/notes.txt"), "kept\n")
            sb.files.write("/work/bin.dat", b"\x00\xff\x01", mode="0600")
            self.assertEqual(sb.files.read_bytes("/work/bin.dat"), b"\x00\xff\x01")
            # max_bytes bounds what this process takes of a guest's file:
            # refused before the read when its size says so, and by the
            # engine as the read passes it when it does not (a symlink's
            # size is the link's). Catches: max_bytes not sent to the engine,
            # or checked against the stat alone.
            sb.run("head -c 100 /dev/zero > /tmp/hundred; ln -sf /tmp/hundred /tmp/hundred-link")
            self.assertEqual(len(sb.files.read_bytes("/tmp/hundred", max_bytes=100)), 100)
            self.assertEqual(len(sb.files.read_bytes("/tmp/hundred-link", max_bytes=100)), 100)
            for p in ("/tmp/hundred", "/tmp/hundred-link"):
                with self.assertRaises(InvalidArgError) as over:
                    sb.files.read_bytes(p, max_bytes=99)
                self.assertIn("max", over.exception.message)
            with tempfile.TemporaryDirectory() as host:
                dst = os.path.join(host, "got")
                with self.assertRaises(InvalidArgError):
                    sb.files.download("/tmp/hundred", dst, max_bytes=99)
                self.assertFalse(os.path.exists(dst), "a download past max_bytes left its file")
                self.assertEqual(sb.files.download("/tmp/hundred", dst, max_bytes=100), 100)
            with self.assertRaises(InvalidArgError):
                sb.files.read_bytes("/tmp/hundred", max_bytes=0)
            # Bytes that only pass through hold no host file: a write's go
            # through a Unix socket the engine dials, a read's through a
            # FIFO (each in a microvm-sink-* directory), both removed after.
            if _sink.sockets_supported() and _sink.supported():
                made: List[str] = []
                real = tempfile.mkdtemp

                def recording(suffix: Optional[str] = None, prefix: Optional[str] = None, dir: Optional[str] = None) -> str:
                    d = real(suffix, prefix, dir)
                    made.append(d)
                    return d
                with mock.patch.object(tempfile, "mkdtemp", recording):
                    sb.files.write("/work/shm.dat", b"x" * 4096)
                    self.assertEqual(sb.files.read_bytes("/work/shm.dat"), b"x" * 4096)
                self.assertEqual(len(made), 2)
                self.assertTrue(all(os.path.basename(d).startswith("microvm-sink-") for d in made), made)
                self.assertFalse(any(os.path.exists(d) for d in made), "a pass-through temp dir was left behind")
                sb.files.remove("/work/shm.dat")
            names = {e.name: e for e in sb.files.list("/work")}
            self.assertEqual(sorted(names), ["bin.dat", "notes.txt"])
            self.assertEqual((names["bin.dat"].size, names["bin.dat"].mode), (3, "0600"))

            with self.assertRaises(ProtocolError) as ctx:
                sb.files.read("/work/missing.txt")
            self.assertEqual((ctx.exception.code, ctx.exception.exit_code, ctx.exception.wire_kind),
                             ("ERR_PROTOCOL", 5, "NotFound"))

            with tempfile.TemporaryDirectory() as tmp:
                src = os.path.join(tmp, "src")
                os.makedirs(os.path.join(src, "sub"))
                with open(os.path.join(src, "a.txt"), "w") as f:
                    f.write("alpha")
                with open(os.path.join(src, "sub", "b.txt"), "w") as f:
                    f.write("beta!")
                self.assertEqual(sb.files.upload_dir(src, "/work/tree"), 10)
                self.assertEqual(sb.run("cat /work/tree/a.txt /work/tree/sub/b.txt").stdout, "alphabeta!")
                sb.run("echo made-in-vm > /work/tree/sub/c.txt")
                dst = os.path.join(tmp, "dst")
                sb.files.download_dir("/work/tree", dst)
                with open(os.path.join(dst, "sub", "c.txt")) as f:
                    self.assertEqual(f.read(), "made-in-vm\n")
                with open(os.path.join(dst, "a.txt")) as f:
                    self.assertEqual(f.read(), "alpha")

            self.assertEqual(sb.suspend(), "SUSPENDED")
            # The state machine is Go's: a run on a suspended VM is refused locally.
            with self.assertRaises(InvalidArgError):
                sb.run("true")
            self.assertEqual(sb.resume(), "RUNNING")
            self.assertEqual(sb.files.read("/work/notes.txt"), "kept\n")

            # Another process attaches by id and token, sees the file, leaves one.
            child = subprocess.run(
                [sys.executable, "-c", ATTACH_SCRIPT, sb.microvm_id, sb.agent_token, sb.control_endpoint or ""],
                env=dict(os.environ, PYTHONPATH=HERE), capture_output=True, text=True, timeout=120)
            self.assertEqual(child.returncode, 0, child.stderr)
            self.assertEqual(child.stdout, "kept\n")
            self.assertEqual(sb.files.read("/work/from-child.txt"), "child was here")
            self.assertEqual(sb.lifecycle, "RUNNING", "leaving an attached sandbox must not terminate it")

            report = sb.terminate()
            self.assertEqual(report.microvm_id, sb.microvm_id)
            self.assertEqual(report.undeleted, [])
            self.assertFalse(report.leaked)
            cost = sb.cost()
            self.assertTrue(cost.items)
            self.assertGreater(float(cost.total_usd), 0)
            self.assertIn(sb.microvm_id, str(cost))
            self.assertIn("suspended", {li.phase for li in cost.items})
        finally:
            sb.close()
        # The process's shared engine lives on for the next sandbox; this
        # sandbox's guest does not (close released its handle).
        self.assertEqual([p for p in guests if alive(p)], [], "no guest is left behind")

    def test_close_with_a_timeout_leaves_the_teardown_going(self) -> None:
        # Catches: close(timeout=) that swallows its timeout (the caller
        # believes the guest gone), and one that abandons the teardown on it
        # (the guest would live on until the interpreter exits).
        from microvms.errors import TimeoutError as MicrovmTimeout
        sb = Sandbox.create(local=True)
        guests = guest_inits_of(sb._engine.pid)
        self.assertEqual(len(guests), 1)
        with self.assertRaises(MicrovmTimeout) as cm:
            sb.close(timeout=0)
        self.assertIn("goes on in the engine", str(cm.exception))
        sb.close(timeout=0)  # a second close does nothing, and raises nothing
        deadline = time.monotonic() + 120
        while [p for p in guests if alive(p)] and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertEqual([p for p in guests if alive(p)], [], "the guest outlived its teardown")

    def test_leaving_the_block_stops_every_guest(self) -> None:
        # Catches: a context manager that does not close the engine (the
        # guest would outlive the block until the interpreter exits).
        with Sandbox.create(local=True) as sb:
            pid = sb._engine.pid
            guests = guest_inits_of(pid)
            self.assertEqual(len(guests), 1)
            sb.files.write("/tmp/x", "y")
        self.assertEqual([p for p in guests if alive(p)], [])
        self.assertEqual(guest_inits_of(pid), [])

    def test_a_killed_caller_leaves_no_guest(self) -> None:
        # Catches: an engine that keeps running (and its guest) once its
        # caller is gone without closing it.
        proc = subprocess.Popen([sys.executable, "-c", ORPHAN_SCRIPT], env=dict(os.environ, PYTHONPATH=HERE),
                                stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        engine_pid = int(proc.stdout.readline())
        guests = guest_inits_of(engine_pid)
        self.assertEqual(len(guests), 1)
        proc.kill()
        proc.wait()
        proc.stdout.close()
        for _ in range(600):  # bounded: up to a minute for the engine's teardown
            if not alive(engine_pid) and not any(alive(p) for p in guests):
                break
            time.sleep(0.1)
        self.assertFalse(alive(engine_pid))
        self.assertEqual([p for p in guests if alive(p)], [])


class PortURLTest(unittest.TestCase):
    def setUp(self) -> None:
        require_engine()

    def test_url_reaches_only_its_port(self) -> None:
        # Catches: a url op that mints for more than the one port (the 9000
        # request would answer 200), headers that do not open the port, the
        # token shown by repr, and a bad port reaching the control plane
        # instead of raising InvalidArgError.
        with Sandbox.create(local=True) as sb:
            sb.files.write("/tmp/site/marker.txt", "from the guest\n")
            sb.run("cd /tmp/site && nohup /usr/bin/python3 -m http.server 8080 --bind 127.0.0.1 >/dev/null 2>&1 &")
            u = sb.url(8080, expires_minutes=5)
            self.assertEqual((u.port, u.microvm_id), (8080, sb.microvm_id))
            self.assertEqual(u.headers["X-aws-proxy-port"], "8080")
            self.assertNotIn(u.headers["X-aws-proxy-auth"], repr(u))
            self.assertEqual(u.subprotocols, ["lambda-microvms", "lambda-microvms.authentication." + u.headers["X-aws-proxy-auth"],
                                              "lambda-microvms.port.8080"])
            body = ""
            for _ in range(100):  # bounded: python3 listens within a second or two
                try:
                    with urllib.request.urlopen(urllib.request.Request(u.url, headers=u.headers), timeout=5) as r:
                        body = r.read().decode()
                    break
                except urllib.error.HTTPError as e:
                    self.assertEqual(e.code, 502, "only 'nothing listens yet' may precede the listing")
                    time.sleep(0.1)
            self.assertIn("marker.txt", body)
            other = dict(u.headers, **{"X-aws-proxy-port": "9000"})
            with self.assertRaises(urllib.error.HTTPError) as ctx:
                urllib.request.urlopen(urllib.request.Request(u.url + "v1/health", headers=other), timeout=5)
            self.assertEqual(ctx.exception.code, 403)
            with self.assertRaises(InvalidArgError):
                sb.url(0)
            with self.assertRaises(InvalidArgError):
                sb.url(8080, expires_minutes=61)


ATTACH_SCRIPT = """
import sys
from microvms import Sandbox
with Sandbox.attach(sys.argv[1], agent_token=sys.argv[2], control_endpoint=sys.argv[3] or None) as other:
    print(other.files.read("/work/notes.txt"), end="")
    other.files.write("/work/from-child.txt", "child was here")
"""

ORPHAN_SCRIPT = """
import time
from microvms import Sandbox
sb = Sandbox.create(local=True)
print(sb._engine.pid, flush=True)
time.sleep(600)
"""

if __name__ == "__main__":
    unittest.main()
