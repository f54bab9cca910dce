// The whole lifecycle in local mode through the real `microvm engine` and the
// real embedded emulator, and the README's blocks compiled under tsc --strict
// and the quickstart run verbatim. Needs $MICROVM_BIN and $MICROVM_AGENTD
// (make test-clients sets them, with MICROVMS_REQUIRE_ENGINE, which turns a
// missing one from a skip into a failure); no root.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import {
  ERROR_CLASSES, ERROR_KINDS, ExecStream, InvalidArgError, PreconditionError, ProtocolError, Sandbox, type StreamItem,
  type BuildOptions, type CreateOptions, type ExecOptions, type ForkOptions, type PoolOptions, type RestoreOptions, type RunManyOptions,
  type StartOptions,
} from "../src/sandbox.js";
import type * as C from "../src/contract.js";

// dist/test/sandbox.test.js -> the package directory.
const pkg = resolve(fileURLToPath(import.meta.url), "../../..");

const missing = ["MICROVM_BIN", "MICROVM_AGENTD"].filter((n) => !process.env[n]);
const skip = missing.length > 0 && !process.env.MICROVMS_REQUIRE_ENGINE ? `needs ${missing.join(" and ")}` : false;
if (missing.length > 0 && process.env.MICROVMS_REQUIRE_ENGINE) throw new Error(`MICROVMS_REQUIRE_ENGINE: ${missing.join(" and ")} unset`);

// Every argument the engine's launching ops take has its option here, by
// the same name, or is named below as the package's own business: a field
// added to api/engine.yaml's create, build, restore, fork, run_many,
// pool_open, run, stream or start without its TypeScript option fails this
// file's compile (each
// Missing is then the names it lacks, and the const's type is false). The
// wrong edit caught: restore, fork and runMany launching with no egress,
// env or policy, and run and stream with no user or group, because their
// options never had the fields.
type Missing<Args, Opts, Own extends string = never> = Exclude<keyof Args, keyof Opts | Own>;
type None<T> = [T] extends [never] ? true : false;
type ExecOwn = "command" | "shell" | "memoryLimitBytes" | "cpuMillicores" | "pidsLimit";
export const launchOptionsCovered: [
  None<Missing<C.CreateArgs, CreateOptions, "noKeepAwake">>,
  None<Missing<C.BuildArgs, BuildOptions>>,
  None<Missing<C.RestoreArgs, RestoreOptions, "ref" | "local" | "agentd">>,
  None<Missing<C.ForkArgs, ForkOptions, "count" | "noPause">>,
  None<Missing<C.RunManyArgs, RunManyOptions, "command">>,
  None<Missing<C.PoolOpenArgs, PoolOptions>>,
  // The exec ops: an argv or a script is cmd, the three limits are one
  // limits object, a terminal is pty, and the sink is the package's own.
  None<Missing<C.RunArgs, ExecOptions, ExecOwn>>,
  None<Missing<C.StreamArgs, ExecOptions, ExecOwn | "sink">>,
  None<Missing<C.StartArgs, StartOptions, ExecOwn | "tty" | "rows" | "cols">>,
] = [true, true, true, true, true, true, true, true, true];

/** An output event as the engine's sink hands it over: its exact bytes, and their text decoded alone. */
function out(bytes: number[], offset: number, stream = "stdout"): Record<string, unknown> {
  const data = Uint8Array.from(bytes);
  return { event: "output", stream, offset, text: Buffer.from(data).toString("utf8"), bytes: data.length, lossy: false, data };
}

async function linesOf(events: Record<string, unknown>[], stream?: string): Promise<string[]> {
  async function* gen() { for (const ev of events) yield ev; }
  const got: string[] = [];
  for await (const line of new ExecStream(gen() as AsyncIterable<never>).lines(stream)) got.push(line);
  return got;
}

