"""Streams and reads through the engine's sink (api/engine.yaml, stream,
follow and read's sink): the output's exact bytes arrive through a FIFO as
binary frames, a file's raw, and writes through a Unix socket the engine
dials (write's socket localPath), in sync and asyncio alike, against the
real engine and a local sandbox."""
import asyncio
import hashlib
import os
import tempfile
import unittest
from typing import List

from microvms import AsyncSandbox, Exit, InvalidArgError, OutputChunk, Sandbox
from microvms.errors import MicrovmError
from microvms.errors import TimeoutError as MicrovmTimeoutError
from microvms import _sink

from .engine_env import require_engine

# 3 MiB of bytes that are not UTF-8 (so text is lossy and only data is
# exact), across several frames, then a line on stderr.
MAKE = "head -c 3145728 /dev/urandom > /tmp/blob; sha256sum /tmp/blob | cut -c1-64 > /tmp/blob.sum; truncate -s 512M /tmp/sparse"
EMIT = "cat /tmp/blob; echo done >&2"


def sink_dirs() -> List[str]:
    return [d for d in os.listdir(tempfile.gettempdir()) if d.startswith("microvm-sink-")]



# How many `yes` processes the guest still runs after a stream of it was
# left: a kill is answered once the signal is sent, so the guest is given up
# to 5 s to see it gone (bounded; one left running prints 1).
YES_LEFT = "for i in $(seq 50); do pgrep -x yes >/dev/null || break; sleep 0.1; done; pgrep -c yes || true"

