"""The Python frame reader (client.FrameReader) under hostile bytes, and
against the Go reader (internal/frames) on the same corpus.

The differential runs internal/framesverdict, which prints the Go
reader's verdict on FuzzFrames' seeds, its committed corpus when there is one,
hostile edges and a fixed sample: the frames it hands out and whether the body
ends cleanly (eof), inside a frame (cut) or at a frame no writer sends
(malformed). This reader must agree on every body, byte for byte.
"""

import io
import json
import os
import struct
import subprocess
import unittest
from pathlib import Path

from microvms_agentd import Frame, FrameCut, FrameError, FrameReader, models
from microvms_agentd.stream import _frame_event

REPO = Path(__file__).resolve().parents[3]


def hdr(typ: int, offset: int, n: int) -> bytes:
    return struct.pack(">BQI", typ, offset, n)


class Counting(io.RawIOBase):
    """A source that hands out at most `step` bytes per read and counts them."""

    def __init__(self, data: bytes, step: int = 1 << 20):
        self.data, self.pos, self.step, self.reads = data, 0, step, 0

    def read(self, n: int = -1) -> bytes:
        self.reads += 1
        n = min(n, self.step)
        b = self.data[self.pos:self.pos + n]
        self.pos += len(b)
        return b


def read_all(data: bytes, step: int = 1 << 20):
    r = FrameReader(Counting(data, step))
    out = []
    while True:
        f = r.next()
        if f is None:
            return out
        out.append(f)


class HostileBytes(unittest.TestCase):
    # Each case is a wrong edit to FrameReader.next's checks: dropping the
    # type bound, the keepalive rule or the length cap, or taking a body cut
    # inside a frame for a clean end.

    def test_truncated_frames_are_cuts_not_ends(self):
        for name, body in {
            "cut header": hdr(1, 0, 10)[:5],
            "cut payload": hdr(1, 0, 10) + b"abc",
            "cut large payload": hdr(2, 0, 100) + bytes(50),
            "whole frame then a cut one": hdr(1, 0, 2) + b"ok" + hdr(4, 2, 9)[:12],
        }.items():
            with self.subTest(name):
                with self.assertRaises(FrameCut):
                    read_all(body)
                self.assertTrue(issubclass(FrameCut, ConnectionError))  # follow resumes a cut body

    def test_unknown_type(self):
        for typ in (models.FRAME_LAST_TYPE + 1, 9, 255):
            with self.subTest(typ):
                with self.assertRaisesRegex(FrameError, "unknown type"):
                    read_all(hdr(typ, 0, 0))

    def test_keepalive_with_payload(self):
        with self.assertRaisesRegex(FrameError, "keepalive"):
            read_all(hdr(models.FRAME_KEEPALIVE, 0, 1) + b"x")

    def test_oversized_length_is_refused_before_reading_it(self):
        for n in (models.FRAME_MAX_PAYLOAD_BYTES + 1, 0xFFFFFFFF):
            with self.subTest(n):
                src = Counting(hdr(models.FRAME_STDOUT, 0, n) + bytes(64))
                with self.assertRaisesRegex(FrameError, "over the"):
                    FrameReader(src).next()
                self.assertEqual(src.pos, models.FRAME_HEADER_BYTES)  # nothing read (or allocated) for it
        # The cap itself is allowed.
        whole = read_all(hdr(models.FRAME_STDERR, 5, models.FRAME_MAX_PAYLOAD_BYTES) + b"\xff" * models.FRAME_MAX_PAYLOAD_BYTES)
        self.assertEqual(len(whole[0].payload), models.FRAME_MAX_PAYLOAD_BYTES)

    def test_clean_end_and_short_reads(self):
        self.assertEqual(read_all(b""), [])
        body = hdr(0, 0, 0) + hdr(1, 7, 3) + b"\x00\xff\x80" + hdr(2, 2**64 - 1, 1) + b"e"
        for step in (1, 2, 13, 1 << 20):
            with self.subTest(step=step):
                got = [(f.type, f.offset, f.payload) for f in read_all(body, step)]
                self.assertEqual(got, [(0, 0, b""), (1, 7, b"\x00\xff\x80"), (2, 2**64 - 1, b"e")])

    def test_gap_and_exit_payloads_must_be_their_events(self):
        for f in (Frame(models.FRAME_GAP, 0, b"{"), Frame(models.FRAME_GAP, 0, b'{"from": 9, "to": 3}'),
                  Frame(models.FRAME_GAP, 0, b"\xff"), Frame(models.FRAME_EXIT, 0, b'{"offset": 1}'),
                  Frame(models.FRAME_EXIT, 0, b"[]")):
            with self.subTest(f.payload):
                with self.assertRaises(FrameError):
                    _frame_event(f)
        ev = _frame_event(Frame(models.FRAME_STDERR, 4, b"\xfe"))
        self.assertEqual((ev.event, ev.data.stream, ev.data.offset, ev.data.raw, ev.data.output), ("output", "stderr", 4, b"\xfe", "/g=="))


def go_verdicts():
    out = subprocess.run(["go", "run", "./internal/framesverdict", "-corpus",
                          os.path.join("internal", "frames", "testdata", "fuzz", "FuzzFrames")],
                         cwd=REPO, check=True, capture_output=True, timeout=600)
    return json.loads(out.stdout)


class AgreesWithTheGoReader(unittest.TestCase):
    def test_every_corpus_body(self):
        doc = go_verdicts()
        self.assertEqual(doc["max_payload"], models.FRAME_MAX_PAYLOAD_BYTES)
        cases = doc["cases"]
        self.assertGreater(len(cases), 400)
        ends = {c["end"] for c in cases}
        self.assertEqual(ends, {"eof", "cut", "malformed"})  # the corpus reaches every verdict
        self.assertTrue(any(c["name"].startswith("seed ") for c in cases))
        for c in cases:
            body = bytes.fromhex(c["body"])
            for step in (1, 7, 1 << 20):
                r = FrameReader(Counting(body, step))
                got = []
                end = None
                while end is None:
                    try:
                        f = r.next()
                    except FrameCut:
                        end = "cut"
                        continue
                    except FrameError:
                        end = "malformed"
                        continue
                    if f is None:
                        end = "eof"
                        continue
                    got.append({"type": f.type, "offset": str(f.offset), "payload": f.payload.hex()})
                if (got, end) != (c["frames"], c["end"]):
                    self.fail(f"{c['name']} (reads of {step}): Python read {got!r} then {end}, Go {c['frames']!r} then {c['end']}")


if __name__ == "__main__":
    unittest.main()
