"""Checkpoints through the real microvm engine (issue 47): checkpoint,
fork, list and remove, sync and async, in local mode. The emulator's guests
start in /, which a checkpoint refuses as a default, so paths are named."""
import asyncio
import unittest

from microvms import AsyncSandbox, InvalidArgError, Sandbox
from microvms.errors import MicrovmError, PreconditionError

from .engine_env import require_engine

DIR = "/tmp/ckpt-proj"
SETUP = f"mkdir -p {DIR}/src && printf 'one\\n' > {DIR}/src/a.txt && ln -sf src/a.txt {DIR}/link && chmod 0750 {DIR}/src"
PROBE = f"cat {DIR}/link; stat -c %a {DIR}/src; ls {DIR}; touch {DIR}/mine-$(hostname)"


class CheckpointTest(unittest.TestCase):
    def setUp(self) -> None:
        require_engine()

    def test_checkpoint_fork_list_remove(self) -> None:
        # Catches: a checkpoint that saves nothing, a fork whose copies do
        # not see the files (or share one copy: each writes a marker the
        # other must not see), a default of "/" saved silently, ls that
        # misses the checkpoint, rm that leaves it listed.
        with Sandbox.create(local=True) as sb:
            self.assertEqual(sb.run(SETUP).exit_code, 0)
            with self.assertRaises(InvalidArgError) as refused:
                sb.checkpoint()
            self.assertIn("--path", str(refused.exception))
            m = sb.checkpoint(paths=[DIR], name="py-base", labels={"team": "a"})
            self.assertEqual(m["name"], "py-base")
            self.assertEqual(m["paths"], [DIR])
            self.assertEqual(m["labels"], [{"key": "team", "value": "a"}])
            self.assertTrue(m["writersPaused"])
            # Each copy gets the launch options the fork names (create's):
            # the wrong edit is a fork op that launches its copies with
            # none, as it did.
            fleet = sb.fork(2, command=PROBE + '; echo "who=$WHO"', paths=[DIR], name="py-fork",
                            launch_env={"WHO": "a copy"})
            self.assertTrue(fleet.ok, [(r.error_code, r.stderr) for r in fleet.runs])
            self.assertEqual(len(fleet.runs), 2)
            for r in fleet.runs:
                self.assertTrue(r.stdout.startswith("one\n750\n"), r.stdout)
                self.assertNotIn("mine-", r.stdout)
                self.assertIn("who=a copy\n", r.stdout)
            # Refused as create refuses it, before any copy launches.
            with self.assertRaises(InvalidArgError):
                sb.fork(1, command="true", paths=[DIR], network_allow=["example.com"], network_deny_all=True)
            with self.assertRaises(InvalidArgError):
                sb.fork(1, command="true", paths=[DIR], max_duration_sec=28801)
            self.assertEqual(fleet.leaked, [])
            names = [c["name"] for c in sb.checkpoints.list()]
            self.assertIn("py-base", names)
            self.assertIn("py-fork", names)
            self.assertGreaterEqual(len(sb.checkpoints.remove("py-base")), 1)
            self.assertNotIn("py-base", [c["name"] for c in sb.checkpoints.list()])
            # The original kept running, untouched by its forks.
            self.assertEqual(sb.run(f"ls {DIR}").stdout, "link\nsrc\n")

    def test_async(self) -> None:
        # The async surface mirrors the sync one.
        async def flow() -> None:
            async with await AsyncSandbox.create(local=True) as sb:
                self.assertEqual((await sb.run(SETUP)).exit_code, 0)
                m = await sb.checkpoint(paths=[DIR], name="py-async")
                self.assertEqual(m["paths"], [DIR])
                fleet = await sb.fork(2, command=PROBE, paths=[DIR])
                self.assertTrue(fleet.ok, [(r.error_code, r.stderr) for r in fleet.runs])
                for r in fleet.runs:
                    self.assertTrue(r.stdout.startswith("one\n750\n"), r.stdout)
                self.assertIn("py-async", [c["name"] for c in await sb.checkpoints.list()])
                self.assertGreaterEqual(len(await sb.checkpoints.remove("py-async")), 1)
        asyncio.run(flow())

    def test_bake_without_a_base_is_refused(self) -> None:
        # Catches: a bake on an emulator with no base image for FROM handed
        # back as an image (its launches would lack the files), sync and
        # async alike, and a refusal that does not say what it needs.
        with Sandbox.build(local=True) as sb:
            self.assertEqual(sb.run(SETUP).exit_code, 0)
            sb.checkpoint(paths=[DIR], name="py-bake")
            with self.assertRaises(PreconditionError) as refused:
                sb.checkpoints.bake("py-bake", name="py-baked")
            self.assertIn("--base-image", str(refused.exception))
            self.assertEqual(refused.exception.exit_code, 12)

        async def flow() -> None:
            async with await AsyncSandbox.build(local=True) as sb:
                self.assertEqual((await sb.run(SETUP)).exit_code, 0)
                await sb.checkpoint(paths=[DIR], name="py-abake")
                with self.assertRaises(PreconditionError):
                    await sb.checkpoints.bake("py-abake")
        asyncio.run(flow())


if __name__ == "__main__":
    unittest.main()


class RestoreTest(unittest.TestCase):
    """Sandbox.restore against a running `microvm emulator`, whose S3 slice
    outlives the engine that took the checkpoint."""

    def setUp(self) -> None:
        require_engine()
        import os
        import subprocess
        import tempfile
        env = dict(os.environ, MICROVM_STATE_DIR=tempfile.mkdtemp(), MICROVM_ARTIFACT_DIR=tempfile.mkdtemp())
        self.emu = subprocess.Popen([os.environ["MICROVM_BIN"], "emulator", "--listen", "127.0.0.1:0", "--json"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        self.addCleanup(self._stop)
        assert self.emu.stderr is not None
        self.url = ""
        for _ in range(200):
            line = self.emu.stderr.readline()
            if " at http://" in line:
                self.url = line[line.index(" at http://") + 4:].strip()
                break
        self.assertTrue(self.url, "microvm emulator never said where it serves")
        os.environ["AWS_ENDPOINT_URL"] = self.url
        self.addCleanup(os.environ.pop, "AWS_ENDPOINT_URL", None)

    def _stop(self) -> None:
        import signal
        self.emu.send_signal(signal.SIGINT)
        self.emu.wait(60)
        if self.emu.stderr is not None:
            self.emu.stderr.close()

    def test_restore_lays_the_files_and_refuses_a_missing_checkpoint(self) -> None:
        # Catches: a restore that launches without the files, one from
        # another image, and a missing checkpoint answered with a launch.
        with Sandbox.build(control_endpoint=self.url) as sb:
            self.assertEqual(sb.run(SETUP).exit_code, 0)
            m = sb.checkpoint(paths=[DIR], name="py-restore")
            with Sandbox.restore("py-restore", control_endpoint=self.url, launch_env={"WHO": "restored"},
                                 max_idle_sec=900) as copy:
                self.assertNotEqual(copy.microvm_id, sb.microvm_id)
                self.assertTrue(copy.run(PROBE).stdout.startswith("one\n750\n"))
                # create's launch options reach a restore too.
                self.assertEqual(copy.run('echo "$WHO"').stdout, "restored\n")
                self.assertEqual(copy.max_idle_seconds, 900)
            self.assertEqual(m["name"], "py-restore")
            with self.assertRaises(MicrovmError):
                Sandbox.restore("no-such-checkpoint", control_endpoint=self.url)
