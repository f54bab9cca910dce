// Streams and reads through the engine's sink (api/engine.yaml, stream,
// follow and read's sink): the output's exact bytes arrive through a FIFO
// the engine made (mkfifo) as binary frames, a file's as raw bytes,
// against the real engine and a local sandbox.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";

import { InvalidArgError, Sandbox } from "../src/sandbox.js";

const missing = ["MICROVM_BIN", "MICROVM_AGENTD"].filter((n) => !process.env[n]);
const skip = missing.length > 0 && !process.env.MICROVMS_REQUIRE_ENGINE ? `needs ${missing.join(" and ")}` : false;

// 3 MiB of bytes that are not UTF-8 (text is lossy, only data is exact),
// across several frames, then a line on stderr.
const MAKE = "head -c 3145728 /dev/urandom > /tmp/blob; sha256sum /tmp/blob | cut -c1-64 > /tmp/blob.sum";
const EMIT = "cat /tmp/blob; echo done >&2";
const sinkDirs = () => readdirSync(tmpdir()).filter((d) => d.startsWith("microvm-sink-"));

// How many `yes` processes the guest still runs after a stream of it was
// left: a kill is answered once the signal is sent, so the guest is given up
// to 5 s to see it gone (bounded; one left running prints 1).
const YES_LEFT = "for i in $(seq 50); do pgrep -x yes >/dev/null || break; sleep 0.1; done; pgrep -c yes || true";

