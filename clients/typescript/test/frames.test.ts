// The TypeScript frame reader (src/frames.ts) under hostile bytes, and
// against the Go reader (internal/frames) on the same corpus: the
// differential runs internal/framesverdict, which prints the Go
// reader's verdict on FuzzFrames' seeds, its committed corpus when there is
// one, hostile edges and a fixed sample (the frames it hands out and whether
// the body ends cleanly, inside a frame, or at a frame no writer sends). This
// reader must agree on every body, byte for byte.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { join } from "node:path";

import {
  FRAME, FRAME_HEADER_BYTES, FRAME_LAST_TYPE, FRAME_MAX_PAYLOAD_BYTES, FrameCut, FrameError, FrameReader, frameEvent,
  type Frame,
} from "../src/index.js";
import { repo } from "./daemon.js";

function hdr(type: number, offset: bigint, n: number): Uint8Array {
  const b = new Uint8Array(FRAME_HEADER_BYTES);
  const dv = new DataView(b.buffer);
  dv.setUint8(0, type);
  dv.setBigUint64(1, offset);
  dv.setUint32(9, n);
  return b;
}

function cat(...parts: (Uint8Array | number[] | string)[]): Uint8Array {
  return new Uint8Array(Buffer.concat(parts.map((p) => (typeof p === "string" ? Buffer.from(p) : Buffer.from(p)))));
}

/** A source handing out body in reads of at most step bytes, counting what it gave. */
function source(body: Uint8Array, step: number) {
  let pos = 0;
  return {
    get pos() {
      return pos;
    },
    async read() {
      if (pos >= body.length) return { done: true };
      const value = body.subarray(pos, Math.min(pos + step, body.length));
      pos += value.length;
      return { done: false, value };
    },
  };
}

type End = "eof" | "cut" | "malformed";

async function readAll(body: Uint8Array, step = 1 << 20): Promise<{ frames: Frame[]; end: End; err?: unknown }> {
  const r = new FrameReader(source(body, step));
  const frames: Frame[] = [];
  for (;;) {
    try {
      const f = await r.next();
      if (f === undefined) return { frames, end: "eof" };
      frames.push({ ...f, payload: Uint8Array.from(f.payload) });
    } catch (e) {
      if (e instanceof FrameCut) return { frames, end: "cut", err: e };
      if (e instanceof FrameError) return { frames, end: "malformed", err: e };
      throw e;
    }
  }
}

// Each case is a wrong edit to FrameReader.next's checks: dropping the type
// bound, the keepalive rule or the length cap, or taking a body cut inside a
// frame for a clean end.
describe("the frame reader under hostile bytes", () => {
  test("a body cut inside a frame is a cut, not an end", async () => {
    for (const body of [hdr(1, 0n, 10).subarray(0, 5), cat(hdr(1, 0n, 10), "abc"), cat(hdr(2, 0n, 100), new Array(50).fill(0)),
      cat(hdr(1, 0n, 2), "ok", hdr(4, 2n, 9).subarray(0, 12))]) {
      assert.equal((await readAll(body)).end, "cut");
    }
  });
  test("an unknown type is malformed", async () => {
    for (const t of [FRAME_LAST_TYPE + 1, 9, 255]) {
      const got = await readAll(hdr(t, 0n, 0));
      assert.equal(got.end, "malformed");
      assert.match(String(got.err), /unknown type/);
    }
  });
  test("a keepalive with a payload is malformed", async () => {
    const got = await readAll(cat(hdr(FRAME.keepalive, 0n, 1), "x"));
    assert.equal(got.end, "malformed");
    assert.match(String(got.err), /keepalive/);
  });
  test("an oversized length is refused before anything is read for it", async () => {
    for (const n of [FRAME_MAX_PAYLOAD_BYTES + 1, 0xffffffff]) {
      const src = source(cat(hdr(FRAME.stdout, 0n, n), new Array(64).fill(1)), FRAME_HEADER_BYTES);
      await assert.rejects(new FrameReader(src).next(), (e) => e instanceof FrameError && /over the/.test(e.message));
      assert.equal(src.pos, FRAME_HEADER_BYTES);
    }
    const whole = await readAll(cat(hdr(FRAME.stderr, 5n, FRAME_MAX_PAYLOAD_BYTES), new Uint8Array(FRAME_MAX_PAYLOAD_BYTES).fill(0xff)), 65536);
    assert.equal(whole.end, "eof");
    assert.equal(whole.frames[0].payload.length, FRAME_MAX_PAYLOAD_BYTES);
  });
  test("a clean end, and short reads", async () => {
    assert.deepEqual(await readAll(new Uint8Array(0)), { frames: [], end: "eof" });
    const body = cat(hdr(0, 0n, 0), hdr(1, 7n, 3), [0, 0xff, 0x80], hdr(2, 2n ** 64n - 1n, 1), "e");
    for (const step of [1, 2, 13, 1 << 20]) {
      const got = await readAll(body, step);
      assert.equal(got.end, "eof");
      assert.deepEqual(got.frames.map((f) => [f.type, f.offset, Buffer.from(f.payload).toString("hex")]), [[0, 0n, ""], [1, 7n, "00ff80"], [2, 2n ** 64n - 1n, "65"]]);
    }
  });
  test("gap and exit payloads must be their events", () => {
    for (const [type, payload] of [[FRAME.gap, "{"], [FRAME.gap, '{"from":9,"to":3}'], [FRAME.gap, "\xff"], [FRAME.exit, '{"offset":1}'], [FRAME.exit, "[]"]] as const) {
      assert.throws(() => frameEvent({ type, offset: 0n, payload: Buffer.from(payload, "latin1") }), FrameError);
    }
    const ev = frameEvent({ type: FRAME.stderr, offset: 4n, payload: Uint8Array.of(0xfe) });
    assert.equal(ev.event, "output");
    if (ev.event === "output") assert.deepEqual([ev.data.stream, ev.data.offset, [...ev.data.raw], ev.data.output], ["stderr", 4, [0xfe], "/g=="]);
  });
});

interface Verdict {
  name: string;
  body: string;
  frames: { type: number; offset: string; payload: string }[];
  end: End;
}

describe("the frame reader agrees with the Go reader", () => {
  test("on every corpus body", { timeout: 600_000 }, async () => {
    const out = execFileSync("go", ["run", "./internal/framesverdict", "-corpus", join("internal", "frames", "testdata", "fuzz", "FuzzFrames")], {
      cwd: repo, timeout: 600_000, maxBuffer: 1 << 28,
    });
    const doc = JSON.parse(out.toString()) as { max_payload: number; cases: Verdict[] };
    assert.equal(doc.max_payload, FRAME_MAX_PAYLOAD_BYTES);
    assert.ok(doc.cases.length > 400);
    assert.deepEqual(new Set(doc.cases.map((c) => c.end)), new Set(["eof", "cut", "malformed"]));
    assert.ok(doc.cases.some((c) => c.name.startsWith("seed ")));
    for (const c of doc.cases) {
      const body = new Uint8Array(Buffer.from(c.body, "hex"));
      // Reads of one byte only for small bodies: a megabyte of them is a
      // million awaits, and says nothing the reads of 7 do not.
      for (const step of body.length < 1 << 16 ? [1, 7, 1 << 20] : [7, 4096, 1 << 20]) {
        const got = await readAll(body, step);
        const frames = got.frames.map((f) => ({ type: f.type, offset: f.offset.toString(), payload: Buffer.from(f.payload).toString("hex") }));
        assert.deepEqual({ frames, end: got.end }, { frames: c.frames, end: c.end }, `${c.name} (reads of ${step})`);
      }
    }
  });
});
