// runMany in local mode through the real `microvm engine`: the CLI's fleet
// code, not a TypeScript loop. Needs $MICROVM_BIN and $MICROVM_AGENTD, as
// sandbox.test.ts does.
import { describe, test } from "node:test";
import assert from "node:assert/strict";

import { InvalidArgError, runMany } from "../src/sandbox.js";

const missing = ["MICROVM_BIN", "MICROVM_AGENTD"].filter((n) => !process.env[n]);
const skip = missing.length > 0 && !process.env.MICROVMS_REQUIRE_ENGINE ? `needs ${missing.join(" and ")}` : false;

describe("runMany", { skip }, () => {
  // Catches: non-zero exits thrown instead of reported, runs sharing one
  // MicroVM, and a fleet without its one cost report.
  test("three MicroVMs, each command's exit a result", async () => {
    // launchEnv reaches every MicroVM (create's launch options): the wrong
    // edit is a runMany that launches with none.
    const fleet = await runMany('hostname; echo "out $WHO"; exit 3', { count: 3, parallel: 2, local: true, launchEnv: { WHO: "fleet" } });
    assert.equal(fleet.runs.length, 3);
    assert.deepEqual(fleet.runs.map((r) => r.index).sort(), [0, 1, 2]);
    assert.equal(new Set(fleet.runs.map((r) => r.microvmId)).size, 3);
    assert.equal(new Set(fleet.runs.map((r) => r.stdout.split("\n")[0])).size, 3);
    for (const r of fleet.runs) {
      assert.equal(r.stdout.split("\n")[1], "out fleet");
      assert.equal(r.exitCode, 3);
      assert.equal(r.errorCode, "ERR_EXEC_FAILED");
      assert.equal(r.ok, false);
    }
    assert.deepEqual(fleet.leaked, []);
    assert.ok(fleet.cost && Number(fleet.cost.totalUsd) > 0);
  });

  // Catches: a count the CLI refuses launched anyway from TypeScript.
  test("the CLI's bounds", async () => {
    await assert.rejects(runMany("true", { count: 100000, local: true }), InvalidArgError);
    // A launch option create refuses is refused here too, before any launch.
    await assert.rejects(runMany("true", { count: 1, local: true, maxIdleSec: 10 }), InvalidArgError);
  });
});
