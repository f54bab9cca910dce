"""run() and follow() over binary frames against a real agentd on 127.0.0.1,
compared with the same calls over Server-Sent Events.

A recording HTTP proxy in front of the daemon shows what went over the wire:
that frames were asked for and answered where the daemon's /v1/schema lists
them, that run is one exchange, and (with the document's frames entry
removed, or the frames preference dropped from Accept on the way) that the
client falls back to SSE and still gets every byte.
"""

import http.client
import http.server
import json
import sys
import threading
import unittest
import uuid
from typing import Dict, List, Optional, Tuple

from microvms_agentd import Client, follow, models, output_bytes, run
from microvms_agentd.models import SSEExit, SSEGap, SSEOutput, StartRequest

from .test_agentd import Daemon, bootstrap

PY = sys.executable


class Recorder:
    """An HTTP proxy on 127.0.0.1 that forwards each request to agentd and
    records (method, path, Accept, answered Content-Type). strip_frames
    removes the frames entry from /v1/schema (a daemon that does not list
    them); sse_only asks agentd for SSE whatever the client's Accept said (a
    daemon that lists frames but answers SSE)."""

    def __init__(self, port: int, strip_frames: bool = False, sse_only: bool = False):
        rec = self
        self.log: List[Tuple[str, str, str, str]] = []
        self.lock = threading.Lock()

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def forward(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else None
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection", "content-length")}
                if sse_only and "Accept" in headers:
                    headers["Accept"] = "text/event-stream"
                up = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                up.request(self.command, self.path, body=body, headers=headers)
                resp = up.getresponse()
                ct = resp.getheader("Content-Type") or ""
                with rec.lock:
                    rec.log.append((self.command, self.path.split("?")[0], self.headers.get("Accept") or "", ct))
                data: Optional[bytes] = None
                if strip_frames and self.path == "/v1/schema" and resp.status == 200:
                    doc = json.loads(resp.read())
                    doc.pop("frames", None)
                    data = json.dumps(doc).encode()
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                if data is not None:
                    self.send_header("Content-Length", str(len(data)))
                self.send_header("Connection", "close")
                self.end_headers()
                if data is not None:
                    self.wfile.write(data)
                else:
                    while True:
                        chunk = resp.read1(1 << 16)
                        if not chunk:
                            break
                        self.wfile.write(chunk)
                up.close()
                self.close_connection = True

            do_GET = do_POST = do_PUT = forward

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)

    def take(self) -> List[Tuple[str, str, str, str]]:
        with self.lock:
            out, self.log = self.log, []
        return out


def collect(events) -> Tuple[Dict[str, bytes], list, Optional[models.ExitEvent]]:
    """Each stream's bytes, the gaps, and the exit; checks that the output
    chunks and gaps tile the offsets from the first to the exit's."""
    out = {"stdout": b"", "stderr": b""}
    gaps = []
    exit_ = None
    pos: Optional[int] = None
    for ev in events:
        if exit_ is not None:
            raise AssertionError("an event after exit")
        if isinstance(ev, SSEOutput):
            data = output_bytes(ev)
            if pos is not None and ev.data.offset != pos:
                raise AssertionError(f"output at {ev.data.offset}, expected {pos}")
            pos = ev.data.offset + len(data)
            out[ev.data.stream] += data
        elif isinstance(ev, SSEGap):
            gaps.append((ev.data.from_, ev.data.to))
            pos = ev.data.to
        elif isinstance(ev, SSEExit):
            exit_ = ev.data
            if pos is not None and exit_.offset != pos:
                raise AssertionError(f"exit at {exit_.offset}, output ended at {pos}")
    return out, gaps, exit_


# Byte-exact programs: every byte value, on both pipes, and a status.
BINARY = ("import sys\n"
          "o, e = sys.stdout.buffer, sys.stderr.buffer\n"
          "for i in range(40):\n"
          "    o.write(bytes(range(256)) * (i + 1)); o.flush()\n"
          "    e.write(bytes([255 - i, 0, 0xc3, 0x28]) * 5); e.flush()\n"
          "o.write(b'\\xff\\xfe\\x00 not utf-8 \\xed\\xa0\\x80'); sys.exit(7)\n")
LARGE_MIB = 16
LARGE = f"import sys\nb = bytes((i * 7 + 3) % 256 for i in range(1 << 16))\nfor _ in range({LARGE_MIB} * 16): sys.stdout.buffer.write(b)\n"