describe("ExecStream.lines", () => {
  // "é café" and a second line, cut inside both é's and between lines; a
  // stderr chunk between the halves; then a gap, and a character begun
  // before it whose continuation byte is after it.
  const events = [out([0xc3], 0), out([0x65, 0x72, 0x72, 0xc3], 1, "stderr"), out([0xa9, 0x20, 0x63, 0x61, 0x66, 0xc3], 5),
    out([0xa9, 0x0a, 0x61, 0x62, 0x0a, 0x63], 12), out([0x64, 0x0a, 0xe2, 0x82], 19), { event: "gap", from: 23, to: 40 },
    out([0xac, 0x78], 40), { event: "exit", exitCode: 0, signal: null, truncated: false, writersMayBeAlive: false, offset: 42 }];

  test("a character split between chunks comes out whole", async () => {
    // Catches: lines() joining each chunk's own text (decoded alone), which
    // makes each split é two U+FFFD; and a gap that lets the bytes after it
    // finish a character begun before it.
    assert.deepEqual(await linesOf(events), ["\u00e9 caf\u00e9", "ab", "cd", "\ufffd\ufffdx"]);
    assert.deepEqual(await linesOf(events, "stderr"), ["err\ufffd"]);
  });

  test("a line past maxLine comes out in pieces", async () => {
    // Catches: lines() holding a line until its newline whatever its length,
    // so a guest printing without newlines grows this process without bound;
    // and a cut that turns the newline ending an exactly full last piece into
    // an empty line.
    const ascii = (s: string, offset: number) => out([...Buffer.from(s)], offset);
    const evs = [ascii("abcde", 0), ascii("fghij", 5), ascii("k\n\nlmnopqrs", 10), ascii("\n", 21)];
    const got: string[] = [];
    async function* gen() { for (const ev of evs) yield ev; }
    for await (const line of new ExecStream(gen() as AsyncIterable<never>).lines("stdout", 4)) got.push(line);
    assert.deepEqual(got, ["abcd", "efgh", "ijk", "", "lmno", "pqrs"]);
    await assert.rejects(async () => { for await (const _ of new ExecStream(gen() as AsyncIterable<never>).lines("stdout", 0)) { /* none */ } }, InvalidArgError);
  });

  test("text alone (the engine's event lines) still splits", async () => {
    const strip = (ev: Record<string, unknown>) => { const { data: _data, ...rest } = ev; return rest; };
    assert.deepEqual(await linesOf([strip(out([0x6f, 0x6e, 0x65, 0x0a, 0x74, 0x77], 0)), strip(out([0x6f, 0x0a], 6))]), ["one", "two"]);
  });
});

/** The emulator guest init processes whose parent is pid (the engine). */
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

describe("errors", () => {
  test("every generated code has its class", () => {
    // Catches: a code in ERROR_KINDS (generated) without a class, or a class
    // whose kind or exit code disagrees with the table.
    assert.deepEqual(Object.keys(ERROR_CLASSES).sort(), Object.keys(ERROR_KINDS).sort());
    for (const [code, cls] of Object.entries(ERROR_CLASSES)) {
      const err = new cls("m", code as keyof typeof ERROR_KINDS);
      assert.equal(err.exitCode, ERROR_KINDS[code as keyof typeof ERROR_KINDS].exitCode);
    }
  });

  test("a missing binary is a precondition naming it", async () => {
    await assert.rejects(Sandbox.create({ local: true, binary: "/nonexistent/microvm" }), (err: unknown) =>
      err instanceof PreconditionError && err.exitCode === 12 && err.message.includes("/nonexistent/microvm"));
  });
});

