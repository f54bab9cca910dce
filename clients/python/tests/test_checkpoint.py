"""Checkpoints through the real microvm engine (issue 47): checkpoint,
fork, list and remove, sync and async, in local mode. The emulator's guests
start in /, which a checkpoint refuses as a default, so paths are named."""
import asyncio
import unittest

from microvms import AsyncSandbox, InvalidArgError, Sandbox

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
            fleet = sb.fork(2, command=PROBE, paths=[DIR], name="py-fork")
            self.assertTrue(fleet.ok, [(r.error_code, r.stderr) for r in fleet.runs])
            self.assertEqual(len(fleet.runs), 2)
            for r in fleet.runs:
                self.assertTrue(r.stdout.startswith("one\n750\n"), r.stdout)
                self.assertNotIn("mine-", r.stdout)
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


if __name__ == "__main__":
    unittest.main()
