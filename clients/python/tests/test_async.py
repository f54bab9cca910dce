"""The asyncio API against the real microvm engine in local mode (issue 45's
harness): four tasks each create a sandbox, upload a small project, run its
tests with a timeout while streaming, download a result file and tear down;
a fifth task's infinite loop is cancelled from asyncio and is gone from the
guest. Nothing is stubbed."""
import asyncio
import os
import tempfile
import unittest
from typing import List, Tuple

from microvms import AsyncPool, AsyncSandbox, FsEvent, run_many_async, Exit, InvalidArgError, OutputChunk, UnexpectedError

from .engine_env import alive, guest_inits_of, require_engine

PROJECT = {
    "calc.py": "def add(a, b):\n    return a + b\n",
    "test_calc.py": (
        "import unittest\nfrom calc import add\n\n"
        "class T(unittest.TestCase):\n"
        "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n"
    ),
}


async def one_run(n: int, work: str) -> Tuple[int, str, List[str]]:
    src = os.path.join(work, "src%d" % n)
    out = os.path.join(work, "out%d" % n)
    os.makedirs(src)
    for name, body in PROJECT.items():
        with open(os.path.join(src, name), "w") as f:
            f.write(body)
    async with await AsyncSandbox.create(local=True) as sb:
        await sb.files.upload_dir(src, "/work/project")
        # The guest may lack python3: then the project's "tests" are a shell check.
        script = ("cd /work/project && if command -v python3 >/dev/null; then "
                  "python3 -m unittest -v test_calc 2>&1; else grep -q 'return a + b' calc.py && echo 'ok (sh)'; fi; "
                  "rc=$?; echo \"task %d rc=$rc\" > /work/project/result.txt; exit $rc" % n)
        seen: List[str] = []
        stream = sb.stream(script, timeout_sec=120)
        exit_code = None
        async for item in stream:
            if isinstance(item, OutputChunk):
                seen.append(item.text)
            elif isinstance(item, Exit):
                exit_code = item.exit_code
        assert exit_code is not None
        await sb.files.download_dir("/work/project", out)
        with open(os.path.join(out, "result.txt")) as f:
            result = f.read()
        report = await sb.terminate()
        assert not report.leaked, report
    return exit_code, result, seen


