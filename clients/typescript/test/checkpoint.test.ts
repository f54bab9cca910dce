// Checkpoints through the real `microvm engine` in local mode (issue 47):
// checkpoint, fork, list, remove. The emulator's guests start in /, which
// a checkpoint refuses as a default, so paths are named.
import { describe, test } from "node:test";
import assert from "node:assert/strict";

import { InvalidArgError, Sandbox } from "../src/sandbox.js";

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
      const fleet = await sb.fork(2, { command: PROBE, paths: [DIR] });
      assert.equal(fleet.runs.length, 2);
      for (const r of fleet.runs) {
        assert.ok(r.ok, `${r.errorCode} ${r.stderr}`);
        assert.ok(r.stdout.startsWith("one\n750\n") && !r.stdout.includes("mine-"), r.stdout);
      }
      assert.deepEqual(fleet.leaked, []);
      assert.ok((await sb.checkpoints.list()).some((c) => c.name === "ts-base"));
      assert.ok((await sb.checkpoints.remove("ts-base")).length >= 1);
      assert.ok(!(await sb.checkpoints.list()).some((c) => c.name === "ts-base"));
      assert.equal((await sb.run(`ls ${DIR}`)).stdout, "link\nsrc\n");
    } finally {
      await sb.close();
    }
  });
});
