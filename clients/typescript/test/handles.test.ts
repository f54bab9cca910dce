// Process handles, the new fs ops, probes, keepalive, large files through
// localPath, a pool, and issue 45's harness, all through the real
// `microvm engine` in local mode. Needs $MICROVM_BIN and $MICROVM_AGENTD
// (make test-clients sets them with MICROVMS_REQUIRE_ENGINE) and root.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes, createHash } from "node:crypto";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { Pool, ProtocolError, Sandbox, type BuildProgress, type FsEvent, type Gap } from "../src/sandbox.js";

const missing = ["MICROVM_BIN", "MICROVM_AGENTD"].filter((n) => !process.env[n]);
const skip = missing.length > 0 && !process.env.MICROVMS_REQUIRE_ENGINE ? `needs ${missing.join(" and ")}` : false;
if (missing.length > 0 && process.env.MICROVMS_REQUIRE_ENGINE) throw new Error(`MICROVMS_REQUIRE_ENGINE: ${missing.join(" and ")} unset`);

/** Polls until cond holds, at most n times. */
async function until(cond: () => Promise<boolean>, n = 400): Promise<boolean> {
  for (let i = 0; i < n; i++) {
    if (await cond()) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return false;
}

describe("handles", { skip }, () => {
  test("start, poll, stream, signal, wait, stdin, pty, reattach", async () => {
    await using sb = await Sandbox.create({ local: true });

    // A command that traps TERM and reports it: the wrong edit (signal sends
    // KILL, or nothing) makes the trap line missing.
    const p = await sb.start("trap 'echo got-term; exit 7' TERM; echo ready; while :; do sleep 0.05; done");
    assert.equal((await p.poll()).phase, "running");
    const st = p.stream();
    for await (const line of st.lines()) {
      if (line === "ready") assert.equal(await p.signal("TERM"), true);
      if (line === "got-term") break; // leaving a follow ends the follow, not the command (it exits on its own)
    }
    const done = await p.wait({ timeoutSec: 60 });
    assert.deepEqual([done.exitCode, done.ok, done.timedOut], [7, false, false]);
    assert.match(done.stdout, /ready\ngot-term\n/);

    // A wait that gives up is a result, and the command runs on.
    const slow = await sb.start("sleep 30", { timeoutSec: 120 });
    const w = await slow.wait({ timeoutSec: 1 });
    assert.deepEqual([w.timedOut, w.timeoutLimit, w.phase], [true, "wait", "running"]);
    // Reattach by id: a fresh handle reaches the same command.
    const again = sb.process(slow.execId);
    assert.ok((await sb.processes()).some((e) => e.exec_id === slow.execId));
    assert.equal(await again.kill(), true);
    assert.notEqual((await again.wait({ timeoutSec: 60 })).exitCode, 0);

    // stdin: the bytes written arrive, and close is end of file.
    const cat = await sb.start(["sh", "-c", "tr a-z A-Z; echo eof"], { stdin: true });
    assert.equal(await cat.writeStdin("hello\n"), 6);
    await cat.closeStdin();
    assert.equal((await cat.wait({ timeoutSec: 60 })).stdout, "HELLO\neof\n");

    // run and stream take user and group, start takes limits (this guest
    // has no delegated cgroup, so limits that reach it are refused). Catches:
    // options the type allowed and the call dropped, or an engine start op
    // refusing limits as an unknown field.
    assert.deepEqual((await sb.run("id -u; id -g", { user: 65534, group: 65534 })).stdout.split("\n").slice(0, 2), ["65534", "65534"]);
    let ids = "";
    for await (const item of sb.stream("id -u", { user: 65534 })) if (item.kind === "output") ids += item.text;
    assert.equal(ids, "65534\n");
    await assert.rejects(sb.start("true", { limits: { memoryBytes: 64 << 20 } }), (e: unknown) => e instanceof ProtocolError && /limits/.test(e.message));

    // pty: the size asked for, then the size resize sets.
    const tty = await sb.start("stty size; read x; stty size", { pty: { rows: 33, cols: 101 } });
    const out: string[] = [];
    for await (const line of tty.stream().lines()) {
      out.push(line.trim());
      if (line.trim() === "33 101") {
        await tty.resize(40, 120);
        await tty.writeStdin("go\n");
      }
    }
    assert.ok(out.includes("33 101") && out.includes("40 120"), out.join("|"));
  });

  test("fs ops, watch, health, metrics, holdAwake", async () => {
    await using sb = await Sandbox.create({ local: true });
    assert.equal(await sb.files.mkdir("/work/d/e"), true);
    assert.equal(await sb.files.mkdir("/work/d/e"), false);
    assert.equal((await sb.files.stat("/work/d/e"))?.type, "directory");
    assert.equal(await sb.files.stat("/work/none"), null);
    await sb.files.write("/work/d/a.txt", "a");
    await sb.files.move("/work/d/a.txt", "/work/d/b.txt");
    assert.deepEqual([await sb.files.exists("/work/d/a.txt"), await sb.files.exists("/work/d/b.txt")], [false, true]);
    await assert.rejects(sb.files.remove("/work/d"));
    assert.equal(await sb.files.remove("/work/d", { recursive: true }), 3);

    // watch: a file written after the watch is up arrives as an event; the
    // loop's break cancels the engine request (else the sandbox's close, and
    // this test, would hang on it).
    await sb.files.mkdir("/work/w");
    const seen: Array<FsEvent | Gap> = [];
    const writer = (async () => {
      for (let i = 0; i < 200 && !seen.some((e) => e.kind === "fs" && e.path.endsWith("x.txt")); i++) {
        await sb.files.write(`/work/w/x.txt`, String(i));
        await new Promise((r) => setTimeout(r, 100));
      }
    })();
    for await (const ev of sb.files.watch("/work/w")) {
      seen.push(ev);
      if (ev.kind === "fs" && ev.path.endsWith("x.txt")) break;
    }
    await writer;
    assert.ok(seen.some((e) => e.kind === "fs" && e.path.endsWith("x.txt")));
    // An abort ends a watch quietly.
    const ac = new AbortController();
    const watching = (async () => {
      let n = 0;
      for await (const _ of sb.files.watch("/work/w", { signal: ac.signal })) n++;
      return n;
    })();
    setTimeout(() => ac.abort(), 300);
    assert.equal(typeof (await watching), "number");

    const health = await sb.health();
    assert.ok(Object.keys(health).length > 0);
    const metrics = await sb.metrics();
    assert.ok(Object.keys(metrics).length > 0);
    const held = await sb.holdAwake(2, { everySec: 1 });
    assert.equal(held.microvmId, sb.microvmId);
    assert.ok(held.pings >= 1, `pings ${held.pings}`);
  });

  test("a 64 MiB file round trip through localPath", async () => {
    // Catches: write or read sending the bytes as base64 on the engine line
    // (64 MiB becomes one 85 MiB line the engine's scanner refuses).
    await using sb = await Sandbox.create({ local: true });
    const data = randomBytes(64 << 20);
    await sb.files.write("/work/big.bin", data);
    const sum = createHash("sha256").update(data).digest("hex");
    assert.equal((await sb.run("sha256sum /work/big.bin")).stdout.split(" ")[0], sum);
    const back = await sb.files.readBytes("/work/big.bin");
    assert.equal(back.length, data.length);
    assert.equal(createHash("sha256").update(back).digest("hex"), sum);
  });

  test("a build at a size class reports progress", async () => {
    // Catches: progress never reaching onProgress, or a sandbox of another
    // image than the one built (the size class is the image's).
    const seen: BuildProgress[] = [];
    await using sb = await Sandbox.build({ local: true, memoryMib: 4096, onProgress: (e) => seen.push(e) });
    assert.ok(seen.length > 0, "no build progress arrived");
    assert.equal(seen[0]!.step, 1);
    assert.equal((await sb.run("echo built")).stdout, "built\n");
    assert.match((await sb.cost()).size, /4096/);
    const report = await sb.terminate({ deleteImage: true });
    assert.notEqual(report.imageIdentifier, null);
    assert.equal(report.leaked, false);
  });

  test("a pool member acquired and released", async () => {
    const pool = await Pool.open({ local: true, size: 1 });
    try {
      const ready = await pool.waitReady({ timeoutSec: 300 });
      assert.equal(ready.ready, 1);
      const sb = await pool.acquire();
      assert.equal((await sb.run("echo member")).stdout, "member\n");
      const report = await pool.release(sb);
      assert.deepEqual([report.microvmId, report.leaked], [sb.microvmId, false]);
      assert.ok((await pool.cost()).text.length > 0);
    } finally {
      const final = await pool.close();
      assert.deepEqual([final.closed, final.leaked], [true, []]);
    }
  });
});

describe("issue 45 harness", { skip }, () => {
  test("four sandboxes test a project concurrently; a fifth's loop is aborted", async () => {
    const tmp = mkdtempSync(join(tmpdir(), "microvms-ts-harness-"));
    try {
      const proj = join(tmp, "proj");
      mkdirSync(proj);
      writeFileSync(join(proj, "add.sh"), "add() { echo $(($1 + $2)); }\n");
      writeFileSync(join(proj, "test.sh"), ". ./add.sh\n[ \"$(add 2 3)\" = 5 ] && echo 'pass add' && echo ok > result.txt\n");
      const one = async (i: number): Promise<string> => {
        await using sb = await Sandbox.create({ local: true });
        await sb.files.uploadDir(proj, "/work/proj");
        const lines: string[] = [];
        const st = sb.stream("sh test.sh", { cwd: "/work/proj", timeoutSec: 120 });
        for await (const line of st.lines()) lines.push(line);
        assert.equal(st.exit?.exitCode, 0, lines.join("\n"));
        assert.deepEqual(lines, ["pass add"]);
        const local = join(tmp, `result-${i}.txt`);
        await sb.files.download("/work/proj/result.txt", local);
        const report = await sb.terminate();
        assert.equal(report.leaked, false);
        return readFileSync(local, "utf8");
      };
      const loop = async (): Promise<void> => {
        await using sb = await Sandbox.create({ local: true });
        const ac = new AbortController();
        const st = sb.stream("echo spinning; while :; do :; done", { signal: ac.signal, execId: "ts-spin" });
        let exitCode: number | null | undefined;
        for await (const item of st) {
          if (item.kind === "output" && !ac.signal.aborted) {
            // The check below sees the loop while it runs: else "gone" would prove nothing.
            assert.ok((await sb.run("ps -eo args")).stdout.includes("while :"));
            ac.abort();
          }
          if (item.kind === "exit") exitCode = item.exitCode;
        }
        assert.equal(exitCode, null, "a signal ended it");
        // Gone from the guest: no shell spinning in the process table.
        const gone = await until(async () => !(await sb.run("ps -eo args")).stdout.includes("while :"));
        assert.ok(gone, (await sb.run("ps -eo pid,args")).stdout);
        // Breaking out of a stream kills the command too.
        const st2 = sb.stream("echo again; while :; do :; done");
        for await (const item of st2) if (item.kind === "output") break;
        assert.ok(await until(async () => !(await sb.run("ps -eo args")).stdout.includes("while :")));
      };
      const [results] = await Promise.all([Promise.all([0, 1, 2, 3].map(one)), loop()]);
      assert.deepEqual(results, ["ok\n", "ok\n", "ok\n", "ok\n"]);
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  });
});