class AsyncHarnessTest(unittest.TestCase):
    def setUp(self) -> None:
        require_engine()

    def test_four_runs_and_a_cancelled_loop(self) -> None:
        async def cancelled_loop() -> Tuple[bool, int, str]:
            async with await AsyncSandbox.create(local=True) as sb:
                # The loop writes its pid, then spins forever.
                task = asyncio.ensure_future(sb.run("echo $$ > /tmp/loop.pid; while :; do :; done", exec_id="py-loop-1"))
                pid = ""
                for _ in range(200):
                    if await sb.files.exists("/tmp/loop.pid"):
                        pid = (await sb.files.read("/tmp/loop.pid")).strip()
                        if pid:
                            break
                    await asyncio.sleep(0.05)
                self.assertTrue(pid, "the loop never started")
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
                # Gone from the guest: the record left running and the pid is
                # no process any more. Bounded: the daemon's grace is seconds.
                gone = False
                for _ in range(300):
                    rec = await sb.process("py-loop-1").poll()
                    probe = await sb.run("kill -0 %s 2>/dev/null && echo alive || echo gone" % pid)
                    if not rec.running and probe.stdout.strip() == "gone":
                        gone = True
                        break
                    await asyncio.sleep(0.1)
                return gone, sb.engine_pid, pid

        async def main() -> Tuple[List[Tuple[int, str, List[str]]], Tuple[bool, int, str]]:
            with tempfile.TemporaryDirectory() as work:
                runs = asyncio.gather(*(one_run(n, work) for n in range(4)))
                loop = cancelled_loop()
                got = await asyncio.gather(runs, loop)
                return got[0], got[1]

        runs, (gone, engine_pid, pid) = asyncio.run(main())
        self.assertEqual(len(runs), 4)
        for n, (code, result, seen) in enumerate(runs):
            self.assertEqual(code, 0, "".join(seen))
            self.assertEqual(result, "task %d rc=0\n" % n)
            self.assertTrue("".join(seen).strip(), "the stream carried the test output")
        # Catches: a cancel that only stops waiting and leaves the loop spinning.
        self.assertTrue(gone, "the cancelled command %s still runs in the guest" % pid)
        self.assertEqual(guest_inits_of(engine_pid), [], "the engine's guests outlived it")
        self.assertFalse(alive(engine_pid))

    def test_timeout_is_a_result_and_handles_work(self) -> None:
        async def main() -> None:
            async with await AsyncSandbox.create(local=True) as sb:
                r = await sb.run("sleep 30", timeout_sec=0.5)
                # Catches: a timeout reported as a bare signal 15 with nothing saying so.
                self.assertTrue(r.timed_out)
                self.assertEqual(r.timeout_limit, "timeout_sec")
                self.assertIsNone(r.exit_code)
                ok = await sb.run("echo fine", timeout_sec=30)
                self.assertFalse(ok.timed_out)

                p = await sb.start("cat", stdin=True)
                await p.write_stdin("hello\n")
                await p.close_stdin()
                done = await p.wait(timeout=30)
                self.assertEqual((done.exit_code, done.stdout), (0, "hello\n"))

                slow = await sb.start("sleep 30")
                w = await slow.wait(timeout=0.2)
                self.assertTrue(w.timed_out)
                self.assertEqual(w.timeout_limit, "wait")
                self.assertTrue(w.running)
                self.assertTrue(await slow.kill())

                await sb.files.mkdir("/tmp/aw")
                watch = sb.files.watch("/tmp/aw")
                await sb.start("sleep 0.3; touch /tmp/aw/f")
                first = await watch.__anext__()
                await watch.aclose()
                self.assertIsInstance(first, FsEvent)
                self.assertTrue((await sb.health())["bootstrapped"])
                # max_bytes, as Files: the engine bounds a read its stat
                # could not (a symlink's size is the link's), and lines()
                # exists on asyncio and puts a split character together.
                await sb.run("head -c 100 /dev/zero > /tmp/h; ln -sf /tmp/h /tmp/hl")
                self.assertEqual(len(await sb.files.read_bytes("/tmp/hl", max_bytes=100)), 100)
                with self.assertRaises(InvalidArgError):
                    await sb.files.read_bytes("/tmp/hl", max_bytes=99)
                got = [line async for line in sb.stream("printf '\\303'; sleep 0.4; printf '\\251\\n'").lines()]
                self.assertEqual(got, ["\u00e9"])
                # Catches: the async hold answering without pinging.
                held = await sb.hold_awake(0.6, every_sec=0.2)
                self.assertGreaterEqual(held.pings, 2)
                self.assertEqual(sb.max_idle_seconds, 600)

            # Bad input raises the Go library's refusal, exit code and finding included.
            with self.assertRaises(InvalidArgError) as ctx:
                await AsyncSandbox.create(local=True, max_duration_sec=28801)
            self.assertEqual(ctx.exception.exit_code, 2)
            self.assertTrue(ctx.exception.finding)
            with self.assertRaises(InvalidArgError):
                await AsyncSandbox.create(local=True, max_idle_sec=10)

        asyncio.run(main())

    def test_async_pool(self) -> None:
        async def main() -> None:
            async with await AsyncPool.open(size=2, local=True) as pool:
                await pool.wait_ready(timeout=120)

                async def tenant(n: int) -> str:
                    async with pool.acquire() as sb:
                        return (await sb.run("echo tenant %d" % n)).stdout

                outs = await asyncio.gather(tenant(0), tenant(1))
                self.assertEqual(outs, ["tenant 0\n", "tenant 1\n"])
                self.assertEqual((await pool.close()).served, 2)

        asyncio.run(main())

    def test_async_fleet(self) -> None:
        # Catches: run_many_async blocking the loop or losing the fleet's outcome.
        async def main() -> None:
            ticks = 0

            async def ticker() -> None:
                nonlocal ticks
                while True:
                    ticks += 1
                    await asyncio.sleep(0.01)

            t = asyncio.ensure_future(ticker())
            fleet = await run_many_async("echo fleet", count=2, parallel=2, local=True)
            t.cancel()
            self.assertEqual([r.exit_code for r in fleet.runs], [0, 0])
            self.assertGreater(ticks, 1, "the event loop ran while the fleet did")

        asyncio.run(main())

    def test_dead_engine_is_an_error_naming_it(self) -> None:
        async def main() -> None:
            sb = await AsyncSandbox.create(local=True)
            try:
                os.kill(sb.engine_pid, 9)
                # Catches: a call that waits forever on an engine that is gone.
                with self.assertRaises(UnexpectedError) as ctx:
                    await asyncio.wait_for(sb.run("echo hi"), 60)
                self.assertIn("pid %d" % sb.engine_pid, str(ctx.exception))
            finally:
                await sb.close()

        asyncio.run(main())


if __name__ == "__main__":
    unittest.main()
