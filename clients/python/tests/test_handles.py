"""The sync Sandbox's handle, fs, probe and launch ops against the real
microvm engine in local mode. Nothing is stubbed; every wait is bounded."""
import os
import signal
import time
import unittest
from typing import Callable, List

from microvms import BuildProgress, FsEvent, Pool, InvalidArgError, OutputChunk, ProtocolError, Sandbox, TimeoutError, UnexpectedError

from .engine_env import require_engine


def until(pred: Callable[[], bool], tries: int = 300, pause: float = 0.05) -> bool:
    for _ in range(tries):
        if pred():
            return True
        time.sleep(pause)
    return False


class HandlesTest(unittest.TestCase):
    sb: Sandbox

    @classmethod
    def setUpClass(cls) -> None:
        require_engine()
        cls.sb = Sandbox.create(local=True, launch_env={"GREETING": "hello from launch"})

    @classmethod
    def tearDownClass(cls) -> None:
        cls.sb.close()

    def test_launch_env_reaches_every_command(self) -> None:
        # Catches: create dropping launch_env on the way to the library.
        self.assertEqual(self.sb.run("echo $GREETING").stdout, "hello from launch\n")

    def test_background_process_handle(self) -> None:
        p = self.sb.start("echo started; sleep 30; echo never")
        self.assertTrue(p.poll().running)
        # Reattach by id, as another process would.
        again = self.sb.process(p.exec_id)
        first = next(i for i in again.stream(0) if isinstance(i, OutputChunk))
        self.assertEqual(first.text, "started\n")
        self.assertIn(p.exec_id, [x["exec_id"] for x in self.sb.processes()])
        self.assertTrue(p.signal("TERM"))
        done = p.wait(timeout=30)
        self.assertFalse(done.running)
        self.assertEqual(done.signal, 15)
        self.assertFalse(done.timed_out, "a signal we sent is not a timeout")
        self.assertNotIn("never", done.stdout)

    def test_stdin_and_pty(self) -> None:
        p = self.sb.start(["cat"], stdin=True)
        self.assertEqual(p.write_stdin(b"abc\n"), 4)
        p.close_stdin()
        self.assertEqual(p.wait(timeout=30).stdout, "abc\n")
        t = self.sb.start("stty size; read x; stty size; echo got $x", pty=(30, 100))
        follow = t.stream(0)
        first = ""
        for item in follow:
            if isinstance(item, OutputChunk):
                first += item.text
                if "\n" in first:
                    break
        follow.close()  # leaving a follow stops reading; the command runs on
        self.assertEqual(first.split()[:2], ["30", "100"])
        t.resize(40, 120)
        t.write_stdin("yes\n")
        out = t.wait(timeout=30).stdout
        self.assertIn("40 120", out)
        self.assertIn("got yes", out)

    def test_user_and_group(self) -> None:
        r = self.sb.run("id -u; id -g", user=65534, group=65534)
        self.assertEqual(r.stdout.split(), ["65534", "65534"])

    def test_start_takes_limits(self) -> None:
        # Catches: start without limits, or an engine start op that drops
        # them (the command would then run unlimited): this guest has no
        # delegated cgroup, so limits that reach it are refused, as run's.
        with self.assertRaises(ProtocolError) as refused:
            self.sb.start("true", limits={"memory_bytes": 64 << 20})
        self.assertIn("limits", refused.exception.message)

    def test_timeouts_say_so(self) -> None:
        r = self.sb.run("sleep 30", timeout_sec=0.3)
        self.assertTrue(r.timed_out)
        self.assertEqual(r.timeout_limit, "timeout_sec")
        cut = self.sb.run("sleep 30", timeout=0.3, exec_id="py-cut-1")
        # Catches: a sync call with no bound, or a bound that leaves the command running.
        self.assertEqual((cut.timed_out, cut.timeout_limit, cut.running), (True, "wait", False))
        p = self.sb.start("sleep 30")
        w = p.wait(timeout=0.2)
        self.assertEqual((w.timed_out, w.timeout_limit, w.running), (True, "wait", True))
        self.assertTrue(p.kill())

    def test_breaking_out_of_a_stream_kills_the_command(self) -> None:
        # Catches: the "breaking out of a stream leaves the command running".
        stream = self.sb.stream("echo go; sleep 30", exec_id="py-break-1")
        for item in stream:
            if isinstance(item, OutputChunk):
                break
        for _ in stream:
            pass
        self.assertTrue(until(lambda: not self.sb.process("py-break-1").poll().running))

    def test_stream_truncated_only_when_bytes_drop(self) -> None:
        # 9 MiB is past the daemon's 8 MiB record cap, but the stream delivers all of it.
        stream = self.sb.stream("head -c 9437184 /dev/zero")
        total = sum(i.size for i in stream if isinstance(i, OutputChunk))
        self.assertEqual(total, 9437184)
        assert stream.summary is not None
        self.assertFalse(stream.summary["truncated"], "every byte arrived, so nothing was truncated")

    def test_fs_ops(self) -> None:
        f = self.sb.files
        self.assertTrue(f.mkdir("/tmp/fsops/a"))
        self.assertFalse(f.mkdir("/tmp/fsops/a"))
        f.write("/tmp/fsops/a/x.txt", "x")
        st = f.stat("/tmp/fsops/a/x.txt")
        assert st is not None
        self.assertEqual((st.type, st.size), ("file", 1))
        self.assertIsNone(f.stat("/tmp/fsops/none"))
        self.assertFalse(f.exists("/tmp/fsops/none"))
        f.move("/tmp/fsops/a/x.txt", "/tmp/fsops/y.txt")
        self.assertTrue(f.exists("/tmp/fsops/y.txt"))
        self.assertEqual(f.read("/tmp/fsops/y.txt"), "x")
        self.assertEqual(f.remove("/tmp/fsops", recursive=True), 3)
        self.assertFalse(f.exists("/tmp/fsops"))

    def test_large_file_round_trip(self) -> None:
        data = os.urandom(3 << 20)
        self.sb.files.write("/tmp/big.bin", data)
        self.assertEqual(self.sb.files.read_bytes("/tmp/big.bin"), data)

    def test_watch(self) -> None:
        self.sb.files.mkdir("/tmp/watched")
        events = self.sb.files.watch("/tmp/watched")
        self.sb.start("sleep 0.3; touch /tmp/watched/new")
        first = next(events)
        events.close()
        assert isinstance(first, FsEvent)
        self.assertTrue(first.path.endswith("new"))

    def test_health_and_metrics(self) -> None:
        self.assertTrue(self.sb.health()["bootstrapped"])
        self.assertIn("memory", self.sb.metrics())

    def test_idle_policy_is_visible_and_hold_awake_pings(self) -> None:
        # Catches: info dropping the idle policy (a package user could not see
        # when the VM idles out), and keepalive answering without pinging.
        self.assertEqual(self.sb.max_idle_seconds, 600, "run's default maxIdleSec")
        self.assertIsNotNone(self.sb.ends_at)
        held = self.sb.hold_awake(1.0, every_sec=0.2)
        self.assertEqual(held.microvm_id, self.sb.microvm_id)
        self.assertGreaterEqual(held.pings, 3)
        self.assertGreaterEqual(held.held_seconds, 0.9)
        with self.assertRaises(InvalidArgError):
            self.sb.hold_awake(0)

    def test_blocking_call_timeout(self) -> None:
        # Catches: a sync call with no way to stop waiting.
        p = self.sb.start("sleep 30")
        with self.assertRaises(TimeoutError):
            self.sb._engine._op_wait({"execId": p.exec_id}, 0.2)
        p.kill()


