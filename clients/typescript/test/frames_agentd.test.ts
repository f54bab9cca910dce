// run() and follow() over binary frames against a real agentd on 127.0.0.1,
// compared with the same calls over Server-Sent Events. A recording HTTP
// proxy in front of the daemon shows what went over the wire: frames asked
// for and answered where the daemon's /v1/capabilities (or /v1/schema) lists them, run in one
// exchange, and (with the document's frames entry removed, or the frames
// preference dropped from Accept on the way) SSE with every byte still there.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { createServer, request, type Server } from "node:http";
import type { AddressInfo } from "node:net";

import {
  FRAMES_MEDIA_TYPE, bootstrap, createAgentdClient, follow, run, unwrap, type AgentdClient, type ExecEvent,
} from "../src/index.js";
import { Daemon } from "./daemon.js";

type Rec = [method: string, path: string, accept: string, contentType: string];

/** An HTTP proxy recording (method, path, Accept, answered Content-Type). */
async function recorder(port: number, opts: { stripFrames?: boolean; sseOnly?: boolean } = {}) {
  const log: Rec[] = [];
  const server: Server = createServer((req, res) => {
    if (opts.stripFrames && (req.url ?? "").split("?")[0] === "/v1/capabilities") {
      // A daemon whose document lists no frames predates the route too.
      log.push([req.method ?? "", "/v1/capabilities", req.headers.accept ?? "", ""]);
      res.writeHead(404);
      res.end();
      return;
    }
    const headers = { ...req.headers };
    if (opts.sseOnly && headers.accept) headers.accept = "text/event-stream";
    const up = request({ host: "127.0.0.1", port, method: req.method, path: req.url, headers }, (ur) => {
      const path = (req.url ?? "").split("?")[0];
      log.push([req.method ?? "", path, req.headers.accept ?? "", String(ur.headers["content-type"] ?? "")]);
      if (opts.stripFrames && path === "/v1/schema" && ur.statusCode === 200) {
        const parts: Buffer[] = [];
        ur.on("data", (c: Buffer) => parts.push(c));
        ur.on("end", () => {
          const doc = JSON.parse(Buffer.concat(parts).toString()) as Record<string, unknown>;
          delete doc.frames;
          const body = JSON.stringify(doc);
          res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
          res.end(body);
        });
        return;
      }
      res.writeHead(ur.statusCode ?? 502, ur.headers);
      ur.pipe(res);
    });
    up.on("error", () => res.destroy());
    req.pipe(up);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return {
    base: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    take: () => log.splice(0),
    close: () => new Promise((r) => { server.closeAllConnections(); server.close(r); }),
  };
}

interface Collected {
  stdout: Buffer;
  stderr: Buffer;
  gaps: [number, number][];
  exit?: { exit_code: number | null; signal: number | null; offset: number };
}

/** Each stream's bytes, the gaps and the exit; the chunks and gaps must tile
 * the offsets up to the exit's. */
async function collect(events: AsyncIterable<ExecEvent>): Promise<Collected> {
  const parts: Record<"stdout" | "stderr", Buffer[]> = { stdout: [], stderr: [] };
  const c: Collected = { stdout: Buffer.alloc(0), stderr: Buffer.alloc(0), gaps: [] };
  let pos: number | undefined;
  for await (const ev of events) {
    assert.equal(c.exit, undefined, "an event after exit");
    if (ev.event === "output") {
      if (pos !== undefined) assert.equal(ev.data.offset, pos);
      pos = ev.data.offset + ev.data.raw.length;
      parts[ev.data.stream].push(Buffer.from(ev.data.raw));
    } else if (ev.event === "gap") {
      c.gaps.push([ev.data.from, ev.data.to]);
      pos = ev.data.to;
    } else {
      c.exit = { exit_code: ev.data.exit_code ?? null, signal: ev.data.signal ?? null, offset: ev.data.offset };
      if (pos !== undefined) assert.equal(ev.data.offset, pos);
    }
  }
  c.stdout = Buffer.concat(parts.stdout);
  c.stderr = Buffer.concat(parts.stderr);
  return c;
}

const PY = "python3";
const BINARY = [
  "import sys",
  "o, e = sys.stdout.buffer, sys.stderr.buffer",
  "for i in range(40):",
  "    o.write(bytes(range(256)) * (i + 1)); o.flush()",
  "    e.write(bytes([255 - i, 0, 0xc3, 0x28]) * 5); e.flush()",
  "o.write(b'\\xff\\xfe\\x00 not utf-8 \\xed\\xa0\\x80'); sys.exit(7)",
].join("\n");
const LARGE_MIB = 16;
const LARGE = `import sys\nb = bytes((i * 7 + 3) % 256 for i in range(1 << 16))\nfor _ in range(${LARGE_MIB} * 16): sys.stdout.buffer.write(b)\n`;

describe("frames against SSE on a real agentd", () => {
  const d = new Daemon();
  const token = `ts-frames-${process.pid}`;
  let c: AgentdClient;
  let n = 0;
  before(async () => {
    // A reader starved by a loaded machine for stream_stall_secs is left to
    // a gap (as the protocol says); these tests compare bytes, so the stall
    // allowance is set far above any scheduling delay.
    await d.start({ AGENTD_SSE_KEEPALIVE_SECS: "1", AGENTD_STREAM_STALL_SECS: "600" });
    await bootstrap(createAgentdClient({ baseUrl: d.base }), { agent_token: token });
    c = createAgentdClient({ baseUrl: d.base, token });
  });
  after(() => d.stop());

  async function bothWays(command: string[]): Promise<[Collected, Collected]> {
    const f = await collect(run(c, { exec_id: `fr-${++n}`, command }, { frames: true }));
    const s = await collect(run(c, { exec_id: `sse-${++n}`, command }, { frames: false }));
    return [f, s];
  }

  test("run asks for frames and gets them, in one exchange; so does follow", async () => {
    // Catches: frames not asked for (or not answered) where the document lists them.
    const rec = await recorder(d.port);
    try {
      const via = createAgentdClient({ baseUrl: rec.base, token });
      const got = await collect(run(via, { exec_id: "rec-1", command: ["printf", "a\\377b"] }));
      assert.deepEqual([...got.stdout], [0x61, 0xff, 0x62]);
      const accept = `${FRAMES_MEDIA_TYPE}, text/event-stream;q=0.5`;
      assert.deepEqual(rec.take(), [["GET", "/v1/capabilities", "*/*", "application/json"], ["POST", "/v1/exec/run", accept, FRAMES_MEDIA_TYPE]]);
      unwrap(await c.POST("/v1/exec/start", { body: { exec_id: "rec-2", command: ["printf", "xyz"] } }));
      assert.equal((await collect(follow(via, "rec-2"))).stdout.toString(), "xyz");
      assert.deepEqual(rec.take(), [["GET", "/v1/exec/rec-2/stream", accept, FRAMES_MEDIA_TYPE]]);
    } finally {
      await rec.close();
    }
  });

  test("falls back to SSE where the document lists no frames", async () => {
    const rec = await recorder(d.port, { stripFrames: true });
    try {
      const via = createAgentdClient({ baseUrl: rec.base, token });
      const got = await collect(run(via, { exec_id: "plain-1", command: [PY, "-c", BINARY] }));
      const ref = await collect(run(c, { exec_id: "plain-1f", command: [PY, "-c", BINARY] }));
      assert.deepEqual(got, ref);
      const log = rec.take();
      assert.deepEqual(log.map((r) => `${r[0]} ${r[1]}`), ["GET /v1/capabilities", "GET /v1/schema", "POST /v1/exec/run"]);
      assert.ok(!log[2][2].includes(FRAMES_MEDIA_TYPE));
      assert.equal(log[2][3], "text/event-stream");
    } finally {
      await rec.close();
    }
  });

  test("reads SSE when the answer is SSE", async () => {
    // A daemon that lists frames and answers SSE anyway. Catches: parsing SSE as frames.
    const rec = await recorder(d.port, { sseOnly: true });
    try {
      const via = createAgentdClient({ baseUrl: rec.base, token });
      const got = await collect(run(via, { exec_id: "sse-ans", command: [PY, "-c", BINARY] }));
      const ref = await collect(run(c, { exec_id: "sse-ref", command: [PY, "-c", BINARY] }));
      assert.deepEqual(got, ref);
      assert.equal(got.exit?.exit_code, 7);
      const last = rec.take().at(-1)!;
      assert.ok(last[2].includes(FRAMES_MEDIA_TYPE));
      assert.equal(last[3], "text/event-stream");
    } finally {
      await rec.close();
    }
  });

  test("binary output and stderr are identical", async () => {
    const [f, s] = await bothWays([PY, "-c", BINARY]);
    const want = Buffer.concat([...Array(40).keys()].map((i) => Buffer.concat(Array(i + 1).fill(Buffer.from([...Array(256).keys()])))));
    assert.ok(f.stdout.equals(Buffer.concat([want, Buffer.from([0xff, 0xfe, 0x00, ...Buffer.from(" not utf-8 "), 0xed, 0xa0, 0x80])])));
    assert.equal(f.stderr.length, 40 * 20);
    assert.deepEqual(f, s);
    assert.deepEqual([f.exit?.exit_code, f.exit?.offset], [7, f.stdout.length + f.stderr.length]);
  });

  test("a large output is identical", { timeout: 300_000 }, async () => {
    const [f, s] = await bothWays([PY, "-c", LARGE]);
    assert.deepEqual([f.gaps, s.gaps], [[], []]);
    const block = Buffer.from([...Array(1 << 16).keys()].map((i) => (i * 7 + 3) % 256));
    assert.equal(f.stdout.length, LARGE_MIB << 20);
    assert.ok(f.stdout.equals(Buffer.concat(Array(LARGE_MIB * 16).fill(block))));
    assert.ok(f.stdout.equals(s.stdout));
    assert.deepEqual(f.exit, s.exit);
  });

  test("exit codes and signals", async () => {
    for (const [command, want] of [[["true"], [0, null]], [["sh", "-c", "printf x; exit 3"], [3, null]],
      [["sh", "-c", "printf y >&2; kill -TERM $$"], [null, 15]]] as [string[], [number | null, number | null]][]) {
      const [f, s] = await bothWays(command);
      assert.deepEqual([f.exit?.exit_code, f.exit?.signal], want);
      assert.deepEqual(f, s);
    }
  });

  test("a gap is the same over frames and SSE", async () => {
    // A stream attached after the ack gets one gap for the released bytes, then the exit.
    unwrap(await c.POST("/v1/exec/start", { body: { exec_id: "gone", command: ["printf", "0123456789"] } }));
    await collect(follow(c, "gone"));
    unwrap(await c.POST("/v1/exec/{id}/ack", { params: { path: { id: "gone" } } }));
    const f = await collect(follow(c, "gone", { frames: true }));
    const s = await collect(follow(c, "gone", { frames: false }));
    assert.deepEqual(f.gaps, [[0, 10]]);
    assert.deepEqual(f, s);
    assert.deepEqual((await collect(follow(c, "gone", { offset: 4, frames: true }))).gaps, [[4, 10]]);
  });
});
