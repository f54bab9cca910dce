// Volumes through the real `microvm engine` (issue 47) against a running
// `microvm emulator`: its S3 slice outlives each engine, so a volume saved
// by one sandbox's terminate is there for the next create.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";

import { CheckpointRefusedError, Sandbox } from "../src/sandbox.js";
import { startEmulator } from "./daemon.js";

const missing = ["MICROVM_BIN", "MICROVM_AGENTD"].filter((n) => !process.env[n]);
const skip = missing.length > 0 && !process.env.MICROVMS_REQUIRE_ENGINE ? `needs ${missing.join(" and ")}` : false;

describe("volumes", { skip }, () => {
  let url = "";
  let stop: () => Promise<void> = async () => {};

  before(async () => {
    ({ url, stop } = await startEmulator("vol"));
  });

  after(() => stop());

  // Catches: a create that ignores volumes (the file is missing after
  // relaunch), a terminate that releases without saving, a second live
  // attach let through or refused without the holder's id, a sync that
  // saves nothing, ls missing the holder, rm of a held volume let through.
  test("a volume survives terminate and relaunch; a second holder is refused", async () => {
    const base = await Sandbox.build({ controlEndpoint: url });
    try {
      const image = (base as unknown as { info: { imageIdentifier: string } }).info.imageIdentifier;
      assert.ok(image);
      const first = await Sandbox.create({ image, controlEndpoint: url, volumes: { tsvol: "/data" } });
      try {
        assert.equal((await first.run("echo kept > /data/f.txt")).exitCode, 0);
        await assert.rejects(Sandbox.create({ image, controlEndpoint: url, volumes: { tsvol: "/data" } }),
          (e: unknown) => e instanceof CheckpointRefusedError && e.message.includes(first.microvmId));
        assert.equal((await first.volumes.sync()).length, 1);
        const held = (await first.volumes.list()).find((v) => v.name === "tsvol");
        assert.equal(held?.holder, first.microvmId);
        await assert.rejects(base.volumes.remove("tsvol"), (e: unknown) => e instanceof CheckpointRefusedError);
        assert.equal((await first.run("echo later >> /data/f.txt")).exitCode, 0);
        await first.terminate();
      } finally {
        await first.close();
      }
      const second = await Sandbox.create({ image, controlEndpoint: url, volumes: { tsvol: "/data" } });
      try {
        // The terminate's last generation, not only the sync's.
        assert.equal((await second.run("cat /data/f.txt")).stdout, "kept\nlater\n");
        await second.terminate();
      } finally {
        await second.close();
      }
      assert.ok((await base.volumes.remove("tsvol")).length >= 1);
      assert.ok(!(await base.volumes.list()).some((v) => v.name === "tsvol"));
    } finally {
      await base.close();
    }
  });
});
