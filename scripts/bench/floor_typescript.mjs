// Node's runtime floor in `make bench-clients`: the least Node code moving
// the rows' $MICROVMS_BENCH_MIB MiB (256 unset) between itself and another
// process (floorpeer, a Go process as the engine is; argv[2]) through each
// channel Node has, with no engine and no package code, and 200 JSON-line
// round trips for the run row. Prints {"row@channel": seconds} per
// measurement; clients.py keeps each row's fastest channel. The clock runs
// from the peer's go (it is started and ready before) until the bytes are
// all in this process (read, stream) or all taken by the peer (write).
import { spawn } from "node:child_process";
import * as fs from "node:fs";
import * as fsp from "node:fs/promises";
import * as net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

const peerBin = process.argv[2];
const mib = Number(process.env.MICROVMS_BENCH_MIB ?? "256");
const size = mib * 1024 * 1024;
const data = Buffer.alloc(size, "0123456789abcdef");
const dir = fs.mkdtempSync(join(fs.existsSync("/dev/shm") ? "/dev/shm" : tmpdir(), "microvms-floor-node-"));
const CHUNK = 8 << 20; // one fs.read's length into a preallocated Buffer
const STREAM_CHUNK = 1 << 20; // a stream's chunk, a fresh Buffer each as a stream hands them out

const now = () => process.hrtime.bigint();
const secs = (t) => Number(process.hrtime.bigint() - t) / 1e9;

// A started, ready peer: its stderr lines come through next().
async function peer(args, stdio = ["pipe", "pipe", "pipe"]) {
  const p = spawn(peerBin, args, { stdio });
  const lines = [];
  const waiters = [];
  let tail = "";
  p.stderr.setEncoding("utf8");
  p.stderr.on("data", (s) => {
    tail += s;
    for (let i = tail.indexOf("\n"); i >= 0; i = tail.indexOf("\n")) {
      const line = tail.slice(0, i);
      tail = tail.slice(i + 1);
      const w = waiters.shift();
      if (w) w(line); else lines.push(line);
    }
  });
  const exited = new Promise((resolve) => p.on("exit", resolve));
  const next = () => (lines.length ? Promise.resolve(lines.shift()) : new Promise((resolve) => waiters.push(resolve)));
  const first = await next();
  if (first !== "ready") throw new Error(`floorpeer: ${first}`);
  return { p, next, exited };
}

function check(n, what) {
  if (n !== size) throw new Error(`${what}: ${n} bytes, expected ${size}`);
}

// read: 256 MiB into one Buffer of that size.
const reads = {
  "fifo, fs.readSync 8 MiB into one Buffer": async () => {
    const path = join(dir, "r.fifo");
    const { p, exited } = await peer(["send", "fifo", path, String(size)]);
    const fd = fs.openSync(path, "r");
    const t = now();
    p.stdin.write("g");
    const buf = Buffer.allocUnsafe(size);
    let n = 0;
    for (let m; n < size && (m = fs.readSync(fd, buf, n, Math.min(CHUNK, size - n), null)) > 0;) n += m;
    const took = secs(t);
    fs.closeSync(fd);
    fs.rmSync(path);
    await exited;
    check(n, "fifo");
    return took;
  },
  "fifo, fs.read 8 MiB into one Buffer": async () => {
    const path = join(dir, "r.fifo");
    const { p, exited } = await peer(["send", "fifo", path, String(size)]);
    const fh = await fsp.open(path, "r");
    const t = now();
    p.stdin.write("g");
    const buf = Buffer.allocUnsafe(size);
    let n = 0;
    for (let m; n < size && (m = (await fh.read(buf, n, Math.min(CHUNK, size - n), null)).bytesRead) > 0;) n += m;
    const took = secs(t);
    await fh.close();
    fs.rmSync(path);
    await exited;
    check(n, "fifo async");
    return took;
  },
  "unix socket, 'data' copied into one Buffer": async () => {
    const path = join(dir, "r.sock");
    const { p, exited } = await peer(["send", "unix", path, String(size)]);
    const sock = net.connect(path);
    await new Promise((resolve) => sock.once("connect", resolve));
    const t = now();
    p.stdin.write("g");
    const buf = Buffer.allocUnsafe(size);
    let n = 0;
    sock.on("data", (c) => { n += c.copy(buf, n); });
    await new Promise((resolve) => sock.once("end", resolve));
    const took = secs(t);
    sock.destroy();
    await exited;
    check(n, "unix");
    return took;
  },
  "child stdout pipe, 'data' copied into one Buffer": async () => {
    const { p, exited } = await peer(["send", "pipe", "-", String(size)]);
    const t = now();
    p.stdin.write("g");
    const buf = Buffer.allocUnsafe(size);
    let n = 0;
    p.stdout.on("data", (c) => { n += c.copy(buf, n); });
    await new Promise((resolve) => p.stdout.once("end", resolve));
    const took = secs(t);
    await exited;
    check(n, "pipe");
    return took;
  },
  "tmpfs file the peer wrote, fs.readFileSync": async () => {
    const path = join(dir, "r.file");
    const { p, next, exited } = await peer(["send", "file", path, String(size)]);
    const t = now();
    p.stdin.write("g");
    await next();
    const buf = fs.readFileSync(path);
    const took = secs(t);
    fs.rmSync(path);
    await exited;
    check(buf.length, "file");
    return took;
  },
};