class BuildTest(unittest.TestCase):
    def setUp(self) -> None:
        require_engine()

    def test_build_at_a_size_class_with_progress(self) -> None:
        seen: List[BuildProgress] = []
        with Sandbox.build(local=True, memory_mib=4096, on_progress=seen.append) as sb:
            # Catches: progress never reaching the caller, or a build whose
            # image is not the one launched (the size class is the image's).
            self.assertTrue(seen, "no build progress arrived")
            self.assertEqual(seen[0].step, 1)
            self.assertEqual(sb.run("echo built").stdout, "built\n")
            self.assertIn("4096", sb.cost().size)
            report = sb.terminate(delete_image=True)
            self.assertIsNotNone(report.image_identifier)
            self.assertFalse(report.leaked, report)


class PoolTest(unittest.TestCase):
    def setUp(self) -> None:
        require_engine()

    def test_acquire_release_close(self) -> None:
        with Pool.open(size=2, local=True) as pool:
            st = pool.wait_ready(timeout=120)
            self.assertEqual((st.size, st.ready), (2, 2))
            with pool.acquire() as sb:
                self.assertEqual(sb.run("echo member").stdout, "member\n")
                first = sb.microvm_id
            # Catches: a member put back for the next tenant.
            with pool.acquire() as sb2:
                self.assertNotEqual(sb2.microvm_id, first)
            self.assertTrue(pool.cost().items, "the pool's cost has its lines")
            status = pool.close()
            self.assertEqual(status.served, 2)
            self.assertEqual(status.leaked, [])


class BadInputTest(unittest.TestCase):
    def setUp(self) -> None:
        require_engine()

    def test_refusals_carry_exit_code_and_finding(self) -> None:
        with self.assertRaises(InvalidArgError) as ctx:
            Sandbox.create(local=True, max_duration_sec=28801)
        self.assertEqual(ctx.exception.exit_code, 2)
        self.assertTrue(ctx.exception.finding)

    def test_a_stopped_engine_is_a_timeout_not_a_hang(self) -> None:
        sb = Sandbox.create(local=True)
        try:
            os.kill(sb.engine_pid, signal.SIGSTOP)
            try:
                # Catches: a sync call (or its cancel) that waits on a hung engine forever.
                with self.assertRaises(TimeoutError) as ctx:
                    sb.files.exists("/", timeout=0.5)
                self.assertEqual(ctx.exception.exit_code, 10)
            finally:
                os.kill(sb.engine_pid, signal.SIGCONT)
            self.assertTrue(sb.files.exists("/"))
        finally:
            sb.close()

    def test_dead_engine_is_named(self) -> None:
        sb = Sandbox.create(local=True)
        try:
            os.kill(sb.engine_pid, 9)
            with self.assertRaises(UnexpectedError) as ctx:
                sb.run("echo hi")
            self.assertIn("pid %d" % sb.engine_pid, str(ctx.exception))
        finally:
            sb.close()


if __name__ == "__main__":
    unittest.main()