class SinkTest(unittest.TestCase):
    def setUp(self) -> None:
        require_engine()
        if not _sink.supported():
            self.skipTest("no FIFOs on this platform")

    def test_bytes_exact_break_kills_refusal_prompt(self) -> None:
        # Catches: output turned into text on the way (the digest of data
        # differs), frames out of order or lost (offsets not contiguous), a
        # stream whose exit is missing, a break that leaves the command
        # running, a refused request that hangs waiting for a sink nobody
        # opens, and FIFO directories left behind.
        before = sink_dirs()
        with Sandbox.create(local=True) as sb:
            self.assertEqual(sb.run(MAKE).exit_code, 0)
            want = sb.run("cat /tmp/blob.sum").stdout.strip()
            s = sb.stream(EMIT)
            h, at, lossy, err = hashlib.sha256(), 0, False, b""
            for item in s:
                if isinstance(item, OutputChunk):
                    self.assertEqual(item.offset, at)
                    self.assertEqual(item.size, len(item.data))
                    at += item.size
                    lossy = lossy or item.lossy
                    if item.stream == "stdout":
                        h.update(item.data)
                    else:
                        err += item.data
            self.assertEqual(h.hexdigest(), want)
            self.assertTrue(lossy)
            self.assertEqual(err, b"done\n")
            self.assertIsInstance(s.exit, Exit)
            assert s.exit is not None and s.summary is not None
            self.assertEqual((s.exit.exit_code, s.exit.offset, s.summary["bytes"]), (0, at, at))

            for _ in sb.stream("yes"):
                break
            self.assertEqual(sb.run(YES_LEFT).stdout.strip(), "0")

            with self.assertRaises(InvalidArgError):
                list(sb.stream("true", timeout_sec=-1))

            p = sb.start(EMIT)
            h2 = hashlib.sha256()
            for item in p.stream():
                if isinstance(item, OutputChunk) and item.stream == "stdout":
                    h2.update(item.data)
            self.assertEqual(h2.hexdigest(), want)
        self.assertEqual(sink_dirs(), before)

    def test_read_bytes_through_the_sink(self) -> None:
        # Catches: a read through the FIFO that loses or adds bytes (the
        # digest differs), one that hangs on a refused path instead of
        # raising, a timeout that does not end the read (or leaves the
        # sandbox unusable), and an asyncio read whose cancel leaves it
        # running.
        with Sandbox.create(local=True) as sb:
            self.assertEqual(sb.run(MAKE).exit_code, 0)
            want = sb.run("cat /tmp/blob.sum").stdout.strip()
            self.assertEqual(hashlib.sha256(sb.files.read_bytes("/tmp/blob")).hexdigest(), want)
            self.assertEqual(sb.files.read_bytes("/tmp/blob.sum"), (want + "\n").encode())
            with self.assertRaises(MicrovmError):
                sb.files.read_bytes("/no/such/file")
            with self.assertRaises(MicrovmTimeoutError):
                sb.files.read_bytes("/tmp/sparse", timeout=0.02)  # 512 MiB: far longer than 20 ms anywhere
            self.assertEqual(sb.run("echo alive").stdout, "alive\n")

        async def flow() -> None:
            async with await AsyncSandbox.create(local=True) as sb:
                self.assertEqual((await sb.run(MAKE)).exit_code, 0)
                want = (await sb.run("cat /tmp/blob.sum")).stdout.strip()
                self.assertEqual(hashlib.sha256(await sb.files.read_bytes("/tmp/blob")).hexdigest(), want)
                task = asyncio.ensure_future(sb.files.read_bytes("/tmp/sparse"))
                await asyncio.sleep(0.02)  # 512 MiB takes far longer than 20 ms anywhere
                task.cancel()
                with self.assertRaises(asyncio.CancelledError):
                    await task
                self.assertEqual((await sb.run("echo alive")).stdout, "alive\n")
        asyncio.run(flow())

    def test_async(self) -> None:
        # Catches: the asyncio reader losing or reordering frames, and a
        # cancelled task whose command keeps running.
        async def flow() -> None:
            async with await AsyncSandbox.create(local=True) as sb:
                self.assertEqual((await sb.run(MAKE)).exit_code, 0)
                want = (await sb.run("cat /tmp/blob.sum")).stdout.strip()
                h, at = hashlib.sha256(), 0
                s = sb.stream(EMIT)
                async for item in s:
                    if isinstance(item, OutputChunk):
                        self.assertEqual(item.offset, at)
                        at += item.size
                        if item.stream == "stdout":
                            h.update(item.data)
                self.assertEqual(h.hexdigest(), want)
                self.assertIsNotNone(s.exit)

                async def follow_yes() -> None:
                    async for _ in sb.stream("yes"):
                        pass
                task = asyncio.ensure_future(follow_yes())
                await asyncio.sleep(0.5)
                task.cancel()
                with self.assertRaises(asyncio.CancelledError):
                    await task
                self.assertEqual((await sb.run(YES_LEFT)).stdout.strip(), "0")
        asyncio.run(flow())

    def test_write_through_a_socket(self) -> None:
        # Catches: a write through the engine's socket that loses, reorders
        # or transcodes bytes (the digest differs; not UTF-8 on purpose),
        # drops the mode or the parents, hangs on an empty file or a refused
        # path instead of raising, a timeout that does not end the write (or
        # leaves the sandbox unusable), an asyncio write that does the same,
        # and socket directories left behind.
        before = sink_dirs()
        blob = os.urandom(3 << 20)
        want = hashlib.sha256(blob).hexdigest()
        with Sandbox.create(local=True) as sb:
            sb.files.write("/tmp/w/a/blob", blob, mode="0640")
            self.assertEqual(sb.run("sha256sum /tmp/w/a/blob | cut -c1-64; stat -c %a /tmp/w/a/blob").stdout, want + "\n640\n")
            sb.files.write("/tmp/w/empty", b"")
            self.assertEqual(sb.run("stat -c %s /tmp/w/empty").stdout, "0\n")
            with self.assertRaises(MicrovmError):
                sb.files.write("/proc/none/x", b"a")
            with self.assertRaises(MicrovmTimeoutError):
                sb.files.write("/tmp/w/big", bytes(512 << 20), timeout=0.02)  # 512 MiB: far longer than 20 ms anywhere
            self.assertEqual(sb.run("echo alive").stdout, "alive\n")

        async def flow() -> None:
            async with await AsyncSandbox.create(local=True) as sb:
                await sb.files.write("/tmp/w/blob", blob)
                self.assertEqual((await sb.run("sha256sum /tmp/w/blob | cut -c1-64")).stdout.strip(), want)
                task = asyncio.ensure_future(sb.files.write("/tmp/w/big", bytes(512 << 20)))
                await asyncio.sleep(0.02)
                task.cancel()
                with self.assertRaises(asyncio.CancelledError):
                    await task
                self.assertEqual((await sb.run("echo alive")).stdout, "alive\n")
        asyncio.run(flow())
        self.assertEqual(sink_dirs(), before)


if __name__ == "__main__":
    unittest.main()
