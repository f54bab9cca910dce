"""One engine per process serves every sandbox (api/engine.yaml request
sandbox): sandboxes share its pid, run concurrently, end one by one, and
all fail naming it when it dies."""
import asyncio
import os
import subprocess
import sys
import threading
import time
import unittest
from typing import List, Optional
from unittest import mock

from microvms import AsyncSandbox, Sandbox, UnexpectedError
from .engine_env import alive, guest_inits_of, require_engine

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A command that waits (bounded, ~60 s) for /tmp/go, then says which ended it.
GATED = "for i in $(seq 1200); do [ -f /tmp/go ] && { echo released; exit 0; }; sleep 0.05; done; echo expired"


class SharedEngineTest(unittest.TestCase):
    def setUp(self) -> None:
        require_engine()

    def test_two_sandboxes_share_one_engine_and_run_at_once(self) -> None:
        a = Sandbox.create(local=True)
        b = Sandbox.create(local=True)
        try:
            # Catches: a create that still starts an engine per sandbox.
            self.assertEqual(a.engine_pid, b.engine_pid)
            self.assertEqual(len(guest_inits_of(a.engine_pid)), 2, "two guests under the one engine")
            out: List[str] = []
            t = threading.Thread(target=lambda: out.append(a.run(GATED, timeout=120).stdout))
            t.start()
            # A long op on a must not hold b's: b answers while a's command waits.
            # Catches: one lock across handles (b would wait for a's loop to expire).
            self.assertEqual(b.run("echo b").stdout, "b\n")
            self.assertTrue(t.is_alive(), "a's command finished before it was released")
            a.files.write("/tmp/go", "")
            t.join(120)
            self.assertEqual(out, ["released\n"])
        finally:
            a.close()
            b.close()

    def test_ending_one_leaves_the_other_working(self) -> None:
        a = Sandbox.create(local=True)
        b = Sandbox.create(local=True)
        try:
            pid = a.engine_pid
            guests_a = guest_inits_of(pid)
            a.terminate()
            a.close()
            # Catches: a release that ends the engine, or tears down every handle.
            self.assertTrue(alive(pid))
            self.assertEqual(b.run("echo still").stdout, "still\n")
            self.assertEqual(len(guest_inits_of(pid)), 1)
            # A released handle is gone, not a fresh empty sandbox.
            with self.assertRaises(Exception) as ctx:
                a.run("echo no")
            self.assertIn("released", str(ctx.exception))
            self.assertTrue(set(guests_a) - set(guest_inits_of(pid)), "a's guest outlived its close")
        finally:
            b.close()

    def test_a_killed_engine_fails_every_sandbox_naming_it(self) -> None:
        a = Sandbox.create(local=True)
        b = Sandbox.create(local=True)
        try:
            pid = a.engine_pid
            os.kill(pid, 9)
            for sb in (a, b):
                # Catches: a sandbox that hangs on a dead shared engine.
                with self.assertRaises(UnexpectedError) as ctx:
                    sb.run("echo hi", timeout=60)
                self.assertIn("pid %d" % pid, str(ctx.exception))
            # The next create starts a new engine.
            c = Sandbox.create(local=True)
            try:
                self.assertNotEqual(c.engine_pid, pid)
                self.assertEqual(c.run("echo c").stdout, "c\n")
            finally:
                c.close()
        finally:
            a.close()
            b.close()

    def test_a_changed_environment_gets_its_own_engine(self) -> None:
        # The engine reads its settings (endpoints, region, bucket) from the
        # environment it started with. Catches: a shared engine that ignores
        # an os.environ changed since (a test pointing S3 at an emulator
        # would reach AWS instead).
        a = Sandbox.create(local=True)
        try:
            with mock.patch.dict(os.environ, {"MICROVMS_SHARED_ENGINE_TEST": "1"}):
                b = Sandbox.create(local=True)
            try:
                self.assertNotEqual(a.engine_pid, b.engine_pid)
                self.assertEqual(b.run("echo b").stdout, "b\n")
            finally:
                b.close()
            # Its environment is gone and so is its last sandbox: it ends,
            # and a's engine still serves.
            self.assertFalse(alive(b.engine_pid))
            self.assertEqual(a.run("echo a").stdout, "a\n")
        finally:
            a.close()

    def test_a_killed_caller_takes_every_sandbox_down(self) -> None:
        # Catches: an engine whose end of stdin tears down only the default
        # sandbox (the handles' guests would outlive their caller).
        proc = subprocess.Popen([sys.executable, "-c", TWO_THEN_SLEEP], env=dict(os.environ, PYTHONPATH=HERE),
                                stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        pids = proc.stdout.readline().split()
        self.assertEqual(len(pids), 2)
        self.assertEqual(pids[0], pids[1])
        engine_pid = int(pids[0])
        guests = guest_inits_of(engine_pid)
        self.assertEqual(len(guests), 2)
        proc.kill()
        proc.wait()
        proc.stdout.close()
        for _ in range(600):  # bounded: up to a minute for the teardown
            if not alive(engine_pid) and not any(alive(p) for p in guests):
                break
            time.sleep(0.1)
        self.assertFalse(alive(engine_pid))
        self.assertEqual([p for p in guests if alive(p)], [])


class AsyncSharedEngineTest(unittest.TestCase):
    def setUp(self) -> None:
        require_engine()

    def test_one_engine_per_loop_concurrent_and_gone_with_the_loop(self) -> None:
        async def main() -> "tuple[int, int, List[str], List[int]]":
            a, b = await asyncio.gather(AsyncSandbox.create(local=True), AsyncSandbox.create(local=True))
            guests = guest_inits_of(a.engine_pid)
            gated = asyncio.ensure_future(a.run(GATED))
            # Catches: handles serialized in the engine (b would wait ~60 s
            # for a's loop to expire, and a would print expired).
            rb = await b.run("echo b")
            done_early = gated.done()
            await a.files.write("/tmp/go", "")
            ra = await gated
            await a.close()
            self.assertFalse(done_early)
            # b outlives a's release.
            self.assertEqual((await b.run("echo b2")).stdout, "b2\n")
            # b is left open: the loop's end must take it down.
            return a.engine_pid, b.engine_pid, [ra.stdout, rb.stdout], guests

        pa, pb, outs, guests = asyncio.run(main())
        self.assertEqual(pa, pb)
        self.assertEqual(outs, ["released\n", "b\n"])
        self.assertEqual(len(guests), 2)
        # Catches: a loop-shared engine left running after asyncio.run.
        self.assertFalse(alive(pa))
        self.assertEqual([p for p in guests if alive(p)], [])

    def test_a_killed_engine_fails_every_async_sandbox(self) -> None:
        async def main() -> Optional[str]:
            a = await AsyncSandbox.create(local=True)
            b = await AsyncSandbox.create(local=True)
            pid = a.engine_pid
            os.kill(pid, 9)
            for sb in (a, b):
                with self.assertRaises(UnexpectedError) as ctx:
                    await asyncio.wait_for(sb.run("echo hi"), 60)
                self.assertIn("pid %d" % pid, str(ctx.exception))
            c = await AsyncSandbox.create(local=True)
            self.assertNotEqual(c.engine_pid, pid)
            out = (await c.run("echo c")).stdout
            for sb in (a, b, c):
                await sb.close()
            return out

        self.assertEqual(asyncio.run(main()), "c\n")


TWO_THEN_SLEEP = """
import time
from microvms import Sandbox
a = Sandbox.create(local=True)
b = Sandbox.create(local=True)
print(a.engine_pid, b.engine_pid, flush=True)
time.sleep(600)
"""

if __name__ == "__main__":
    unittest.main()
