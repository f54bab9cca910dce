// Streams and reads through the engine's sink (api/engine.yaml, stream,
// follow and read's sink): the output's exact bytes arrive through a FIFO
// the engine made (mkfifo) as binary frames, a file's as raw bytes,
// against the real engine and a local sandbox.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { readdirSync } from "node:fs";
import { tmpdir } from "node:os";

import { InvalidArgError, Sandbox } from "../src/sandbox.js";

const missing = ["MICROVM_BIN", "MICROVM_AGENTD"].filter((n) => !process.env[n]);
const skip = missing.length > 0 && !process.env.MICROVMS_REQUIRE_ENGINE ? `needs ${missing.join(" and ")}` : false;

// 3 MiB of bytes that are not UTF-8 (text is lossy, only data is exact),
// across several frames, then a line on stderr.
const MAKE = "head -c 3145728 /dev/urandom > /tmp/blob; sha256sum /tmp/blob | cut -c1-64 > /tmp/blob.sum";
const EMIT = "cat /tmp/blob; echo done >&2";
const sinkDirs = () => readdirSync(tmpdir()).filter((d) => d.startsWith("microvm-sink-"));

describe("sink", { skip }, () => {
  // Catches: output turned into text on the way (the digest of data
  // differs), frames lost or out of order (offsets not contiguous), a
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
      for await (const it of s) {
        if (it.kind !== "output") continue;
        assert.equal(it.offset, at);
        assert.ok(it.data && it.data.length === it.size);
        at += it.size;
        lossy ||= it.lossy;
        if (it.stream === "stdout") h.update(it.data!);
        else err += it.text;
      }
      assert.equal(h.digest("hex"), want);
      assert.ok(lossy);
      assert.equal(err, "done\n");
      assert.equal(s.exit?.exitCode, 0);
      assert.equal(s.exit?.offset, at);
      assert.equal(s.summary?.bytes, at);

      for await (const _ of sb.stream("yes")) break;
      assert.equal((await sb.run("pgrep -c yes || true")).stdout.trim(), "0");

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
});
