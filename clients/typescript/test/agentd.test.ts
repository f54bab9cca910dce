// The TypeScript client against a real agentd process on 127.0.0.1. Each
// suite starts its own daemon (identity repair off, in a temporary directory)
// and stops it after. The binary is $AGENTD_BIN, or built from cmd/agentd with
// `go build` when that is unset.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { createServer, connect, type AddressInfo, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { Daemon, freePort } from "./daemon.js";
import {
  AgentdError, StreamCut, VERSION_HEADER, bootstrap, createAgentdClient, follow, phaseValues,
  readFile, readTar, run, unwrap, writeFile, writeTar, type AgentdClient, type StreamEvent,
} from "../src/index.js";

async function rejects(p: Promise<unknown>): Promise<AgentdError> {
  try {
    await p;
  } catch (e) {
    assert.ok(e instanceof AgentdError, `expected AgentdError, got ${String(e)}`);
    return e;
  }
  assert.fail("expected the call to fail");
}

describe("before and at bootstrap", () => {
  const d = new Daemon();
  before(() => d.start());
  after(() => d.stop());

  test("bearer routes are 503 until the run hook installs a token; then 401 for a wrong one", async () => {
    const anon = createAgentdClient({ baseUrl: d.base });
    const h = await anon.GET("/v1/health");
    assert.equal(unwrap(h).bootstrapped, false);
    assert.equal(h.response.headers.get(VERSION_HEADER), unwrap(h).version);

    const early = createAgentdClient({ baseUrl: d.base, token: "t" });
    const e503 = await rejects(early.GET("/v1/exec/{id}", { params: { path: { id: "x" } } }).then(unwrap));
    assert.equal(e503.status, 503);
    assert.equal(e503.body, undefined); // no body: a plain `if (error)` would have missed it

    const bad = await rejects(bootstrap(anon, { agent_token: "" }));
    assert.equal(bad.status, 400);
    assert.match(String(bad.body), /agent_token/);

    await bootstrap(anon, { agent_token: "tok-1", env: { GREETING: "hi" } });
    await bootstrap(anon, { agent_token: "tok-1" }); // a platform retry is success
    assert.equal((await rejects(bootstrap(anon, { agent_token: "tok-2" }))).status, 409);

    const wrong = createAgentdClient({ baseUrl: d.base, token: "nope" });
    assert.equal((await rejects(wrong.GET("/v1/exec/{id}", { params: { path: { id: "x" } } }).then(unwrap))).status, 401);
  });
});

