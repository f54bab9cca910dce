"""Volumes through the real microvm engine (issue 47), sync and async,
against a running `microvm emulator`: its S3 slice outlives each engine, so
a volume saved by one sandbox's terminate is there for the next create."""
import asyncio
import unittest

from microvms import AsyncSandbox, CheckpointRefusedError, Sandbox

from . import test_checkpoint as tc
from .engine_env import require_engine


class VolumeTest(unittest.TestCase):
    # The emulator RestoreTest starts (and stops), shared rather than copied.
    setUp = tc.RestoreTest.setUp
    _stop = tc.RestoreTest._stop

    def image(self, base: Sandbox) -> str:
        arn = base._info["imageIdentifier"]
        self.assertTrue(arn)
        assert arn is not None
        return arn

    def test_volume_survives_terminate_and_refuses_a_second_holder(self) -> None:
        # Catches: a create that ignores volumes (the file is missing after
        # relaunch), a terminate that releases without saving, a second
        # live attach let through (or refused without the holder's id), a
        # sync that saves nothing, ls that misses the holder, rm of a held
        # volume let through.
        require_engine()
        with Sandbox.build(control_endpoint=self.url) as base:
            image = self.image(base)
            with Sandbox.create(image=image, control_endpoint=self.url, volumes={"pyvol": "/data"}) as first:
                self.assertEqual(first.run("ls -A /data").stdout, "")
                self.assertEqual(first.run("echo kept > /data/f.txt").exit_code, 0)
                with self.assertRaises(CheckpointRefusedError) as refused:
                    Sandbox.create(image=image, control_endpoint=self.url, volumes={"pyvol": "/data"})
                self.assertIn(first.microvm_id, str(refused.exception))
                saved = first.volumes.sync()
                self.assertEqual(len(saved), 1)
                vols = {v["name"]: v for v in first.volumes.list()}
                self.assertEqual(vols["pyvol"]["holder"], first.microvm_id)
                with self.assertRaises(CheckpointRefusedError):
                    base.volumes.remove("pyvol")
                self.assertEqual(first.run("echo later >> /data/f.txt").exit_code, 0)
                first.terminate()
            with Sandbox.create(image=image, control_endpoint=self.url, volumes={"pyvol": "/data"}) as second:
                # The terminate's last generation, not only the sync's.
                self.assertEqual(second.run("cat /data/f.txt").stdout, "kept\nlater\n")
            self.assertIsNone({v["name"]: v for v in base.volumes.list()}["pyvol"]["holder"])
            self.assertGreaterEqual(len(base.volumes.remove("pyvol")), 1)
            self.assertNotIn("pyvol", [v["name"] for v in base.volumes.list()])

    def test_async(self) -> None:
        # The async surface mirrors the sync one.
        require_engine()

        async def flow(image: str) -> None:
            async with await AsyncSandbox.create(image=image, control_endpoint=self.url, volumes={"avol": "/data"}) as first:
                self.assertEqual((await first.run("echo async > /data/a.txt")).exit_code, 0)
                with self.assertRaises(CheckpointRefusedError) as refused:
                    await AsyncSandbox.create(image=image, control_endpoint=self.url, volumes={"avol": "/data"})
                self.assertIn(first.microvm_id, str(refused.exception))
                self.assertEqual(len(await first.volumes.sync()), 1)
                self.assertIn("avol", [v["name"] for v in await first.volumes.list()])
                await first.terminate()
            async with await AsyncSandbox.create(image=image, control_endpoint=self.url, volumes={"avol": "/data"}) as second:
                self.assertEqual((await second.run("cat /data/a.txt")).stdout, "async\n")
                await second.terminate()
                self.assertGreaterEqual(len(await second.volumes.remove("avol")), 1)

        with Sandbox.build(control_endpoint=self.url) as base:
            asyncio.run(flow(self.image(base)))


if __name__ == "__main__":
    unittest.main()
