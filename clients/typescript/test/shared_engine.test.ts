// One engine per process serves every sandbox (api/engine.yaml request
// sandbox): sandboxes share its pid, run concurrently, end one by one, and
// all fail naming it when it dies.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { readFileSync, readdirSync } from "node:fs";
import { resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { Sandbox, UnexpectedError } from "../src/sandbox.js";

const pkg = resolve(fileURLToPath(import.meta.url), "../../..");
const missing = ["MICROVM_BIN", "MICROVM_AGENTD"].filter((n) => !process.env[n]);
const skip = missing.length > 0 && !process.env.MICROVMS_REQUIRE_ENGINE ? `needs ${missing.join(" and ")}` : false;
if (missing.length > 0 && process.env.MICROVMS_REQUIRE_ENGINE) throw new Error(`MICROVMS_REQUIRE_ENGINE: ${missing.join(" and ")} unset`);

function guestInitsOf(pid: number): number[] {
  const out: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const argv0 = readFileSync(`/proc/${entry}/cmdline`, "latin1").split("\0")[0];
      const stat = readFileSync(`/proc/${entry}/stat`, "latin1");
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      if (argv0 === "microvms-emulator-guest-init" && ppid === pid) out.push(Number(entry));
    } catch {
      // gone while listing
    }
  }
  return out;
}

function alive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "latin1");
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[0] !== "Z";
  } catch {
    return false;
  }
}

// Waits (bounded, ~60 s) for /tmp/go, then says which ended it.
const GATED = "for i in $(seq 1200); do [ -f /tmp/go ] && { echo released; exit 0; }; sleep 0.05; done; echo expired";

describe("shared engine", { skip }, () => {
  test("two sandboxes share one engine and run at once", async () => {
    const [a, b] = await Promise.all([Sandbox.create({ local: true }), Sandbox.create({ local: true })]);
    try {
      // Catches: a create that still starts an engine per sandbox.
      assert.equal(a.enginePid, b.enginePid);
      assert.equal(guestInitsOf(a.enginePid!).length, 2);
      let aDone = false;
      const gated = a.run(GATED).then((r) => { aDone = true; return r; });
      // Catches: one lock across handles (b would wait for a's loop to expire).
      assert.equal((await b.run("echo b")).stdout, "b\n");
      assert.equal(aDone, false, "a's command finished before it was released");
      await a.files.write("/tmp/go", "");
      assert.equal((await gated).stdout, "released\n");
    } finally {
      await a.close();
      await b.close();
    }
  });

  test("ending one leaves the other working", async () => {
    const a = await Sandbox.create({ local: true });
    const b = await Sandbox.create({ local: true });
    try {
      const pid = a.enginePid!;
      const guestsA = guestInitsOf(pid);
      await a.terminate();
      await a.close();
      // Catches: a release that ends the engine or every handle.
      assert.equal(alive(pid), true);
      assert.equal((await b.run("echo still")).stdout, "still\n");
      assert.equal(guestInitsOf(pid).length, 1);
      await assert.rejects(a.run("echo no"), /released/);
      assert.ok(guestsA.length === 2 && guestInitsOf(pid).length === 1);
    } finally {
      await b.close();
    }
  });

  test("a killed engine fails every sandbox naming it, and the next create starts another", async () => {
    const a = await Sandbox.create({ local: true });
    const b = await Sandbox.create({ local: true });
    const pid = a.enginePid!;
    process.kill(pid, "SIGKILL");
    for (const sb of [a, b]) {
      // Catches: a sandbox that hangs on a dead shared engine.
      await assert.rejects(sb.run("echo hi"), (err: unknown) => err instanceof UnexpectedError && err.message.includes(`pid ${pid}`));
    }
    const c = await Sandbox.create({ local: true });
    try {
      assert.notEqual(c.enginePid, pid);
      assert.equal((await c.run("echo c")).stdout, "c\n");
    } finally {
      await a.close();
      await b.close();
      await c.close();
    }
  });

  test("a changed environment gets its own engine", async () => {
    // Catches: a shared engine that ignores a process.env changed since it
    // started (its endpoints, region and bucket come from there).
    const a = await Sandbox.create({ local: true });
    try {
      process.env.MICROVMS_SHARED_ENGINE_TEST = "1";
      let b: Sandbox;
      try {
        b = await Sandbox.create({ local: true });
      } finally {
        delete process.env.MICROVMS_SHARED_ENGINE_TEST;
      }
      assert.notEqual(a.enginePid, b.enginePid);
      assert.equal((await b.run("echo b")).stdout, "b\n");
      await b.close();
      // Its environment is gone and so is its last sandbox: it ends.
      assert.equal(alive(b.enginePid!), false);
      assert.equal((await a.run("echo a")).stdout, "a\n");
    } finally {
      await a.close();
    }
  });

  test("a killed caller takes every sandbox down", async () => {
    // Catches: an engine whose end of stdin tears down only the default sandbox.
    const child = spawn(process.execPath, ["--input-type=module", "-e", TWO_THEN_WAIT], { cwd: pkg, stdio: ["ignore", "pipe", "inherit"] });
    const pids = await new Promise<string[]>((res) => child.stdout.once("data", (b: Buffer) => res(b.toString().trim().split(" "))));
    assert.equal(pids.length, 2);
    assert.equal(pids[0], pids[1]);
    const enginePid = Number(pids[0]);
    const guests = guestInitsOf(enginePid);
    assert.equal(guests.length, 2);
    child.kill("SIGKILL");
    for (let i = 0; i < 600 && (alive(enginePid) || guests.some(alive)); i++) await new Promise((r) => setTimeout(r, 100));
    assert.equal(alive(enginePid), false);
    assert.deepEqual(guests.filter(alive), []);
  });
});

const TWO_THEN_WAIT = `
import { Sandbox } from "microvms";
const a = await Sandbox.create({ local: true });
const b = await Sandbox.create({ local: true });
console.log(a.enginePid, b.enginePid);
setInterval(() => {}, 1000);
`;