describe("sandbox", { skip }, () => {
  test("the whole lifecycle", async () => {
    const sb = await Sandbox.create({ local: true });
    const enginePid = sb.enginePid!;
    const guests = guestInitsOf(enginePid);
    assert.equal(guests.length, 1, "one guest init under the engine");
    try {
      assert.equal(await sb.lifecycle(), "RUNNING");
      const ok = await sb.run("echo hi");
      assert.deepEqual([ok.exitCode, ok.stdout, ok.ok], [0, "hi\n", true]);
      // Usage rides on the result; the wrong edit is dropping it in run.
      assert.deepEqual([ok.usage?.stdoutBytes, ok.oomKilled], [3, false]);
      // A guest without a delegated cgroup refuses limits rather than run unlimited.
      await assert.rejects(sb.run("true", { limits: { memoryBytes: 64 << 20 } }), /limits/);
      // A non-zero exit is a result: the wrong edit is rejecting on it.
      const three = await sb.run("echo oops >&2; exit 3");
      assert.deepEqual([three.exitCode, three.stderr, three.ok], [3, "oops\n", false]);
      assert.equal((await sb.run(["printf", "%s|", "a b", "c"])).stdout, "a b|c|");

      // Line by line while it runs: the command waits for a file written
      // only after the first line arrives; output held until exit makes it exit 9.
      const gate = "/tmp/stream-gate";
      const st = sb.stream(`echo one; i=0; while [ ! -e ${gate} ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; [ -e ${gate} ] || exit 9; echo two`);
      const seen: string[] = [];
      for await (const line of st.lines()) {
        seen.push(line);
        if (line === "one") await sb.files.write(gate, "");
      }
      assert.deepEqual(seen, ["one", "two"]);
      assert.equal(st.exit?.exitCode, 0);
      // A character whose bytes leave the guest in two writes, so in two
      // chunks: lines() puts it back together.
      const split: string[] = [];
      for await (const line of sb.stream("printf '\\303'; sleep 0.4; printf '\\251t\\n'").lines()) split.push(line);
      assert.deepEqual(split, ["\u00e9t"]);
      // 100,000 bytes with no newline, bounded at 30,000 code units.
      const cut: number[] = [];
      for await (const line of sb.stream("head -c 100000 /dev/zero | tr '\\0' a").lines("stdout", 30000)) cut.push(line.length);
      assert.deepEqual(cut, [30000, 30000, 30000, 10000]);
      const items: StreamItem[] = [];
      for await (const item of sb.stream("echo x; exit 4")) items.push(item);
      assert.equal(items[0]?.kind, "output");
      const last = items[items.length - 1];
      assert.ok(last?.kind === "exit" && last.exitCode === 4);

      await sb.files.write("/work/notes.txt", "kept\n");
      assert.equal(await sb.files.read("/work/notes.txt"), "kept\n");
      await sb.files.write("/work/bin.dat", new Uint8Array([0, 255, 1]), { mode: "0600" });
      assert.deepEqual([...(await sb.files.readBytes("/work/bin.dat"))], [0, 255, 1]);
      // maxBytes bounds what this process takes of a guest's file: refused
      // before the read when its size says so, and by the engine as the read
      // passes it when it does not (a symlink's size is the link's).
      // Catches: maxBytes not sent to the engine, or checked against the stat alone.
      await sb.run("head -c 100 /dev/zero > /tmp/hundred; ln -sf /tmp/hundred /tmp/hundred-link");
      assert.equal((await sb.files.readBytes("/tmp/hundred", { maxBytes: 100 })).length, 100);
      assert.equal((await sb.files.readBytes("/tmp/hundred-link", { maxBytes: 100 })).length, 100);
      for (const p of ["/tmp/hundred", "/tmp/hundred-link"]) {
        await assert.rejects(sb.files.readBytes(p, { maxBytes: 99 }), (e: unknown) => e instanceof InvalidArgError && /max/i.test(e.message));
      }
      const host = mkdtempSync(join(tmpdir(), "maxbytes-"));
      try {
        await assert.rejects(sb.files.download("/tmp/hundred", join(host, "got"), { maxBytes: 99 }), InvalidArgError);
        assert.deepEqual(readdirSync(host), [], "a download past maxBytes left its file");
        assert.equal(await sb.files.download("/tmp/hundred", join(host, "got"), { maxBytes: 100 }), 100);
      } finally {
        rmSync(host, { recursive: true, force: true });
      }
      await assert.rejects(sb.files.readBytes("/tmp/hundred", { maxBytes: 0 }), InvalidArgError);
      const entries = await sb.files.list("/work");
      assert.deepEqual(entries.map((e) => e.name).sort(), ["bin.dat", "notes.txt"]);
      const bin = entries.find((e) => e.name === "bin.dat")!;
      assert.deepEqual([bin.size, bin.mode], [3, "0600"]);

      await assert.rejects(sb.files.read("/work/missing.txt"), (err: unknown) =>
        err instanceof ProtocolError && err.code === "ERR_PROTOCOL" && err.exitCode === 5 && err.wireKind === "NotFound");

      const tmp = mkdtempSync(join(tmpdir(), "microvms-ts-"));
      try {
        mkdirSync(join(tmp, "src", "sub"), { recursive: true });
        writeFileSync(join(tmp, "src", "a.txt"), "alpha");
        writeFileSync(join(tmp, "src", "sub", "b.txt"), "beta!");
        assert.equal(await sb.files.uploadDir(join(tmp, "src"), "/work/tree"), 10);
        assert.equal((await sb.run("cat /work/tree/a.txt /work/tree/sub/b.txt")).stdout, "alphabeta!");
        await sb.run("echo made-in-vm > /work/tree/sub/c.txt");
        await sb.files.downloadDir("/work/tree", join(tmp, "dst"));
        assert.equal(readFileSync(join(tmp, "dst", "sub", "c.txt"), "utf8"), "made-in-vm\n");
        assert.equal(readFileSync(join(tmp, "dst", "a.txt"), "utf8"), "alpha");
      } finally {
        rmSync(tmp, { recursive: true, force: true });
      }

      assert.equal(await sb.suspend(), "SUSPENDED");
      // The state machine is Go's: a run on a suspended VM is refused locally.
      await assert.rejects(sb.run("true"), InvalidArgError);
      assert.equal(await sb.resume(), "RUNNING");
      assert.equal(await sb.files.read("/work/notes.txt"), "kept\n");

      // Another process attaches by id and token, sees the file, leaves one.
      const child = execFileSync(process.execPath, ["--input-type=module", "-e", ATTACH_SCRIPT, sb.microvmId, sb.agentToken, sb.controlEndpoint ?? ""],
        { cwd: pkg, encoding: "utf8", timeout: 120_000 });
      assert.equal(child, "kept\n");
      assert.equal(await sb.files.read("/work/from-child.txt"), "child was here");
      assert.equal(await sb.lifecycle(), "RUNNING", "closing an attached sandbox must not terminate it");

      const report = await sb.terminate();
      assert.equal(report.microvmId, sb.microvmId);
      assert.deepEqual(report.undeleted, []);
      assert.equal(report.leaked, false);
      const cost = await sb.cost();
      assert.ok(cost.items.length > 0);
      assert.ok(Number(cost.totalUsd) > 0);
      assert.ok(cost.text.includes(sb.microvmId));
      assert.ok(cost.items.some((l) => l.phase === "suspended"));
    } finally {
      await sb.close();
    }
    // The process's shared engine lives on for the next sandbox; this
    // sandbox's guest does not (close released its handle).
    assert.deepEqual(guests.filter(alive), [], "no guest is left behind");
  });

  test("await using stops every guest", async () => {
    // Catches: a Symbol.asyncDispose that does not close the engine.
    let pid = 0;
    let guests: number[] = [];
    {
      await using sb = await Sandbox.create({ local: true });
      pid = sb.enginePid!;
      guests = guestInitsOf(pid);
      assert.equal(guests.length, 1);
    }
    assert.deepEqual(guests.filter(alive), []);
    assert.deepEqual(guestInitsOf(pid), []);
  });

  test("url reaches its guest port and no other", async () => {
    // Catches: a url op minting for more than the one port (the 9000
    // request would answer 200), headers that do not open the port, and a
    // bad port reaching the control plane instead of InvalidArgError.
    await using sb = await Sandbox.create({ local: true });
    await sb.files.write("/tmp/site/marker.txt", "from the guest\n");
    await sb.run("cd /tmp/site && nohup /usr/bin/python3 -m http.server 8080 --bind 127.0.0.1 >/dev/null 2>&1 &");
    const u = await sb.url(8080, { expiresMinutes: 5 });
    assert.deepEqual([u.port, u.headers["X-aws-proxy-port"]], [8080, "8080"]);
    assert.deepEqual(u.subprotocols, ["lambda-microvms", "lambda-microvms.authentication." + u.headers["X-aws-proxy-auth"], "lambda-microvms.port.8080"]);
    let body = "";
    for (let i = 0; i < 100; i++) { // bounded: python3 listens within a second or two
      const r = await fetch(u.url, { headers: u.headers });
      if (r.status === 200) { body = await r.text(); break; }
      assert.equal(r.status, 502, "only 'nothing listens yet' may precede the listing");
      await new Promise((res) => setTimeout(res, 100));
    }
    assert.match(body, /marker\.txt/);
    const other = await fetch(u.url + "v1/health", { headers: { ...u.headers, "X-aws-proxy-port": "9000" } });
    assert.equal(other.status, 403);
    await assert.rejects(sb.url(0), InvalidArgError);
    await assert.rejects(sb.url(8080, { expiresMinutes: 61 }), InvalidArgError);
  });

  test("a killed caller leaves no guest", async () => {
    // Catches: an engine that outlives its caller (and keeps its guest).
    const child = spawn(process.execPath, ["--input-type=module", "-e", ORPHAN_SCRIPT], { cwd: pkg, stdio: ["ignore", "pipe", "inherit"] });
    const enginePid = await new Promise<number>((res) => child.stdout.once("data", (b: Buffer) => res(Number(b.toString().trim()))));
    const guests = guestInitsOf(enginePid);
    assert.equal(guests.length, 1);
    child.kill("SIGKILL");
    for (let i = 0; i < 600 && (alive(enginePid) || guests.some(alive)); i++) await new Promise((r) => setTimeout(r, 100));
    assert.equal(alive(enginePid), false);
    assert.deepEqual(guests.filter(alive), []);
  });

  test("the README's blocks compile under tsc --strict and the quickstart runs verbatim", () => {
    const blocks = [...readFileSync(join(pkg, "README.md"), "utf8").matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]!);
    assert.ok(blocks.length >= 2);
    // Inside the package, so `import ... from "microvms"` resolves to it by its own name.
    const dir = join(pkg, "dist", "readme-check");
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(dir, { recursive: true });
    blocks.forEach((b, i) => writeFileSync(join(dir, `example_${i}.ts`), b));
    writeFileSync(join(dir, "tsconfig.json"), JSON.stringify({
      extends: "../../tsconfig.json", compilerOptions: { rootDir: ".", outDir: "out", strict: true }, include: ["*.ts"],
    }));
    execFileSync(join(pkg, "node_modules", ".bin", "tsc"), ["-p", dir], { stdio: "inherit" });
    const out = execFileSync(process.execPath, [join(dir, "out", "example_0.js")], { encoding: "utf8", timeout: 300_000 });
    const lines = out.split("\n");
    assert.deepEqual(lines.slice(0, 5), ["0 hello from the sandbox", "3 oops", "tick 1", "tick 2", "tick 3"]);
    assert.ok(lines.includes("kept across a suspend"));
    assert.ok(lines.includes("left behind: []"));
  });
});

const ATTACH_SCRIPT = `
import { Sandbox } from "microvms";
const [id, token, endpoint] = process.argv.slice(1);
const other = await Sandbox.attach(id, { agentToken: token, controlEndpoint: endpoint || null });
process.stdout.write(await other.files.read("/work/notes.txt"));
await other.files.write("/work/from-child.txt", "child was here");
await other.close();
`;

const ORPHAN_SCRIPT = `
import { Sandbox } from "microvms";
const sb = await Sandbox.create({ local: true });
console.log(sb.enginePid);
setInterval(() => {}, 1000);
`;