// stream: 256 MiB taken in chunks, each its own memory, then dropped.
const streams = {
  "fifo, fs.readSync into a fresh 1 MiB Buffer each": async () => {
    const path = join(dir, "s.fifo");
    const { p, exited } = await peer(["send", "fifo", path, String(size)]);
    const fd = fs.openSync(path, "r");
    const t = now();
    p.stdin.write("g");
    let n = 0;
    for (let m; (m = fs.readSync(fd, Buffer.allocUnsafe(STREAM_CHUNK), 0, STREAM_CHUNK, null)) > 0;) n += m;
    const took = secs(t);
    fs.closeSync(fd);
    fs.rmSync(path);
    await exited;
    check(n, "fifo");
    return took;
  },
  "fifo, fs.read into a fresh 1 MiB Buffer each": async () => {
    const path = join(dir, "s.fifo");
    const { p, exited } = await peer(["send", "fifo", path, String(size)]);
    const fh = await fsp.open(path, "r");
    const t = now();
    p.stdin.write("g");
    let n = 0;
    for (let m; (m = (await fh.read(Buffer.allocUnsafe(STREAM_CHUNK), 0, STREAM_CHUNK, null)).bytesRead) > 0;) n += m;
    const took = secs(t);
    await fh.close();
    fs.rmSync(path);
    await exited;
    check(n, "fifo async");
    return took;
  },
  "unix socket 'data' chunks": async () => {
    const path = join(dir, "s.sock");
    const { p, exited } = await peer(["send", "unix", path, String(size)]);
    const sock = net.connect(path);
    await new Promise((resolve) => sock.once("connect", resolve));
    const t = now();
    p.stdin.write("g");
    let n = 0;
    sock.on("data", (c) => { n += c.length; });
    await new Promise((resolve) => sock.once("end", resolve));
    const took = secs(t);
    sock.destroy();
    await exited;
    check(n, "unix");
    return took;
  },
  "child stdout pipe 'data' chunks": async () => {
    const { p, exited } = await peer(["send", "pipe", "-", String(size)]);
    const t = now();
    p.stdin.write("g");
    let n = 0;
    p.stdout.on("data", (c) => { n += c.length; });
    await new Promise((resolve) => p.stdout.once("end", resolve));
    const took = secs(t);
    await exited;
    check(n, "pipe");
    return took;
  },
};

// write: a Buffer of 256 MiB given to the peer, until it says it has all.
const got = async (next) => {
  const line = await next();
  const n = Number(/^got (\d+)$/.exec(line)?.[1] ?? NaN);
  check(n, `peer: ${line}`);
};
const writes = {
  "fifo, fs.writeSync": async () => {
    const path = join(dir, "w.fifo");
    const { next, exited } = await peer(["recv", "fifo", path, String(size)]);
    const fd = fs.openSync(path, "w");
    const t = now();
    for (let n = 0; n < size;) n += fs.writeSync(fd, data, n, size - n);
    fs.closeSync(fd);
    await got(next);
    const took = secs(t);
    fs.rmSync(path);
    await exited;
    return took;
  },
  "unix socket, socket.write": async () => {
    const path = join(dir, "w.sock");
    const { next, exited } = await peer(["recv", "unix", path, String(size)]);
    const sock = net.connect(path);
    await new Promise((resolve) => sock.once("connect", resolve));
    const t = now();
    sock.end(data);
    await got(next);
    const took = secs(t);
    sock.destroy();
    await exited;
    return took;
  },
  "child stdin pipe, write": async () => {
    const { p, next, exited } = await peer(["recv", "pipe", "-", String(size)]);
    const t = now();
    p.stdin.end(data);
    await got(next);
    const took = secs(t);
    await exited;
    return took;
  },
  "tmpfs file, fs.writeFileSync, the peer reads it": async () => {
    const path = join(dir, "w.file");
    const { p, next, exited } = await peer(["recv", "file", path, String(size)]);
    const t = now();
    fs.writeFileSync(path, data);
    p.stdin.write("\n");
    await got(next);
    const took = secs(t);
    fs.rmSync(path);
    await exited;
    return took;
  },
};

// run: 200 JSON lines each way, one at a time, as run() round-trips a request.
async function echoRuns() {
  const p = spawn(peerBin, ["echo"], { stdio: ["pipe", "pipe", "inherit"] });
  let tail = "";
  let waiter = null;
  p.stdout.setEncoding("utf8");
  p.stdout.on("data", (s) => {
    tail += s;
    const i = tail.indexOf("\n");
    if (i >= 0 && waiter) {
      const line = tail.slice(0, i);
      tail = tail.slice(i + 1);
      const w = waiter;
      waiter = null;
      w(line);
    }
  });
  const line = () => new Promise((resolve) => { waiter = resolve; });
  const t = now();
  for (let i = 1; i <= 200; i++) {
    const answer = line();
    p.stdin.write(JSON.stringify({ id: i, op: "run", args: { command: ["true"], execId: `floor-${i}` } }) + "\n");
    if (JSON.parse(await answer).id !== i) throw new Error("echo out of order");
  }
  const took = secs(t);
  p.stdin.end();
  await new Promise((resolve) => p.on("exit", resolve));
  return took;
}

const emit = (row, channel, v) => console.log(JSON.stringify({ [`${row}@${channel}`]: v }));
try {
  for (const [row, set] of [[`write-${mib}MiB`, writes], [`read-${mib}MiB`, reads], [`stream-${mib}MiB`, streams]]) {
    for (const [channel, fn] of Object.entries(set)) {
      try {
        emit(row, channel, await fn());
      } catch (err) {
        emit(row, channel, { error: String(err?.message ?? err).slice(0, 200) });
      }
    }
  }
  emit("run-x200", "child stdin/stdout pipes, JSON lines", await echoRuns());
} finally {
  fs.rmSync(dir, { recursive: true, force: true });
}
