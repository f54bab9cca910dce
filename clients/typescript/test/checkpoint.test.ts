// Checkpoints through the real `microvm engine` in local mode (issue 47):
// checkpoint, fork, list, remove. The emulator's guests start in /, which
// a checkpoint refuses as a default, so paths are named.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";

import { CheckpointRefusedError, InvalidArgError, MicrovmError, PreconditionError, Sandbox } from "../src/sandbox.js";
import { startEmulator } from "./daemon.js";

const missing = ["MICROVM_BIN", "MICROVM_AGENTD"].filter((n) => !process.env[n]);
const skip = missing.length > 0 && !process.env.MICROVMS_REQUIRE_ENGINE ? `needs ${missing.join(" and ")}` : false;

const DIR = "/tmp/ckpt-ts";
const SETUP = `mkdir -p ${DIR}/src && printf 'one\\n' > ${DIR}/src/a.txt && ln -sf src/a.txt ${DIR}/link && chmod 0750 ${DIR}/src`;
const PROBE = `cat ${DIR}/link; stat -c %a ${DIR}/src; ls ${DIR}; touch ${DIR}/mine-$(hostname)`;

describe("checkpoints", { skip }, () => {
  // Catches: a checkpoint that saves nothing, copies that miss the files or
  // share one copy (each writes a marker the other must not see), a default
  // of "/" saved silently, ls missing the checkpoint, rm leaving it listed.
  test("checkpoint, fork, list, remove", async () => {
    const sb = await Sandbox.create({ local: true });
    try {
      assert.equal((await sb.run(SETUP)).exitCode, 0);
      await assert.rejects(sb.checkpoint(), (e: unknown) => e instanceof InvalidArgError && e.message.includes("--path"));
      const m = await sb.checkpoint({ paths: [DIR], name: "ts-base", labels: { team: "a" } });
      assert.deepEqual(m.paths, [DIR]);
      assert.deepEqual(m.labels, [{ key: "team", value: "a" }]);
      assert.equal(m.writersPaused, true);
      // Each copy gets the launch options the fork names (create's): the
      // wrong edit is a fork that launches its copies with none.
      const fleet = await sb.fork(2, { command: `${PROBE}; echo "who=$WHO"`, paths: [DIR], launchEnv: { WHO: "a copy" } });
      assert.equal(fleet.runs.length, 2);
      for (const r of fleet.runs) {
        assert.ok(r.ok, `${r.errorCode} ${r.stderr}`);
        assert.ok(r.stdout.startsWith("one\n750\n") && !r.stdout.includes("mine-"), r.stdout);
        assert.ok(r.stdout.includes("who=a copy\n"), r.stdout);
      }
      await assert.rejects(sb.fork(1, { command: "true", paths: [DIR], networkAllow: ["example.com"], networkDenyAll: true }), InvalidArgError);
      assert.deepEqual(fleet.leaked, []);
      assert.ok((await sb.checkpoints.list()).some((c) => c.name === "ts-base"));
      assert.ok((await sb.checkpoints.remove("ts-base")).length >= 1);
      assert.ok(!(await sb.checkpoints.list()).some((c) => c.name === "ts-base"));
      assert.equal((await sb.run(`ls ${DIR}`)).stdout, "link\nsrc\n");
    } finally {
      await sb.close();
    }
  });

  // Catches: a bake on an emulator with no base image for FROM handed back
  // as an image (its launches would lack the files), and a refusal that
  // does not say what it needs.
  test("a bake without a base image is refused", async () => {
    const sb = await Sandbox.build({ local: true });
    try {
      assert.equal((await sb.run(SETUP)).exitCode, 0);
      await sb.checkpoint({ paths: [DIR], name: "ts-bake" });
      await assert.rejects(sb.checkpoints.bake("ts-bake", "ts-baked"),
        (e: unknown) => e instanceof PreconditionError && e.exitCode === 12 && e.message.includes("--base-image"));
    } finally {
      await sb.close();
    }
  });
});

// Sandbox.restore against a running `microvm emulator`, whose S3 slice
// outlives the engine that took the checkpoint.
describe("restore", { skip }, () => {
  let url = "";
  let stop: () => Promise<void> = async () => {};

  before(async () => {
    ({ url, stop } = await startEmulator("rst"));
  });

  after(() => stop());

  // Catches: a restore that launches without the files (or shares the
  // source's: the copy writes a marker the source must not see), one bound
  // to the source's MicroVM, a corrupted object laid instead of refused,
  // and a missing checkpoint answered with a launch.
  test("restore lays the files; a missing or corrupted checkpoint is refused", async () => {
    const sb = await Sandbox.build({ controlEndpoint: url });
    try {
      assert.equal((await sb.run(SETUP)).exitCode, 0);
      const m = await sb.checkpoint({ paths: [DIR], name: "ts-restore" });
      const copy = await Sandbox.restore("ts-restore", { controlEndpoint: url, launchEnv: { WHO: "restored" }, maxIdleSec: 900 });
      try {
        assert.notEqual(copy.microvmId, sb.microvmId);
        const out = (await copy.run(PROBE)).stdout;
        assert.ok(out.startsWith("one\n750\n") && !out.includes("mine-"), out);
        // create's launch options reach a restore too.
        assert.equal((await copy.run('echo "$WHO"')).stdout, "restored\n");
        assert.equal(copy.maxIdleSeconds, 900);
      } finally {
        await copy.close();
      }
      assert.ok(!(await sb.run(`ls ${DIR}`)).stdout.includes("mine-"));
      await assert.rejects(Sandbox.restore("no-such-checkpoint", { controlEndpoint: url }), (e: unknown) => e instanceof MicrovmError);
      // The object, overwritten in the emulator's S3 slice: refused before
      // anything launches, naming the finding.
      const digest = m.digest.replace("sha256:", "");
      const put = await fetch(`${url}/microvm-checkpoints/checkpoints/objects/sha256-${digest}.tar.zst`, {
        method: "PUT", body: "not the checkpoint",
        headers: { authorization: "AWS4-HMAC-SHA256 Credential=AKID/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00", "x-amz-content-sha256": "UNSIGNED-PAYLOAD" },
      });
      assert.ok(put.ok, `overwriting the object: HTTP ${put.status} ${await put.text()}`);
      await assert.rejects(Sandbox.restore("ts-restore", { controlEndpoint: url }),
        (e: unknown) => e instanceof CheckpointRefusedError && e.exitCode === 14);
    } finally {
      await sb.close();
    }
  });
});