describe("sink", { skip }, () => {
  // Catches: output turned into text on the way (the digest of data
  // differs), a chunk's bytes rewritten by a later read of the FIFO (every
  // chunk is kept and hashed only once the stream has ended), frames lost
  // or out of order (offsets not contiguous), a
  // missing exit, a break that leaves the command running, a refused
  // request that hangs on a FIFO the engine never opened, and FIFOs left
  // behind.
  test("exact bytes, break kills, refusal prompt", async () => {
    const before = sinkDirs();
    const sb = await Sandbox.create({ local: true });
    try {
      assert.equal((await sb.run(MAKE)).exitCode, 0);
      const want = (await sb.run("cat /tmp/blob.sum")).stdout.trim();
      const h = createHash("sha256");
      let at = 0;
      let lossy = false;
      let err = "";
      const s = sb.stream(EMIT);
      const kept: Uint8Array[] = [];
      for await (const it of s) {
        if (it.kind !== "output") continue;
        assert.equal(it.offset, at);
        assert.ok(it.data && it.data.length === it.size);
        at += it.size;
        lossy ||= it.lossy;
        if (it.stream === "stdout") kept.push(it.data!);
        else err += it.text;
      }
      for (const d of kept) h.update(d);
      assert.equal(h.digest("hex"), want);
      assert.ok(lossy);
      assert.equal(err, "done\n");
      assert.equal(s.exit?.exitCode, 0);
      assert.equal(s.exit?.offset, at);
      assert.equal(s.summary?.bytes, at);

      for await (const _ of sb.stream("yes")) break;
      assert.equal((await sb.run(YES_LEFT)).stdout.trim(), "0");

      await assert.rejects((async () => { for await (const _ of sb.stream("true", { timeoutSec: -1 })) { /* none */ } })(),
        (e: unknown) => e instanceof InvalidArgError);

      const p = await sb.start(EMIT);
      const h2 = createHash("sha256");
      for await (const it of p.stream()) if (it.kind === "output" && it.stream === "stdout") h2.update(it.data!);
      assert.equal(h2.digest("hex"), want);
    } finally {
      await sb.close();
    }
    assert.deepEqual(sinkDirs(), before);
  });

  // Catches: a read through the FIFO that loses or reorders bytes (the
  // digest differs), that hangs or returns short on an empty file or one
  // larger than a read, a missing file that hangs on a FIFO the engine
  // closed before answering instead of failing, and FIFOs left behind.
  test("read: exact bytes, empty, missing", async () => {
    const before = sinkDirs();
    const sb = await Sandbox.create({ local: true });
    try {
      assert.equal((await sb.run(MAKE + "; : > /tmp/empty")).exitCode, 0);
      const want = (await sb.run("cat /tmp/blob.sum")).stdout.trim();
      const got = await sb.files.readBytes("/tmp/blob");
      assert.equal(got.length, 3145728);
      assert.equal(createHash("sha256").update(got).digest("hex"), want);
      assert.equal((await sb.files.readBytes("/tmp/empty")).length, 0);
      await assert.rejects(sb.files.readBytes("/tmp/missing"), (e: unknown) => e instanceof Error && /does not exist/.test(e.message));
      // The sandbox still answers after the failed read.
      assert.equal((await sb.run("echo ok")).stdout, "ok\n");
    } finally {
      await sb.close();
    }
    assert.deepEqual(sinkDirs(), before);
  });

  // Catches: a write through the socket that loses, reorders or transcodes
  // bytes (the digest differs; not UTF-8 on purpose), drops the mode or the
  // parents, hangs on an empty file, and sockets left behind.
  test("write: exact bytes, mode, empty", async () => {
    const before = sinkDirs();
    const sb = await Sandbox.create({ local: true });
    try {
      const b = Buffer.alloc(3 << 20);
      for (let i = 0; i < b.length; i++) b[i] = (i * 7919 + (i >> 13)) & 255;
      await sb.files.write("/tmp/w/a/blob", b, { mode: "0640" });
      const r = await sb.run("sha256sum /tmp/w/a/blob | cut -c1-64; stat -c %a /tmp/w/a/blob");
      assert.equal(r.stdout, `${createHash("sha256").update(b).digest("hex")}\n640\n`);
      await sb.files.write("/tmp/w/empty", new Uint8Array(0));
      assert.equal((await sb.run("stat -c %s /tmp/w/empty")).stdout, "0\n");
      await sb.files.write("/tmp/w/text", "héllo");
      assert.equal(await sb.files.read("/tmp/w/text"), "héllo");
    } finally {
      await sb.close();
    }
    assert.deepEqual(sinkDirs(), before);
  });

  // Catches: a socket that ends before size bytes committing a short file
  // (the engine must fail the write and leave nothing at the path), bytes
  // past size written into the file, and size taken with a host file or
  // dataBase64, where it means nothing. The raw engine, since the package
  // always sends exactly size.
  test("write: a socket short of size fails with nothing written, bytes past it are not read", async () => {
    const proc = spawn(process.env.MICROVM_BIN!, ["engine"], { stdio: ["pipe", "pipe", "inherit"] });
    const answers = new Map<number, (env: Record<string, unknown>) => void>();
    createInterface({ input: proc.stdout! }).on("line", (l) => {
      const m = JSON.parse(l) as { id: number; envelope?: Record<string, unknown> };
      if (m.envelope) answers.get(m.id)?.(m.envelope);
    });
    let id = 0;
    const send = (op: string, args: object) => new Promise<Record<string, unknown>>((resolve) => {
      answers.set(++id, resolve);
      proc.stdin!.write(JSON.stringify({ id, op, args }) + "\n");
    });
    const dir = mkdtempSync(join(tmpdir(), "microvms-sizetest-"));
    try {
      assert.equal((await send("create", { local: true })).status, "ok");
      for (const [name, sent, size] of [["short", 1000, 5000], ["long", 5000, 1000]] as const) {
        const path = join(dir, name);
        const server = createServer();
        const conn = new Promise<Socket>((resolve) => server.once("connection", resolve));
        await new Promise<void>((resolve) => server.listen(path, () => resolve()));
        const env = send("write", { path: `/tmp/${name}`, localPath: path, size });
        const c = await conn;
        c.on("error", () => {});
        c.end(Buffer.alloc(sent, 1));
        const got = await env;
        server.close();
        const st = (await send("stat", { path: `/tmp/${name}` })).data as { exists: boolean; entry: { size: number } | null };
        if (name === "short") {
          assert.equal(got.status, "error", JSON.stringify(got));
          assert.equal(st.exists, false);
        } else {
          assert.equal(got.status, "ok", JSON.stringify(got));
          assert.equal(st.entry?.size, size);
        }
      }
      const file = join(dir, "file");
      writeFileSync(file, "abc");
      const withFile = await send("write", { path: "/tmp/f", localPath: file, size: 3 });
      assert.equal(withFile.code, "ERR_INVALID_ARG");
      const withData = await send("write", { path: "/tmp/f", dataBase64: "YWJj", size: 3 });
      assert.equal(withData.code, "ERR_INVALID_ARG");
    } finally {
      proc.stdin!.end();
      await new Promise((resolve) => proc.once("exit", resolve));
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