describe("a bootstrapped daemon", () => {
  const d = new Daemon();
  const token = `ts-${process.pid}-${Date.now()}`;
  let c: AgentdClient;
  before(async () => {
    await d.start({ AGENTD_SSE_KEEPALIVE_SECS: "1" });
    await bootstrap(createAgentdClient({ baseUrl: d.base }), { agent_token: token, env: { GREETING: "hi" } });
    c = createAgentdClient({ baseUrl: d.base, token });
  });
  after(() => d.stop());

  async function runToExit(client: AgentdClient, id: string, offset = 0) {
    const out = { stdout: Buffer.alloc(0), stderr: Buffer.alloc(0) };
    let last: StreamEvent | undefined;
    for await (const ev of follow(client, id, { offset })) {
      if (ev.event === "output") out[ev.data.stream] = Buffer.concat([out[ev.data.stream], Buffer.from(ev.data.output, "base64")]);
      last = ev;
    }
    assert.equal(last?.event, "exit");
    return { out, exit: last.event === "exit" ? last.data : assert.fail("no exit") };
  }

  test("start, stream, poll, ack", async () => {
    const started = unwrap(
      await c.POST("/v1/exec/start", { body: { exec_id: "sap", command: ['printf "$GREETING"; printf oops >&2; exit 3'], shell: true } }),
    );
    assert.deepEqual(started, { exec_id: "sap", phase: "running" });
    assert.ok(phaseValues.includes(started.phase));
    const { out, exit } = await runToExit(c, "sap");
    assert.equal(out.stdout.toString(), "hi"); // the run hook's launch env reached the child
    assert.equal(out.stderr.toString(), "oops");
    assert.deepEqual([exit.exit_code, exit.signal, exit.offset], [3, null, 6]);
    const polled = unwrap(await c.GET("/v1/exec/{id}", { params: { path: { id: "sap" } } }));
    assert.deepEqual([polled.phase, polled.exit_code, polled.stdout], ["exited", 3, "hi"]);
    const acked = unwrap(await c.POST("/v1/exec/{id}/ack", { params: { path: { id: "sap" } } }));
    assert.equal(acked.phase, "acked");
    const again = await rejects(c.POST("/v1/exec/{id}/ack", { params: { path: { id: "sap" } } }).then(unwrap));
    assert.deepEqual([again.status, again.slug], [409, "already_acked"]);
  });

  // Catches: run not taking the run route against agentd (the exec would stay
  // exited, unacked), and its events differing from follow's.
  test("run is one exchange and releases the exec", async () => {
    const out = { stdout: Buffer.alloc(0), stderr: Buffer.alloc(0) };
    let last: StreamEvent | undefined;
    for await (const ev of run(c, { exec_id: "one", command: ['printf "$GREETING"; printf e >&2; exit 4'], shell: true })) {
      if (ev.event === "output") out[ev.data.stream] = Buffer.concat([out[ev.data.stream], Buffer.from(ev.data.output, "base64")]);
      last = ev;
    }
    assert.deepEqual([out.stdout.toString(), out.stderr.toString()], ["hi", "e"]);
    assert.equal(last?.event, "exit");
    assert.equal(unwrap(await c.GET("/v1/exec/{id}", { params: { path: { id: "one" } } })).phase, "acked");
  });

  // A daemon whose document lists no run route (as the reference's): run
  // starts and follows, and the exec waits for the caller's ack. Catches run
  // posting to a route the document does not list.
  test("run falls back without the route", async () => {
    const plain = createAgentdClient({
      baseUrl: d.base,
      token,
      fetch: async (req) => {
        // The reference has no /v1/capabilities: its document is all there is.
        if (new URL(req.url).pathname.endsWith("/v1/capabilities")) return new Response(null, { status: 404 });
        const resp = await fetch(req);
        if (!new URL(req.url).pathname.endsWith("/v1/schema")) return resp;
        const doc = (await resp.json()) as { routes: { path: string }[] };
        doc.routes = doc.routes.filter((r) => r.path !== "/v1/exec/run");
        return new Response(JSON.stringify(doc), { status: 200, headers: { "Content-Type": "application/json" } });
      },
    });
    let last: StreamEvent | undefined;
    for await (const ev of run(plain, { exec_id: "two", command: ["printf", "ok"] })) last = ev;
    assert.equal(last?.event, "exit");
    assert.equal(unwrap(await c.GET("/v1/exec/{id}", { params: { path: { id: "two" } } })).phase, "exited");
    assert.equal(unwrap(await c.POST("/v1/exec/{id}/ack", { params: { path: { id: "two" } } })).stdout, "ok");
  });

  test("errors carry their slugs", async () => {
    const r = await c.GET("/v1/exec/{id}", { params: { path: { id: "no-such-exec" } } });
    assert.equal(r.error?.error, "unknown_exec"); // typed: the 404 body's slug enum
    const bad = await rejects(c.POST("/v1/exec/start", { body: { exec_id: "bad", command: [] } }).then(unwrap));
    assert.deepEqual([bad.status, bad.slug], [400, "malformed_request"]);
    unwrap(await c.POST("/v1/exec/start", { body: { exec_id: "slow", command: ["sleep", "30"] } }));
    const early = await c.POST("/v1/exec/{id}/ack", { params: { path: { id: "slow" } } });
    assert.equal(early.error?.error, "still_running");
    assert.equal(unwrap(await c.POST("/v1/exec/{id}/kill", { params: { path: { id: "slow" } } })).killed, true);
    const { exit } = await runToExit(c, "slow");
    assert.deepEqual([exit.exit_code, exit.signal], [null, 15]);
  });

  test("resume from an offset and across a cut connection", async () => {
    unwrap(await c.POST("/v1/exec/start", { body: { exec_id: "seq", command: ["seq", "1", "20000"] } }));
    const expected = Buffer.from(Array.from({ length: 20000 }, (_, i) => `${i + 1}\n`).join(""));
    assert.ok((await runToExit(c, "seq")).out.stdout.equals(expected));
    assert.ok((await runToExit(c, "seq", 1000)).out.stdout.equals(expected.subarray(1000)));

    // A relay that cuts its first connection after 4000 response bytes.
    let conns = 0;
    const sockets: Socket[] = [];
    const relay = createServer((client) => {
      conns++;
      const limit = conns === 1 ? 4000 : Infinity;
      let sent = 0;
      const upstream = connect(d.port, "127.0.0.1");
      sockets.push(client, upstream);
      client.on("data", (b) => upstream.write(b));
      upstream.on("data", (b: Buffer) => {
        if (sent + b.length >= limit) {
          client.end(b.subarray(0, limit - sent));
          upstream.destroy();
          client.destroySoon();
          return;
        }
        sent += b.length;
        client.write(b);
      });
      upstream.on("end", () => client.end());
      client.on("error", () => upstream.destroy());
      upstream.on("error", () => client.destroy());
    });
    await new Promise<void>((r) => relay.listen(0, "127.0.0.1", r));
    try {
      const via = createAgentdClient({ baseUrl: `http://127.0.0.1:${(relay.address() as AddressInfo).port}`, token });
      assert.ok((await runToExit(via, "seq")).out.stdout.equals(expected));
      assert.ok(conns >= 2, "the stream was never cut, so resume was not exercised");
    } finally {
      sockets.forEach((s) => s.destroy());
      await new Promise((r) => relay.close(r));
    }
  });

  test("a stream that cannot reconnect names its resume point", async () => {
    const dead = createAgentdClient({ baseUrl: `http://127.0.0.1:${await freePort()}`, token });
    await assert.rejects(
      (async () => {
        for await (const _ of follow(dead, "gone", { offset: 7, reconnects: 1, backoffMs: 1 })) void _;
      })(),
      (e: unknown) => e instanceof StreamCut && e.offset === 7,
    );
  });

  test("stdin", async () => {
    unwrap(await c.POST("/v1/exec/start", { body: { exec_id: "cat", command: ["cat"], stdin: true } }));
    const w = unwrap(
      await c.POST("/v1/exec/{id}/stdin", {
        params: { path: { id: "cat" } },
        body: { data_b64: Buffer.from("ping\n").toString("base64"), signal: "eof" },
      }),
    );
    assert.deepEqual([w.written, w.eof], [5, true]);
    const { out, exit } = await runToExit(c, "cat");
    assert.deepEqual([out.stdout.toString(), exit.exit_code], ["ping\n", 0]);
    const closed = await c.POST("/v1/exec/{id}/stdin", { params: { path: { id: "cat" } }, body: { data_b64: "eA==" } });
    assert.equal(closed.error?.error, "stdin_closed");
  });

  test("files and tar", async () => {
    const root = mkdtempSync(join(tmpdir(), "agentd-ts-fs-"));
    try {
      const target = join(root, "sub", "notes.txt");
      const body = Buffer.from([...Buffer.from("one\ntwo\n"), 0xff, 0x00, ...Buffer.from("three\n")]);
      await writeFile(c, target, body, "0600");
      assert.ok(readFileSync(target).equals(body)); // bytes exactly, not a JSON-quoted string
      assert.equal(statSync(target).mode & 0o777, 0o600);
      assert.ok(Buffer.from(await readFile(c, target)).equals(body));
      assert.equal(Buffer.from(await readFile(c, target, { start: 2, end: 2 })).toString(), "two\n");
      const missing = await rejects(readFile(c, join(root, "missing")));
      assert.deepEqual([missing.status, missing.body], [404, "no such file"]);
      assert.equal((await rejects(writeFile(c, target, "x", "0999"))).status, 400);

      // A tar made by the system tar, extracted by agentd, read back and listed.
      const src = join(root, "src");
      execFileSync("mkdir", ["-p", join(src, "d")]);
      execFileSync("sh", ["-c", `printf alpha > ${src}/a.txt; printf beta > ${src}/d/b.txt`]);
      const tar = execFileSync("tar", ["-C", src, "-cf", "-", "."]);
      await writeTar(c, join(root, "tree"), tar);
      assert.equal(readFileSync(join(root, "tree", "d", "b.txt"), "utf8"), "beta");
      const back = await readTar(c, join(root, "tree"));
      const listing = execFileSync("tar", ["-tf", "-"], { input: back }).toString().split("\n").map((n) => n.replace(/^\.\//, ""));
      assert.ok(listing.includes("a.txt") && listing.includes("d/b.txt"), listing.join(","));
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });

  test("health and the protocol document", async () => {
    const h = unwrap(await c.GET("/v1/health"));
    assert.equal(h.bootstrapped, true);
    assert.ok(h.disk === null || h.disk.available_bytes >= 0);
    const doc = unwrap(await c.GET("/v1/schema")) as Record<string, any>;
    assert.equal(doc.protocol_version, "1");
    assert.equal(doc.limits.sse_keepalive_secs, 1); // the running value, not the default
  });
});