class FramesAgainstSSE(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # A reader starved by a loaded machine for stream_stall_secs is
        # left to a gap (as the protocol says); these tests compare bytes,
        # so the stall allowance is set far above any scheduling delay.
        cls.d = Daemon(AGENTD_SSE_KEEPALIVE_SECS="1", AGENTD_STREAM_STALL_SECS="600")
        cls.token = "py-frames-" + uuid.uuid4().hex
        bootstrap(cls.d.base, cls.token)
        cls.c = Client(cls.d.base, token=cls.token, timeout=60)

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()

    def via(self, **kw) -> Tuple[Recorder, Client]:
        rec = Recorder(self.d.port, **kw)
        self.addCleanup(rec.close)
        return rec, Client(rec.base, token=self.token, timeout=60)

    def both_ways(self, command, **kw):
        """run() of command over frames and over SSE, each under its own exec id."""
        got = []
        for frames in (True, False):
            req = StartRequest(exec_id=f"{'fr' if frames else 'sse'}-{uuid.uuid4().hex[:8]}", command=command, **kw)
            got.append(collect(run(self.c, req, frames=frames)))
        return got

    def test_run_uses_frames_in_one_exchange(self):
        # Catches: frames not asked for (or not answered) where the document
        # lists them, and run taking more than the one exchange.
        rec, c = self.via()
        out, _, exit_ = collect(run(c, StartRequest(exec_id="rec-1", command=["printf", "a\\377b"])))
        self.assertEqual((out["stdout"], exit_.exit_code), (b"a\xffb", 0))
        accept = models.FRAMES_MEDIA_TYPE + ", text/event-stream;q=0.5"
        self.assertEqual(rec.take(), [("GET", "/v1/schema", "", "application/json"),
                                      ("POST", "/v1/exec/run", accept, models.FRAMES_MEDIA_TYPE)])
        # follow (a second client: the document is read once per client).
        self.c.exec_start(StartRequest(exec_id="rec-2", command=["printf", "xyz"]))
        out, _, exit_ = collect(follow(c, "rec-2"))
        self.assertEqual(out["stdout"], b"xyz")
        self.assertEqual(rec.take(), [("GET", "/v1/exec/rec-2/stream", accept, models.FRAMES_MEDIA_TYPE)])
        self.c.exec_ack("rec-2")

    def test_falls_back_to_sse_where_the_document_lists_no_frames(self):
        # Catches: asking for frames from a daemon that does not list them.
        rec, c = self.via(strip_frames=True)
        out, _, exit_ = collect(run(c, StartRequest(exec_id="plain-1", command=[PY, "-c", BINARY])))
        ref, _, ref_exit = collect(run(self.c, StartRequest(exec_id="plain-1f", command=[PY, "-c", BINARY])))
        self.assertEqual((out, exit_.exit_code), (ref, ref_exit.exit_code))
        log = rec.take()
        self.assertEqual([(m, p) for m, p, _, _ in log], [("GET", "/v1/schema"), ("POST", "/v1/exec/run")])
        self.assertNotIn(models.FRAMES_MEDIA_TYPE, log[1][2])
        self.assertEqual(log[1][3], "text/event-stream")

    def test_reads_sse_when_the_answer_is_sse(self):
        # A daemon that lists frames but answers SSE anyway: the body is read
        # by the content type it came with. Catches: parsing SSE as frames.
        rec, c = self.via(sse_only=True)
        out, _, exit_ = collect(run(c, StartRequest(exec_id="sse-ans", command=[PY, "-c", BINARY])))
        ref, _, _ = collect(run(self.c, StartRequest(exec_id="sse-ref", command=[PY, "-c", BINARY])))
        self.assertEqual((out, exit_.exit_code), (ref, 7))
        log = rec.take()
        self.assertIn(models.FRAMES_MEDIA_TYPE, log[-1][2])
        self.assertEqual(log[-1][3], "text/event-stream")

    def test_binary_output_and_stderr_are_identical(self):
        (fo, fg, fe), (so, sg, se) = self.both_ways([PY, "-c", BINARY])
        want = b"".join(bytes(range(256)) * (i + 1) for i in range(40)) + b"\xff\xfe\x00 not utf-8 \xed\xa0\x80"
        self.assertEqual(fo["stdout"], want)
        self.assertEqual(fo["stderr"], b"".join(bytes([255 - i, 0, 0xC3, 0x28]) * 5 for i in range(40)))
        self.assertEqual((fo, fg, fe.exit_code, fe.offset), (so, sg, se.exit_code, se.offset))
        self.assertEqual((fe.exit_code, fe.offset), (7, len(fo["stdout"]) + len(fo["stderr"])))

    def test_large_output_is_identical(self):
        (fo, fg, fe), (so, sg, se) = self.both_ways([PY, "-c", LARGE])
        self.assertEqual((fg, sg), ([], []))
        block = bytes((i * 7 + 3) % 256 for i in range(1 << 16))
        self.assertEqual(len(fo["stdout"]), LARGE_MIB << 20)
        self.assertTrue(fo["stdout"] == block * (LARGE_MIB * 16))
        self.assertTrue(fo == so)
        self.assertEqual((fe.exit_code, fe.offset), (se.exit_code, se.offset))

    def test_exit_codes_and_signals(self):
        for command, want in ((["true"], (0, None)), (["sh", "-c", "printf x; exit 3"], (3, None)),
                              (["sh", "-c", "printf y >&2; kill -TERM $$"], (None, 15))):
            with self.subTest(command):
                (fo, _, fe), (so, _, se) = self.both_ways(command)
                self.assertEqual((fe.exit_code, fe.signal), want)
                self.assertEqual((fo, fe.exit_code, fe.signal, fe.offset), (so, se.exit_code, se.signal, se.offset))

    def test_a_gap_is_the_same_over_frames_and_sse(self):
        # A stream attached after the ack gets one gap for the released bytes,
        # then the exit. Catches: a gap frame decoded wrong or dropped.
        self.c.exec_start(StartRequest(exec_id="gone", command=["printf", "0123456789"]))
        collect(follow(self.c, "gone"))
        self.c.exec_ack("gone")
        got = [collect(follow(self.c, "gone", frames=f)) for f in (True, False)]
        self.assertEqual(got[0][1], [(0, 10)])
        self.assertEqual((got[0][0], got[0][1], got[0][2].offset), (got[1][0], got[1][1], got[1][2].offset))
        # And from an offset inside the released range.
        self.assertEqual(collect(follow(self.c, "gone", 4, frames=True))[1], [(4, 10)])


if __name__ == "__main__":
    unittest.main()
