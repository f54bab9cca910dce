/**
 * microvms: MicroVM sandboxes from TypeScript.
 *
 *   await using sb = await Sandbox.create({ local: true });
 *   const r = await sb.run("echo hi; exit 3");   // r.exitCode === 3: a result, not a throw
 *
 * The lifecycle, the platform's traps, the state machine and the cost engine
 * are the Go library's: each Sandbox drives one `microvm engine` child
 * process over the line protocol of api/engine.yaml, whose types
 * (src/contract.ts) are generated. Nothing here decides what Go decides.
 */
import { isUtf8 } from "node:buffer";
import { spawn, type ChildProcess } from "node:child_process";
import { randomUUID } from "node:crypto";
import { accessSync, constants as fsConstants, statSync } from "node:fs";
import { access, mkdtemp, open, readFile, rm, statfs, writeFile, type FileHandle } from "node:fs/promises";
import { tmpdir } from "node:os";
import { delimiter, join, resolve as resolvePath } from "node:path";
import { createServer, type Socket } from "node:net";
import { createInterface } from "node:readline";

import * as C from "./contract.js";
import { bundledBinary } from "./packaged.js";
import { FrameError, FrameReader, type Frame } from "./frames.js";
import { FRAME } from "./wire.js";

export * as contract from "./contract.js";
export { ERROR_KINDS, PROTOCOL_VERSION, type ErrorCode } from "./contract.js";

/** The environment variable naming the microvm binary. */
export const BINARY_ENV = "MICROVM_BIN";

/** Base of every error this package throws; branch on the class or `code`, never on the message. */
export class MicrovmError extends Error {
  /** The stable ERR_* code of api/errors.yaml. */
  readonly code: C.ErrorCode;
  /** The error kind behind the code (InvalidArg, Protocol...). */
  readonly kind: string;
  /** The exit status the microvm CLI exits with for the same failure. */
  readonly exitCode: number;
  /** The daemon's wire kind (NotFound, Conflict...) when the daemon produced it. */
  readonly wireKind: string | null;
  /** The docs/PLATFORM.md finding behind a local refusal, or empty. */
  readonly finding: string;
  readonly findingSlug: string;
  /** The envelope's partial result. */
  readonly data: Record<string, unknown>;

  constructor(message: string, code: C.ErrorCode, extra: { wireKind?: string | null; finding?: string; findingSlug?: string; data?: Record<string, unknown> } = {}) {
    super(message);
    this.name = new.target.name;
    this.code = code;
    this.kind = C.ERROR_KINDS[code].kind;
    this.exitCode = C.ERROR_KINDS[code].exitCode;
    this.wireKind = extra.wireKind ?? null;
    this.finding = extra.finding ?? "";
    this.findingSlug = extra.findingSlug ?? "";
    this.data = extra.data ?? {};
  }

  /** Whether the identical request may succeed if sent again. */
  get retryable(): boolean {
    return this.code === "ERR_RETRYABLE";
  }
}

export class UnexpectedError extends MicrovmError {}
export class InvalidArgError extends MicrovmError {}
export class RetryableError extends MicrovmError {}
export class CredentialsError extends MicrovmError {}
export class ProtocolError extends MicrovmError {}
export class BuildWedgedError extends MicrovmError {}
export class LaunchDiedError extends MicrovmError {}
export class WindowClosedError extends MicrovmError {}
export class PlatformError extends MicrovmError {}
export class TimeoutError extends MicrovmError {}
export class InterruptedError extends MicrovmError {}
export class PreconditionError extends MicrovmError {}
export class ExecFailedError extends MicrovmError {}
export class CheckpointRefusedError extends MicrovmError {}

/** The class of each generated error code; `satisfies` makes a code added to api/errors.yaml a compile error here. */
export const ERROR_CLASSES = {
  ERR_UNEXPECTED: UnexpectedError,
  ERR_INVALID_ARG: InvalidArgError,
  ERR_RETRYABLE: RetryableError,
  ERR_CREDENTIALS: CredentialsError,
  ERR_PROTOCOL: ProtocolError,
  ERR_BUILD_WEDGED: BuildWedgedError,
  ERR_LAUNCH_DIED: LaunchDiedError,
  ERR_WINDOW_CLOSED: WindowClosedError,
  ERR_PLATFORM: PlatformError,
  ERR_TIMEOUT: TimeoutError,
  ERR_INTERRUPTED: InterruptedError,
  ERR_PRECONDITION: PreconditionError,
  ERR_EXEC_FAILED: ExecFailedError,
  ERR_CHECKPOINT_REFUSED: CheckpointRefusedError,
} satisfies Record<C.ErrorCode, typeof MicrovmError>;

function fromEnvelope(env: C.FailureEnvelope): MicrovmError {
  const code = (env.code in C.ERROR_KINDS ? env.code : "ERR_UNEXPECTED") as C.ErrorCode;
  const data = (env.data ?? {}) as Record<string, unknown>;
  const kind = typeof data.kind === "string" ? data.kind : null;
  return new ERROR_CLASSES[code](env.error, code, { wireKind: kind, finding: env.finding, findingSlug: env.findingSlug, data });
}

function isExecutable(path: string): boolean {
  try {
    accessSync(path, fsConstants.X_OK);
    return statSync(path).isFile();
  } catch {
    return false;
  }
}

/** The microvm binary: `explicit`, then $MICROVM_BIN, then the platform sub-package's, then PATH. */
export function findBinary(explicit?: string): string {
  for (const [candidate, origin] of [[explicit, "the binary option"], [process.env[BINARY_ENV], `$${BINARY_ENV}`]] as const) {
    if (candidate) {
      if (isExecutable(candidate)) return candidate;
      throw new PreconditionError(`${origin} names ${candidate}, which is not an executable file`, "ERR_PRECONDITION");
    }
  }
  const bundled = bundledBinary();
  if (bundled) return bundled;
  for (const dir of (process.env.PATH ?? "").split(delimiter)) {
    if (dir && isExecutable(join(dir, "microvm"))) return join(dir, "microvm");
  }
  throw new PreconditionError(
    `the microvm binary was not found: pass { binary }, set $${BINARY_ENV}, or put microvm on PATH (\`make build\` in the repository writes bin/microvm)`,
    "ERR_PRECONDITION",
  );
}

interface Pending {
  event(ev: unknown): void;
  done(env: Record<string, unknown> | null): void;
}

/**
 * A running `microvm engine` process: requests out on stdin, frames routed
 * back by id. Every Engine on it (one per sandbox handle) shares its ids.
 */
class EngineProcess {
  readonly proc: ChildProcess;
  private readonly pending = new Map<number, Pending>();
  private nextId = 0;
  private nextHandle = 0;
  /** Handles not yet released. */
  live = 0;
  exited = false;
  private closing = false;
  private readonly exit: Promise<void>;

  constructor(readonly binary: string) {
    this.proc = spawn(binary, ["engine"], { stdio: ["pipe", "pipe", "inherit"] });
    // A write to an engine that just died fails EPIPE; its "close" answers
    // every pending request with the error naming it, so this one is not news.
    this.proc.stdin!.on("error", () => {});
    this.exit = new Promise((resolve) => {
      this.proc.once("close", () => {
        this.exited = true;
        for (const p of this.pending.values()) p.done(null);
        this.pending.clear();
        resolve();
      });
      this.proc.once("error", () => resolve());
    });
    const lines = createInterface({ input: this.proc.stdout! });
    lines.on("line", (line) => {
      let frame: { id?: number; event?: unknown; envelope?: Record<string, unknown> };
      try {
        frame = JSON.parse(line);
      } catch {
        return;
      }
      const p = this.pending.get(frame.id ?? -1);
      if (!p) return;
      if (frame.envelope !== undefined) {
        this.pending.delete(frame.id!);
        this.refresh();
        p.done(frame.envelope);
      } else {
        p.event(frame.event);
      }
    });
    this.refresh();
  }

  /** A new sandbox handle on this engine. */
  handle(): string {
    return `sb-${++this.nextHandle}`;
  }

  /** Keep Node alive only while a request waits, so a forgotten Sandbox does not hang the process. */
  private refresh(): void {
    const busy = (this.pending.size > 0 || this.closing) && !this.exited;
    const handles = [this.proc, this.proc.stdout, this.proc.stdin] as unknown as Array<{ ref?: () => void; unref?: () => void } | null>;
    for (const h of handles) {
      if (busy) h?.ref?.();
      else h?.unref?.();
    }
  }

  /** Send one request; the id it went under (0 when the engine is gone and p was told so). */
  send(op: C.OpName, args: object, p: Pending, sandbox?: string): number {
    if (this.exited) {
      p.done(null);
      return 0;
    }
    const id = ++this.nextId;
    this.pending.set(id, p);
    this.refresh();
    const req: Record<string, unknown> = { id, op, args };
    if (sandbox !== undefined) req.sandbox = sandbox;
    this.proc.stdin!.write(JSON.stringify(req) + "\n");
    return id;
  }

  inFlight(id: number): boolean {
    return !this.exited && this.pending.has(id);
  }

  dead(): UnexpectedError {
    return new UnexpectedError(`the microvm engine (${this.binary}, pid ${this.proc.pid}) exited before answering (exit status ${this.proc.exitCode}); its stderr says why`, "ERR_UNEXPECTED");
  }

  /** End the engine: it tears down what it launched under every handle, and stops its emulators. */
  async close(): Promise<void> {
    this.closing = true;
    this.refresh();
    if (!this.exited) this.proc.stdin!.end();
    await this.exit;
  }
}

/**
 * The engines this process shares among its sandboxes, one per binary
 * (api/engine.yaml request sandbox): a create costs a request, not a Go
 * process start. Node's exit closes the pipe, which ends each engine and
 * tears down what it launched.
 */
const sharedEngines = new Map<string, EngineProcess>();

/**
 * The key of the shared engine for binary: the engine reads its settings
 * (region, endpoints, bucket) from the environment it started with, so a
 * changed process.env gets another one; one left behind ends with its last
 * sandbox.
 */
function sharedKey(binary: string): string {
  return JSON.stringify([binary, Object.entries(process.env).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))]);
}

/** A `microvm engine` as one sandbox sees it: its own process, or a handle on the shared one. */
class Engine extends C.Ops {
  private released = false;

  private constructor(private readonly p: EngineProcess, private readonly sandbox?: string) {
    super();
  }

  /** An engine of its own, ended by close. */
  static own(binary?: string): Engine {
    return new Engine(new EngineProcess(findBinary(binary)));
  }

  /** A new sandbox handle on this process's engine for binary, started (or restarted, when it died) on first use. */
  static shared(binary?: string): Engine {
    const path = findBinary(binary);
    const key = sharedKey(path);
    let p = sharedEngines.get(key);
    if (p === undefined || p.exited) {
      p = new EngineProcess(path);
      sharedEngines.set(key, p);
    }
    p.live++;
    return new Engine(p, p.handle());
  }

  get pid(): number | undefined {
    return this.p.proc.pid;
  }

  /** The sandbox handle on a shared engine; undefined when the engine is this sandbox's own. */
  get handle(): string | undefined {
    return this.sandbox;
  }

  private send(op: C.OpName, args: object, p: Pending): number {
    return this.p.send(op, args, p, this.sandbox);
  }

  private settle(env: Record<string, unknown> | null): unknown {
    if (env === null) throw this.p.dead();
    if (env.status !== "ok") throw fromEnvelope(env as unknown as C.FailureEnvelope);
    return env.data;
  }

  protected call(op: C.OpName, args: object): Promise<unknown> {
    return new Promise((resolve, reject) => {
      this.send(op, args, {
        event: () => {},
        done: (env) => {
          try {
            resolve(this.settle(env));
          } catch (err) {
            reject(err);
          }
        },
      });
    });
  }

  /** The id of the request the last stream() sent: what cancel names. */
  lastStreamId = 0;

  protected stream(op: C.OpName, args: object): AsyncIterable<unknown> {
    const queue: Array<{ ev?: unknown; env?: Record<string, unknown> | null }> = [];
    let wake: (() => void) | undefined;
    const push = (item: { ev?: unknown; env?: Record<string, unknown> | null }) => {
      queue.push(item);
      wake?.();
    };
    const id = (this.lastStreamId = this.send(op, args, { event: (ev) => push({ ev }), done: (env) => push({ env }) }));
    const settle = this.settle.bind(this);
    const cancel = (requestId: number) => this.cancelRequest(requestId);
    return {
      async *[Symbol.asyncIterator]() {
        let finished = false;
        try {
          for (;;) {
            while (queue.length === 0) await new Promise<void>((r) => (wake = r));
            const item = queue.shift()!;
            if ("env" in item) {
              finished = true;
              yield settle(item.env ?? null);
              return;
            }
            yield item.ev;
          }
        } finally {
          // Left early (break, return, throw): end the engine's request now,
          // not when the engine ends; its interrupted answer is nobody's.
          if (!finished) await cancel(id);
        }
      },
    };
  }

  /**
   * A FIFO for a sink in a private directory, made by the engine (Node has
   * no mkfifo: api/engine.yaml mkfifo) and held open for reading without
   * blocking, so the engine's open for writing, which refuses a FIFO with
   * no reader, finds one. Read through fifoReader, ended by closeFifo.
   */
  private async openFifo(): Promise<Fifo> {
    const dir = await mkdtemp(join(tmpdir(), "microvm-sink-"));
    try {
      const path = join(dir, "f");
      await this.opMkfifo({ path });
      return { dir, path, hold: await open(path, fsConstants.O_RDONLY | fsConstants.O_NONBLOCK) };
    } catch (err) {
      await rm(dir, { recursive: true, force: true });
      throw err;
    }
  }

  /**
   * stream() with the events read as binary frames from a FIFO the engine
   * writes (the op's sink, api/engine.yaml) in large reads: the output's
   * exact bytes (data beside text), never JSON-escaped onto the engine
   * pipe. The request is sent at once, as stream() sends it.
   */
  protected sinkStream(op: C.OpName, args: object): AsyncIterable<unknown> {
    let envelope: Promise<Record<string, unknown> | null> = Promise.resolve(null);
    let id = 0;
    const setup = (async () => {
      const fifo = await this.openFifo();
      envelope = new Promise((resolve) => {
        id = this.send(op, { ...args, sink: fifo.path }, { event: () => {}, done: resolve });
      });
      return fifo;
    })();
    setup.catch(() => undefined); // surfaced when iterated
    const settle = this.settle.bind(this);
    const cancel = (requestId: number) => this.cancelRequest(requestId);
    return {
      async *[Symbol.asyncIterator]() {
        const fifo = await setup;
        let finished = false;
        try {
          const fh = await fifoReader(fifo, envelope);
          const reader = new FrameReader({ read: chunkReader(fh) });
          for (let f = await reader.next(); f; f = await reader.next()) yield sinkEvent(f);
          const env = await envelope;
          finished = true;
          yield settle(env);
        } finally {
          // Both read ends closed first: an engine still writing gets EPIPE
          // and ends the request, even before the cancel arrives.
          await closeFifo(fifo);
          if (!finished) await cancel(id);
        }
      },
    };
  }

  /**
   * The file at path through the read op's sink: the engine writes its
   * bytes into a FIFO while this process reads them, in large reads into
   * one Buffer of the file's size when that is known (size), instead of a
   * whole host file written and then read back.
   */
  async sinkRead(path: string, size: number | null, extra: { maxBytes?: number } = {}): Promise<Uint8Array> {
    const fifo = await this.openFifo();
    try {
      let done!: (env: Record<string, unknown> | null) => void;
      const envelope = new Promise<Record<string, unknown> | null>((resolve) => { done = resolve; });
      const id = this.send("read", { path, sink: fifo.path, ...extra }, { event: () => {}, done });
      let data: Buffer;
      try {
        data = await readAll(await fifoReader(fifo, envelope), size);
      } catch (err) {
        await closeFifo(fifo);
        await this.cancelRequest(id);
        throw err;
      }
      const sent = (this.settle(await envelope) as C.FileData).bytes;
      if (sent !== data.length) throw new UnexpectedError(`read ${path}: the engine sent ${sent} bytes and ${data.length} arrived`, "ERR_UNEXPECTED");
      return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    } finally {
      await closeFifo(fifo);
    }
  }

  /**
   * A whole file written from bytes this process holds, through a Unix
   * socket the engine dials (api/engine.yaml write, a socket localPath
   * with size): the bytes go to the engine as its upload takes them, with
   * no host file written first.
   */
  async writeSocket(path: string, data: Uint8Array, mode?: string): Promise<void> {
    const dir = await mkdtemp(join(tmpdir(), "microvm-sink-"));
    const server = createServer();
    let sock: Socket | undefined;
    try {
      const sockPath = join(dir, "s");
      const conn = new Promise<Socket>((resolve) => server.once("connection", resolve));
      await new Promise<void>((resolve, reject) => {
        server.once("error", reject);
        server.listen(sockPath, () => resolve());
      });
      const envelope = new Promise<Record<string, unknown> | null>((done) => {
        this.send("write", { path, localPath: sockPath, size: data.byteLength, ...(mode !== undefined ? { mode } : {}) }, { event: () => {}, done });
      });
      sock = await Promise.race([conn, envelope.then(() => undefined)]);
      if (sock) {
        // An engine that fails midway closes the socket: the write's error
        // is its answer's, not this socket's.
        sock.on("error", () => {});
        sock.end(data);
      }
      this.settle(await envelope);
    } finally {
      sock?.destroy();
      server.close();
      await rm(dir, { recursive: true, force: true });
    }
  }

  // The generated per-op methods, opened to this module.
  create(a: C.CreateArgs) { return this.opCreate(a); }
  attach(a: C.AttachArgs) { return this.opAttach(a); }
  info() { return this.opInfo({}); }
  run(a: C.RunArgs) { return this.opRun(a); }
  // The engine's sink (binary frames through a FIFO) where there are
  // FIFOs; its event lines on Windows.
  streamExec(a: C.StreamArgs) { return (SINKS ? this.sinkStream("stream", a) : this.opStream(a)) as AsyncIterable<C.StreamEvent | C.ExecStreamData>; }
  write(a: C.WriteArgs) { return this.opWrite(a); }
  read(a: C.ReadArgs) { return this.opRead(a); }
  list(a: C.ListArgs) { return this.opList(a); }
  uploadDir(a: C.UploadDirArgs) { return this.opUploadDir(a); }
  downloadDir(a: C.DownloadDirArgs) { return this.opDownloadDir(a); }
  suspend() { return this.opSuspend({}); }
  resume() { return this.opResume({}); }
  terminate(a: C.TerminateArgs) { return this.opTerminate(a); }
  cost() { return this.opCost({}); }
  url(a: C.URLArgs) { return this.opURL(a); }
  runMany(a: C.RunManyArgs) { return this.opRunMany(a); }
  build(a: C.BuildArgs) { return this.opBuild(a); }
  start(a: C.StartArgs) { return this.opStart(a); }
  poll(a: C.PollArgs) { return this.opPoll(a); }
  wait(a: C.WaitArgs) { return this.opWait(a); }
  follow(a: C.FollowArgs) { return SINKS ? this.sinkStream("follow", a) : this.opFollow(a); }
  kill(a: C.KillArgs) { return this.opKill(a); }
  signal(a: C.SignalArgs) { return this.opSignal(a); }
  resize(a: C.ResizeArgs) { return this.opResize(a); }
  stdinWrite(a: C.StdinWriteArgs) { return this.opStdinWrite(a); }
  stdinClose(a: C.StdinCloseArgs) { return this.opStdinClose(a); }
  execs() { return this.opExecs({}); }
  stat(a: C.StatArgs) { return this.opStat(a); }
  mkdir(a: C.MkdirArgs) { return this.opMkdir(a); }
  move(a: C.MoveArgs) { return this.opMove(a); }
  remove(a: C.RemoveArgs) { return this.opRemove(a); }
  watch(a: C.WatchArgs) { return this.opWatch(a); }
  health() { return this.opHealth({}); }
  metrics() { return this.opMetrics({}); }
  keepalive(a: C.KeepaliveArgs) { return this.opKeepalive(a); }
  networkShow() { return this.opNetworkShow({}); }
  networkSet(a: C.NetworkSetArgs) { return this.opNetworkSet(a); }
  poolOpen(a: C.PoolOpenArgs) { return this.opPoolOpen(a); }
  poolWaitReady(a: C.PoolWaitReadyArgs) { return this.opPoolWaitReady(a); }
  poolAcquire() { return this.opPoolAcquire({}); }
  poolRelease(a: C.PoolReleaseArgs) { return this.opPoolRelease(a); }
  poolCost() { return this.opPoolCost({}); }
  poolClose() { return this.opPoolClose({}); }
  checkpoint(a: C.CheckpointArgs) { return this.opCheckpoint(a); }
  checkpointLs(a: C.CheckpointLsArgs) { return this.opCheckpointLs(a); }
  checkpointRm(a: C.CheckpointRmArgs) { return this.opCheckpointRm(a); }
  checkpointImage(a: C.CheckpointImageArgs) { return this.opCheckpointImage(a); }
  volumeSync() { return this.opVolumeSync({}); }
  volumeLs() { return this.opVolumeLs({}); }
  volumeRm(a: C.VolumeRmArgs) { return this.opVolumeRm(a); }
  fork(a: C.ForkArgs) { return this.opFork(a); }
  restore(a: C.RestoreArgs) { return this.opRestore(a); }

  /** End in-flight request requestId (a watch, a follow, a wait); a request already answered, or a gone engine, is no error. */
  async cancelRequest(requestId: number): Promise<void> {
    if (!this.p.inFlight(requestId)) return;
    await this.opCancel({ requestId }).catch(() => undefined);
  }

  /**
   * End this sandbox's part: an own engine ends (tearing down what it
   * launched and its emulator); a shared one releases the handle, which does
   * the same for this sandbox alone, and lives on for the next.
   */
  async close(): Promise<void> {
    if (this.sandbox === undefined) {
      await this.p.close();
      return;
    }
    if (this.released) return;
    this.released = true;
    // A dead engine took what it launched with it.
    if (!this.p.exited) await this.opRelease({}).catch(() => undefined);
    this.p.live--;
    const key = sharedKey(this.p.binary);
    if (this.p.live === 0 && sharedEngines.get(key) !== this.p) {
      // An engine of an environment no longer current, now unused.
      for (const [k, v] of sharedEngines) if (v === this.p) sharedEngines.delete(k);
      await this.p.close();
    }
  }
}

/** A finished command: a non-zero exit is a result, not a throw. */
export interface ExecResult {
  readonly execId: string;
  readonly phase: string;
  /** null when a signal ended the child. */
  readonly exitCode: number | null;
  readonly signal: number | null;
  readonly stdout: string;
  readonly stderr: string;
  /**
   * The guest kept at most 8 MiB (agentd's AGENTD_MAX_OUTPUT_BYTES, 8388608)
   * of each stream for this result; true when it dropped bytes past that cap.
   * Use stream() to see every byte of a larger output.
   */
  readonly truncated: boolean;
  /** Whether the command exited zero. */
  readonly ok: boolean;
  /** What the command used (CPU, peak memory, output bytes, wall time) and how it was measured; null from a daemon that reports none. */
  readonly usage: C.ExecUsage | null;
  /** The guest kernel killed the command for going over limits.memoryBytes. */
  readonly oomKilled: boolean;
  /** A time limit ended the wait or the command (timeoutLimit says which). */
  readonly timedOut: boolean;
  /** "timeoutSec" (agentd killed the command), "wait" (the wait gave up; it runs on), or "". */
  readonly timeoutLimit: string;
}

function toResult(d: C.ExecResultData): ExecResult {
  return { execId: d.execId, phase: d.phase, exitCode: d.exitCode, signal: d.signal, stdout: d.stdout, stderr: d.stderr, truncated: d.truncated,
    ok: d.phase !== "running" && d.exitCode === 0, usage: d.usage ?? null, oomKilled: d.oomKilled ?? false, timedOut: d.timedOut ?? false,
    timeoutLimit: d.timeoutLimit ?? "" };
}

/** Output as it arrived: `text` is UTF-8 with invalid bytes replaced (`lossy` says whether any were). */
export interface OutputChunk {
  readonly kind: "output"; readonly stream: string; readonly offset: number; readonly text: string; readonly size: number; readonly lossy: boolean;
  /** The exact bytes (text is them decoded, lossy when they are not UTF-8). */
  readonly data?: Uint8Array;
}
/** Output [start, end) was lost before it was read. */
export interface Gap { readonly kind: "gap"; readonly start: number; readonly end: number }
/** The terminal event: its absence is what tells a cut stream from a finished command. */
export interface Exit { readonly kind: "exit"; readonly exitCode: number | null; readonly signal: number | null; readonly truncated: boolean; readonly writersMayBeAlive: boolean; readonly offset: number }
export type StreamItem = OutputChunk | Gap | Exit;

/**
 * An output chunk that came as exact bytes (the engine's sink): text is
 * decoded only when read, since a consumer of data alone should not pay for
 * a string of every byte.
 */
class ExactOutputChunk implements OutputChunk {
  readonly kind = "output" as const;
  readonly size: number;
  readonly lossy: boolean;
  declare readonly text: string;
  constructor(readonly stream: string, readonly offset: number, readonly data: Uint8Array) {
    this.size = data.length;
    this.lossy = !isUtf8(data);
    let decoded: string | undefined;
    // An own, enumerable getter: JSON.stringify and spreads still see text.
    Object.defineProperty(this, "text", {
      enumerable: true,
      get: () => (decoded ??= Buffer.from(data.buffer, data.byteOffset, data.length).toString("utf8")),
    });
  }
}

/** ExecStream.lines' default bound on one line: the daemon's cap on a run's output per stream (8 MiB). */
export const MAX_LINE = 8 << 20;

/** A command's output as it arrives; the engine's stream resumes at its byte offset after a dropped connection. */
export class ExecStream implements AsyncIterable<StreamItem> {
  /** The Exit event, once seen. */
  exit: Exit | null = null;
  /** The final envelope's summary, once the stream ended. */
  summary: C.ExecStreamData | null = null;

  /** onEnd runs once the iteration ends, told whether the exit was seen. */
  constructor(private readonly events: AsyncIterable<C.StreamEvent | C.ExecStreamData>, private readonly onEnd?: (exited: boolean) => Promise<void>) {}

  async *[Symbol.asyncIterator](): AsyncIterator<StreamItem> {
    try {
      for await (const ev of this.events) {
        if (!("event" in ev)) {
          this.summary = ev;
        } else if (ev.event === "output") {
          const data = (ev as { data?: Uint8Array }).data;
          yield data ? new ExactOutputChunk(ev.stream, ev.offset, data) : { kind: "output", stream: ev.stream, offset: ev.offset, text: ev.text, size: ev.bytes, lossy: ev.lossy };
        } else if (ev.event === "gap") {
          yield { kind: "gap", start: ev.from, end: ev.to };
        } else {
          this.exit = { kind: "exit", exitCode: ev.exitCode, signal: ev.signal, truncated: ev.truncated, writersMayBeAlive: ev.writersMayBeAlive, offset: ev.offset };
          yield this.exit;
        }
      }
    } finally {
      await this.onEnd?.(this.exit !== null);
    }
  }

  /**
   * Complete lines of one stream (without their newline) as each arrives,
   * decoded as UTF-8 across chunks: a character split between two chunks
   * comes out whole; invalid bytes are replaced. A line longer than maxLine
   * UTF-16 code units comes out in pieces of maxLine, so output without
   * newlines never grows this process without bound.
   */
  async *lines(stream = "stdout", maxLine = MAX_LINE): AsyncGenerator<string> {
    if (!Number.isInteger(maxLine) || maxLine < 1) throw new InvalidArgError(`maxLine must be a whole number of at least 1, got ${maxLine}`, "ERR_INVALID_ARG");
    // One streaming decoder over the chunks' exact bytes: a chunk's own
    // text is decoded alone, so a character cut by a chunk boundary would
    // be two replacement marks. The engine's event lines (where there are
    // no FIFOs) carry text alone.
    let decoder = new TextDecoder("utf-8");
    let open = "";
    for await (const item of this) {
      if (item.kind === "gap") {
        // Bytes were lost here: a character begun before the gap does not
        // take its continuation from after it.
        open += decoder.decode();
        decoder = new TextDecoder("utf-8");
        continue;
      }
      if (item.kind !== "output" || item.stream !== stream) continue;
      const text = item.data ? decoder.decode(item.data, { stream: true }) : item.text;
      // Each chunk is split once, so a chunk of many short lines costs its
      // length, not its length per line.
      let from = 0;
      for (let nl = text.indexOf("\n"); nl >= 0; nl = text.indexOf("\n", from)) {
        const line = open + text.slice(from, nl);
        open = "";
        from = nl + 1;
        for (let i = 0; i < line.length; i += maxLine) yield line.slice(i, i + maxLine);
        if (line.length === 0) yield line;
      }
      open += text.slice(from);
      // The open line keeps its last piece (up to maxLine), which its
      // newline may still end: cutting it to nothing would make that
      // newline an empty line of its own.
      if (open.length > maxLine) {
        const cut = Math.floor((open.length - 1) / maxLine) * maxLine;
        for (let i = 0; i < cut; i += maxLine) yield open.slice(i, i + maxLine);
        open = open.slice(cut);
      }
    }
    open += decoder.decode();
    for (let i = 0; i < open.length; i += maxLine) yield open.slice(i, i + maxLine);
  }
}

/** One entry of a directory listing. */
export interface FileEntry { readonly path: string; readonly name: string; readonly type: C.FileEntry["type"]; readonly size: number; readonly mode: string; readonly mtime: string; readonly symlinkTarget: string | null }

/** What terminate did: it never throws for what it could not delete, it names it in `undeleted`. */
export interface TeardownReport { readonly microvmId: string; readonly lifecycle: string | null; readonly undeleted: string[]; readonly leaked: boolean; readonly imageIdentifier: string | null }

/** An estimate from a dated rate table, never an invoice; amounts are decimal strings, `usd` absent (never zero) when unpriced. */
/** How to reach one port inside the VM: the headers name the port and carry the token. */
export interface PortURL {
  readonly microvmId: string; readonly port: number; readonly url: string; readonly headers: Record<string, string>; readonly expiresAt: string;
  /** The same credentials for a browser's WebSocket, which sets no header: new WebSocket(wsURL, subprotocols). A credential too. */
  readonly subprotocols: string[];
}
export interface CostReport { readonly label: string; readonly size: string; readonly items: C.CostLine[]; readonly totalUsd: string; readonly isLowerBound: boolean; readonly staleness: string; readonly text: string }

/** Per-command limits the guest kernel enforces; a guest that cannot apply them refuses the command rather than run it unlimited. */
export interface ExecLimits { memoryBytes?: number; cpuMillicores?: number; pids?: number }

export interface ExecOptions {
  cwd?: string; env?: Record<string, string>; timeoutSec?: number; execId?: string; limits?: ExecLimits;
  /** Numeric uid to run as; unset keeps the daemon's. */
  user?: number;
  /** Numeric gid to run as; unset keeps the daemon's. */
  group?: number;
  /** run and stream: an abort kills the command (its process group); the run or stream then ends with its exit. */
  signal?: AbortSignal;
}

/** Whether streams and reads go through the engine's sink (a FIFO). */
const SINKS = process.platform !== "win32";

/** A sink FIFO: its private directory, its path, and the read end held open without blocking. */
interface Fifo { readonly dir: string; readonly path: string; readonly hold: FileHandle; reader?: Promise<FileHandle> }

/** One read of a FIFO: up to a frame's worth, straight from the engine's 1 MiB pipe buffer. */
const FIFO_READ = 1 << 20;

/**
 * The FIFO's blocking read end, open once the engine has opened its write
 * end: reads then wait for bytes and end at the engine's close. When the
 * engine answers first it has closed its end or never opened it, and the
 * open waiting for a writer is let through by one of this process's own,
 * opened and closed at once: what is in the FIFO is read, then its end.
 */
async function fifoReader(f: Fifo, answered: Promise<unknown>): Promise<FileHandle> {
  f.reader ??= open(f.path, "r");
  const first = await Promise.race([f.reader, answered.then(() => undefined)]);
  if (first) return first;
  await (await open(f.path, fsConstants.O_WRONLY | fsConstants.O_NONBLOCK)).close();
  return f.reader;
}

/** Both read ends closed (an engine still writing gets EPIPE) and the directory removed. */
async function closeFifo(f: Fifo): Promise<void> {
  const reader = f.reader;
  f.reader = undefined;
  if (reader) {
    // An open still waiting for a writer is let through first, as fifoReader does.
    const w = await open(f.path, fsConstants.O_WRONLY | fsConstants.O_NONBLOCK).catch(() => undefined);
    await (await reader.catch(() => undefined))?.close().catch(() => undefined);
    await w?.close();
  }
  await f.hold.close().catch(() => undefined);
  await rm(f.dir, { recursive: true, force: true });
}

/** Where a slab's unused space is too small for another read, a new slab is taken. */
const SLAB_MIN_READ = FIFO_READ >> 4;

/**
 * The reads of one sink FIFO, each into the unused tail of a shared slab
 * (FIFO_READ bytes), never into memory an earlier chunk's view holds: frames'
 * payloads are views of their chunks, so a slab is only ever written once
 * per byte, and a new one is taken when less than SLAB_MIN_READ is left.
 * A fresh FIFO_READ buffer per read made the allocations several times the
 * bytes moved (a read returns what the pipe holds, often far under 1 MiB),
 * and a 256 MiB stream spent 15% of Node's time in the collector.
 */
function chunkReader(fh: FileHandle): () => Promise<{ done: boolean; value?: Uint8Array }> {
  let slab = Buffer.allocUnsafe(0);
  let used = 0;
  return async () => {
    if (slab.length - used < SLAB_MIN_READ) {
      slab = Buffer.allocUnsafe(FIFO_READ);
      used = 0;
    }
    const { bytesRead } = await fh.read(slab, used, slab.length - used, null);
    if (bytesRead === 0) return { done: true };
    const value = slab.subarray(used, used + bytesRead);
    used += bytesRead;
    return { done: false, value };
  };
}

/** Every byte until the engine's close: into one Buffer of size when it is known (a file that grew since gets the rest after it). */
async function readAll(fh: FileHandle, size: number | null): Promise<Buffer> {
  const buf = Buffer.allocUnsafe(size ?? 0);
  let n = 0;
  while (n < buf.length) {
    const { bytesRead } = await fh.read(buf, n, Math.min(8 * FIFO_READ, buf.length - n), null);
    if (bytesRead === 0) return buf.subarray(0, n);
    n += bytesRead;
  }
  const more: Buffer[] = [];
  const read = chunkReader(fh);
  for (;;) {
    const c = await read();
    if (c.done) break;
    more.push(c.value as Buffer);
  }
  return more.length ? Buffer.concat([buf, ...more]) : buf;
}

/** One sink frame as the engine's event line would carry it, with the exact bytes of an output frame under data. */
function sinkEvent(f: Frame): Record<string, unknown> {
  if (f.type === FRAME.stdout || f.type === FRAME.stderr) {
    // text and lossy are ExecStream's ExactOutputChunk's, computed from data
    // when asked for.
    return { event: "output", stream: f.type === FRAME.stdout ? "stdout" : "stderr", offset: Number(f.offset), bytes: f.payload.length, data: f.payload };
  }
  const doc = JSON.parse(Buffer.from(f.payload.buffer, f.payload.byteOffset, f.payload.length).toString("utf8")) as Record<string, unknown>;
  if (f.type === FRAME.gap) return { event: "gap", from: doc.from, to: doc.to };
  if (f.type === FRAME.exit) {
    return { event: "exit", exitCode: doc.exit_code ?? null, signal: doc.signal ?? null, truncated: doc.truncated === true,
      writersMayBeAlive: doc.writers_may_be_alive === true, offset: doc.offset ?? Number(f.offset) };
  }
  throw new FrameError(`a sink frame of type ${f.type}`);
}

function execArgs(cmd: string | readonly string[], o: ExecOptions = {}): C.RunArgs {
  // A string is a shell script (E2B's commands.run); an array is an argv.
  return {
    ...(typeof cmd === "string" ? { command: [cmd], shell: true } : { command: [...cmd] }),
    ...(o.cwd !== undefined ? { cwd: o.cwd } : {}),
    ...(o.env ? { env: Object.entries(o.env).map(([k, v]) => `${k}=${v}`) } : {}),
    ...(o.timeoutSec !== undefined ? { timeoutSec: o.timeoutSec } : {}),
    ...(o.execId !== undefined ? { execId: o.execId } : {}),
    ...(o.user !== undefined ? { user: String(o.user) } : {}),
    ...(o.group !== undefined ? { group: String(o.group) } : {}),
    ...(o.limits?.memoryBytes !== undefined ? { memoryLimitBytes: o.limits.memoryBytes } : {}),
    ...(o.limits?.cpuMillicores !== undefined ? { cpuMillicores: o.limits.cpuMillicores } : {}),
    ...(o.limits?.pids !== undefined ? { pidsLimit: o.limits.pids } : {}),
  };
}

function toEntry(e: C.FileEntry): FileEntry {
  return { path: e.path, name: e.name, type: e.type, size: e.size, mode: e.mode, mtime: e.mtime, symlinkTarget: e.symlinkTarget ?? null };
}

// Where a file that only passes through lives: memory (tmpfs) when there is
// room, so its bytes are not also written back to a disk nobody reads them
// from again; SHM_SPARE is left over for the tmpfs's other users (a
// container's /dev/shm is often 64 MiB).
const SHM = "/dev/shm";
const SHM_SPARE = 64 << 20;

async function tempParent(need: number | null): Promise<string> {
  if (need !== null) {
    try {
      const st = await statfs(SHM);
      await access(SHM, fsConstants.W_OK);
      if (st.bavail * st.bsize >= need + SHM_SPARE) return SHM;
    } catch {
      // no usable /dev/shm: the default temp dir
    }
  }
  return tmpdir();
}

/** fn with a fresh host temp file path (in memory when need bytes fit), removed after. */
async function withTemp<T>(need: number | null, fn: (path: string) => Promise<T>): Promise<T> {
  const dir = await mkdtemp(join(await tempParent(need), "microvms-"));
  try {
    return await fn(join(dir, "data"));
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** One change under a watched directory: op is agentd's (create, write, remove, rename, chmod). */
export interface FsEvent { readonly kind: "fs"; readonly op: string; readonly path: string; readonly seq: number }

/** Options of a whole-file read (readBytes, read, download). */
export interface ReadOptions {
  /** The most bytes this read takes (at least 1); past it the read rejects with InvalidArgError. */
  maxBytes?: number;
}

/** The read op's maxBytes for a caller's maxBytes (undefined: the op's own bound). */
function maxArgs(opts: ReadOptions): { maxBytes?: number } {
  if (opts.maxBytes === undefined) return {};
  if (!Number.isSafeInteger(opts.maxBytes) || opts.maxBytes < 1) {
    throw new InvalidArgError(`maxBytes must be a whole number of bytes, at least 1, got ${opts.maxBytes}`, "ERR_INVALID_ARG");
  }
  return { maxBytes: opts.maxBytes };
}

/** The sandbox's filesystem (E2B's sandbox.files). */
export class Files {
  constructor(private readonly engine: Engine) {}

  /** Write a whole file (any size), creating its parents; mode is four octal digits ("0755"). */
  async write(path: string, data: string | Uint8Array, opts: { mode?: string } = {}): Promise<void> {
    // Never across the engine's line protocol, whose lines are bounded (a
    // 256 MiB base64 line is not): through a Unix socket the engine dials
    // where there are Unix sockets, else a host file (localPath).
    if (SINKS) return this.engine.writeSocket(path, typeof data === "string" ? Buffer.from(data) : data, opts.mode);
    const size = typeof data === "string" ? Buffer.byteLength(data) : data.byteLength;
    await withTemp(size, async (local) => {
      await writeFile(local, data);
      await this.upload(local, path, opts);
    });
  }

  /** Copy one host file to path in the VM, streamed; resolves to its bytes. */
  async upload(local: string, path: string, opts: { mode?: string } = {}): Promise<number> {
    return (await this.engine.write({ path, localPath: local, ...(opts.mode !== undefined ? { mode: opts.mode } : {}) })).bytes;
  }

  /** Copy one VM file to a host file, streamed (up to maxBytes, else DEFAULT_MAX_DOWNLOAD_BYTES; past it nothing is left at local); resolves to its bytes. */
  async download(path: string, local: string, opts: ReadOptions = {}): Promise<number> {
    return (await this.engine.read({ path, localPath: local, ...maxArgs(opts) })).bytes;
  }

  /**
   * The whole file at path. The guest decides how large that is: maxBytes
   * bounds what this process takes (a file over it rejects with
   * InvalidArgError, before any byte when its size says so, else as the read
   * passes it); without it, up to DEFAULT_MAX_DOWNLOAD_BYTES (8 GiB).
   */
  async readBytes(path: string, opts: ReadOptions = {}): Promise<Uint8Array> {
    const extra = maxArgs(opts);
    // A regular file's size is known before the read: a symlink or device
    // goes through the default temp dir.
    const d = await this.engine.stat({ path });
    const size = d.exists && d.entry && d.entry.type === "file" ? Number(d.entry.size) : null;
    if (opts.maxBytes !== undefined && size !== null && size > opts.maxBytes) {
      // Refused before the read starts; a file that grows past the bound
      // fails in the engine.
      throw new InvalidArgError(`${path} is ${size} bytes, over maxBytes (${opts.maxBytes}); raise maxBytes, or download it to a host file`, "ERR_INVALID_ARG");
    }
    // Through a FIFO the engine writes while this process reads.
    if (SINKS) return this.engine.sinkRead(path, size, extra);
    return withTemp(size, async (local) => {
      await this.download(path, local, opts);
      // A view, not a copy: readFile gave this buffer its own memory.
      const buf = await readFile(local);
      return new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength);
    });
  }

  /** path's entry (a final symlink not followed), or null when nothing is there. */
  async stat(path: string): Promise<FileEntry | null> {
    const d = await this.engine.stat({ path });
    return d.exists && d.entry ? toEntry(d.entry as unknown as C.FileEntry) : null;
  }

  /** Whether anything is at path. */
  async exists(path: string): Promise<boolean> {
    return (await this.engine.stat({ path })).exists;
  }

  /** Make a directory and its parents; false when it already was one. */
  async mkdir(path: string, opts: { mode?: string } = {}): Promise<boolean> {
    return (await this.engine.mkdir({ path, ...(opts.mode !== undefined ? { mode: opts.mode } : {}) })).changed;
  }

  /** Rename from to to; an existing destination is refused unless replace. */
  async move(from: string, to: string, opts: { replace?: boolean } = {}): Promise<void> {
    await this.engine.move({ from, to, replace: opts.replace ?? false });
  }

  /** Remove path (a directory only with recursive); resolves to the entries removed, 0 when nothing was there. */
  async remove(path: string, opts: { recursive?: boolean } = {}): Promise<number> {
    return (await this.engine.remove({ path, recursive: opts.recursive ?? false })).count;
  }

  /**
   * Changes under path as they happen (FsEvent, or Gap for dropped ones),
   * until the loop leaves: breaking out (or an abort of opts.signal) cancels
   * the engine's watch.
   */
  async *watch(path: string, opts: { recursive?: boolean; signal?: AbortSignal } = {}): AsyncGenerator<FsEvent | Gap> {
    const events = this.engine.watch({ path, recursive: opts.recursive ?? false });
    const id = this.engine.lastStreamId;
    const onAbort = () => void this.engine.cancelRequest(id);
    opts.signal?.addEventListener("abort", onAbort, { once: true });
    try {
      if (opts.signal?.aborted) return;
      for await (const ev of events as AsyncIterable<Record<string, unknown>>) {
        if (ev.event === "fs") yield { kind: "fs", op: String(ev.op), path: String(ev.path), seq: Number(ev.seq) };
        else if (ev.event === "gap") yield { kind: "gap", start: Number(ev.from), end: Number(ev.to) };
      }
    } catch (err) {
      if (!(opts.signal?.aborted && err instanceof InterruptedError)) throw err;
    } finally {
      opts.signal?.removeEventListener("abort", onAbort);
    }
  }

  /** The whole file at path as UTF-8 text. */
  async read(path: string, opts: ReadOptions = {}): Promise<string> {
    return Buffer.from(await this.readBytes(path, opts)).toString("utf8");
  }

  /** The entries under path, depth levels deep. */
  async list(path: string, opts: { depth?: number } = {}): Promise<FileEntry[]> {
    return (await this.engine.list({ path, depth: opts.depth ?? 1 })).entries.map(toEntry);
  }

  /** Copy a local directory tree into the VM; resolves to the bytes of its files. */
  async uploadDir(local: string, remote: string): Promise<number> {
    return (await this.engine.uploadDir({ local, remote })).bytes;
  }

  /** Copy a VM directory tree into local, every entry confined beneath it. */
  async downloadDir(remote: string, local: string): Promise<number> {
    return (await this.engine.downloadDir({ remote, local })).bytes;
  }
}

/** Options of start: those of run, plus a writable stdin and a terminal. */
export interface StartOptions extends ExecOptions {
  /** Give the command a writable stdin (writeStdin, closeStdin). */
  stdin?: boolean;
  /** Run it on a pseudo-terminal of this size (its output is all stdout; resize sizes it). */
  pty?: { rows: number; cols: number };
}

/**
 * A command running in the background, addressed by its exec id: the id is
 * the whole handle, so sandbox.process(execId) in another process attached
 * to the same sandbox reaches the same command.
 */
export class Process {
  constructor(private readonly engine: Engine, readonly execId: string) {}

  toString(): string { return `Process(${this.execId})`; }

  /** The record as it stands: phase running, or the outcome. */
  async poll(): Promise<ExecResult> { return toResult(await this.engine.poll({ execId: this.execId })); }

  /** Wait for the exit and take the record. Past timeoutSec the result has timedOut true, timeoutLimit "wait", and the command runs on. */
  async wait(opts: { timeoutSec?: number } = {}): Promise<ExecResult> {
    return toResult(await this.engine.wait({ execId: this.execId, ...(opts.timeoutSec !== undefined ? { timeoutSec: opts.timeoutSec } : {}) }));
  }

  /** The output from byte offset on as it arrives, until the exit; leaving the loop early ends the follow, not the command. */
  stream(offset = 0): ExecStream {
    return new ExecStream(this.engine.follow({ execId: this.execId, offset }) as AsyncIterable<C.StreamEvent | C.ExecStreamData>);
  }

  /** SIGTERM then SIGKILL to the process group; false when it had already gone. */
  async kill(): Promise<boolean> { return (await this.engine.kill({ execId: this.execId })).done; }

  /** Send one named signal (TERM, HUP, INT, ...) once; false when the group had gone. */
  async signal(name: string): Promise<boolean> { return (await this.engine.signal({ execId: this.execId, signal: name })).done; }

  /** Resize a pty command's terminal. */
  async resize(rows: number, cols: number): Promise<void> { await this.engine.resize({ execId: this.execId, rows, cols }); }

  /** Write to the command's stdin (started with stdin or pty); resolves to the bytes taken. */
  async writeStdin(data: string | Uint8Array): Promise<number> {
    const dataBase64 = (typeof data === "string" ? Buffer.from(data, "utf8") : Buffer.from(data)).toString("base64");
    return (await this.engine.stdinWrite({ execId: this.execId, dataBase64 })).bytes;
  }

  /** Close the command's stdin: it reads end of file. */
  async closeStdin(): Promise<void> { await this.engine.stdinClose({ execId: this.execId }); }
}

/** What holdAwake did: the pings it sent and how long it held the VM. */
export interface KeepaliveReport { readonly microvmId: string; readonly pings: number; readonly heldSeconds: number }

/** One event of a local image build: a step's start or end, or a line of its output. */
export interface BuildProgress { readonly step: number; readonly steps: number; readonly instruction: string; readonly text: string; readonly done: boolean; readonly cached: boolean }

export interface BuildOptions extends Omit<CreateOptions, "image" | "imageVersion" | "volumes" | "keepAwake" | NetworkKeys> {
  /** A Dockerfile on this host (its directory is the build context locally); unset builds the default stanza. */
  dockerfile?: string;
  /** The size class by its baseline memory in MiB; 0 or unset is the default class. */
  memoryMib?: number;
  /** Local: the image FROM stands for, an OCI layout directory or docker-save tarball (offline machines). */
  baseImage?: string;
  /** Called with each build event as it arrives. */
  onProgress?: (p: BuildProgress) => void;
}

/**
 * What a launch is given: create's, and restore's, fork's and runMany's for
 * each MicroVM they launch (build and Pool.open take the first five).
 */
export interface LaunchOptions {
  /** Give the VM outbound network (run --egress); unset: none. */
  egress?: boolean;
  /** The environment of every command, delivered once at launch (run --launch-env). */
  launchEnv?: Record<string, string>;
  /** Suspend the VM after this many seconds without an inbound request (default 600). */
  maxIdleSec?: number;
  /** Terminate it after this many seconds suspended (default 600). */
  suspendedSec?: number;
  /** The hard ceiling on its life in seconds (default 3600, at most 28800). */
  maxDurationSec?: number;
  /**
   * Launch under a network policy (issue 48) that allows only these, each as
   * `microvm run --network-allow` spells it: HOST[:PORTS], *.SUFFIX[:PORTS]
   * or CIDR[:PORTS]. Only an emulator enforces one (local, or a control
   * endpoint); on AWS create refuses it (egress-connector-or-none).
   */
  networkAllow?: string[];
  /** Launch under a policy that allows nothing. */
  networkDenyAll?: boolean;
  /**
   * Credentials bound to hosts, by the environment variable the guest finds
   * a placeholder in: HTTPS requests to a bound host get the value in their
   * headers on the way out, outside the guest.
   */
  secrets?: Record<string, Secret>;
}

/** The network policy and secrets of LaunchOptions, which build and Pool.open do not take. */
type NetworkKeys = "networkAllow" | "networkDenyAll" | "secrets";

export interface CreateOptions extends LaunchOptions {
  /** Run the emulator inside the engine: Linux only; no AWS account and no root. */
  local?: boolean;
  /** The image's name or ARN (AWS, or a running emulator). */
  image?: string;
  imageVersion?: string;
  region?: string;
  controlEndpoint?: string;
  executionRoleArn?: string;
  agentToken?: string;
  /** Local mode: the host agentd guests run. */
  agentd?: string;
  timeoutSec?: number;
  /**
   * Keep the VM awake while a run, stream or transfer is in flight (a GET
   * /v1/health every quarter of maxIdleSec: the platform suspends after
   * maxIdleSec without an inbound request however busy the VM is); false
   * turns that off. Default true.
   */
  keepAwake?: boolean;
  /**
   * Volumes (issue 47) as { NAME: "/path" } (`microvm run --volume NAME:/path`):
   * each one's newest generation is laid at its path before create resolves
   * (an empty directory on first use), under a lease this sandbox holds until
   * terminate, which saves a last generation; `sb.volumes.sync()` saves one
   * sooner. A volume another live sandbox holds throws CheckpointRefusedError
   * naming the holder. They live in MICROVM_BUCKET, else the emulator's store.
   */
  volumes?: Record<string, string>;
  /** The microvm binary; unset: $MICROVM_BIN, then PATH. */
  binary?: string;
}

const secretValues = new WeakMap<Secret, string>();

/**
 * A credential bound to hosts, for `Sandbox.create({ secrets: { NAME: new Secret(value, host) } })`.
 * The value is held outside the object's fields: no toString, JSON or
 * inspection of it shows the value.
 */
export class Secret {
  readonly hosts: readonly string[];
  constructor(value: string, ...hosts: string[]) {
    if (typeof value !== "string" || value === "") throw new InvalidArgError("a Secret's value must be a non-empty string", "ERR_INVALID_ARG");
    if (hosts.length === 0 || hosts.some((h) => typeof h !== "string" || h === "")) throw new InvalidArgError("a Secret needs at least one host name", "ERR_INVALID_ARG");
    secretValues.set(this, value);
    this.hosts = Object.freeze([...hosts]);
  }
  toString(): string { return `Secret(<redacted>, ${this.hosts.join(", ")})`; }
  toJSON(): { hosts: readonly string[] } { return { hosts: this.hosts }; }
  [Symbol.for("nodejs.util.inspect.custom")](): string { return this.toString(); }
}

/** LaunchOptions as the engine's ops take them: launchEnv as NAME=value entries, the secrets as NAME=VALUE@HOST[,HOST] specs. */
function launchArgs(o: LaunchOptions): Partial<C.CreateArgs> {
  const out: {
    egress?: boolean; launchEnv?: string[]; maxIdleSec?: number; suspendedSec?: number; maxDurationSec?: number;
    networkAllow?: string[]; networkDenyAll?: boolean; secrets?: string[];
  } = {};
  if (o.egress) out.egress = true;
  if (o.launchEnv) out.launchEnv = Object.entries(o.launchEnv).map(([k, v]) => `${k}=${v}`);
  if (o.maxIdleSec !== undefined) out.maxIdleSec = o.maxIdleSec;
  if (o.suspendedSec !== undefined) out.suspendedSec = o.suspendedSec;
  if (o.maxDurationSec !== undefined) out.maxDurationSec = o.maxDurationSec;
  if (o.networkAllow?.length) out.networkAllow = [...o.networkAllow];
  if (o.networkDenyAll) out.networkDenyAll = true;
  if (o.secrets) {
    const specs: string[] = [];
    for (const [name, sec] of Object.entries(o.secrets)) {
      const value = sec instanceof Secret ? secretValues.get(sec) : undefined;
      // Never format what was passed: a mistaken string is a secret too.
      if (value === undefined) throw new InvalidArgError(`secrets.${name} must be a Secret(value, host, ...)`, "ERR_INVALID_ARG");
      specs.push(`${name}=${value}@${sec.hosts.join(",")}`);
    }
    if (specs.length) out.secrets = specs;
  }
  return out;
}

export interface AttachOptions {
  /** The agent token the launch installed: the credential, kept secret. */
  agentToken: string;
  /** The launching sandbox's controlEndpoint, for a local one. */
  controlEndpoint?: string | null;
  region?: string;
  binary?: string;
}

/**
 * One MicroVM as a sandbox. `Sandbox.create({ local: true })` runs the
 * embedded emulator inside the engine; `Sandbox.create({ image })` launches
 * on AWS. `await using` closes it: the engine terminates what it launched,
 * and a process that dies takes its engine, and so its MicroVM, with it.
 */
export class Sandbox implements AsyncDisposable {
  readonly files: Files;

  /** The stored checkpoints (issue 47): MICROVM_BUCKET on AWS, the emulator's S3 slice locally. */
  readonly checkpoints: Checkpoints;

  /** The volumes this sandbox holds (create's volumes) and the stored ones. */
  readonly volumes: Volumes;

  private constructor(private readonly engine: Engine, private info: C.SandboxData) {
    this.files = new Files(engine);
    this.checkpoints = new Checkpoints(engine);
    this.volumes = new Volumes(engine);
  }

  /**
   * Launch a sandbox from a stored checkpoint (name or digest): its image and
   * version, its files laid before anything runs. A corrupted or
   * other-version checkpoint throws CheckpointRefusedError before anything
   * launches. The store is a running emulator's (controlEndpoint) or AWS's.
   */
  static async restore(checkpoint: string, opts: RestoreOptions = {}): Promise<Sandbox> {
    const engine = Engine.shared(opts.binary);
    try {
      return new Sandbox(engine, await engine.restore({
        ref: checkpoint, local: false, region: opts.region ?? "", controlEndpoint: opts.controlEndpoint ?? "", agentd: "",
        allowOtherVersion: opts.allowOtherVersion ?? false, imageVersion: opts.imageVersion ?? "",
        ...(opts.executionRoleArn !== undefined ? { executionRoleArn: opts.executionRoleArn } : {}), ...launchArgs(opts),
      }));
    } catch (err) {
      await engine.close();
      throw err;
    }
  }

  /** Save paths (default the working directory, which must not be /) as a checkpoint; returns its manifest. */
  async checkpoint(opts: CheckpointOptions = {}): Promise<C.CheckpointManifest> {
    const d = await this.engine.checkpoint(saveArgs(opts));
    return d.checkpoint!;
  }

  /** Checkpoint this sandbox and run command in n copies restored from it, each torn down; this one keeps running. */
  async fork(n: number, opts: ForkOptions = {}): Promise<FleetResult> {
    return fleetOf(() => this.engine.fork({ ...saveArgs(opts), ...launchArgs(opts), count: n, parallel: opts.parallel ?? 0, command: opts.command ?? "", timeoutSec: opts.timeoutSec ?? 0 }));
  }

  static async create(opts: CreateOptions = {}): Promise<Sandbox> {
    const { binary, volumes, keepAwake, egress, launchEnv, maxIdleSec, suspendedSec, maxDurationSec, networkAllow, networkDenyAll, secrets, ...rest } = opts;
    const launch = launchArgs({ egress, launchEnv, maxIdleSec, suspendedSec, maxDurationSec, networkAllow, networkDenyAll, secrets });
    const vols = volumes ? { volumes: Object.entries(volumes).map(([name, path]) => `${name}:${path}`) } : {};
    const engine = Engine.shared(binary);
    try {
      return new Sandbox(engine, await engine.create({ ...rest, ...launch, ...vols, ...(keepAwake === false ? { noKeepAwake: true } : {}) }));
    } catch (err) {
      await engine.close();
      throw err;
    }
  }

  /**
   * Build an image (from a Dockerfile, or the default stanza at another size
   * class) and launch a sandbox of it; terminate({ deleteImage: true }) deletes the image.
   */
  static async build(opts: BuildOptions = {}): Promise<Sandbox> {
    const { binary, onProgress, dockerfile, egress, launchEnv, maxIdleSec, suspendedSec, maxDurationSec, ...rest } = opts;
    const launch = launchArgs({ egress, launchEnv, maxIdleSec, suspendedSec, maxDurationSec });
    const engine = Engine.shared(binary);
    try {
      let data: C.SandboxData | null = null;
      for await (const ev of engine.build({ ...rest, ...launch, ...(dockerfile !== undefined ? { dockerfile: resolvePath(dockerfile) } : {}) }) as AsyncIterable<Record<string, unknown>>) {
        if (ev.event === "build") {
          onProgress?.({ step: Number(ev.step), steps: Number(ev.steps), instruction: String(ev.instruction ?? ""), text: String(ev.text ?? ""),
            done: Boolean(ev.done), cached: Boolean(ev.cached) });
        } else if (typeof ev.microvmId === "string") {
          data = ev as unknown as C.SandboxData;
        }
      }
      if (data === null) throw new ProtocolError("the engine's build ended without a sandbox", "ERR_PROTOCOL");
      return new Sandbox(engine, data);
    } catch (err) {
      await engine.close();
      throw err;
    }
  }

  /** Reach a MicroVM another process launched; closing an attached sandbox leaves it running. */
  static async attach(microvmId: string, opts: AttachOptions): Promise<Sandbox> {
    const engine = Engine.shared(opts.binary);
    try {
      return new Sandbox(engine, await engine.attach({
        microvmId, agentToken: opts.agentToken,
        ...(opts.controlEndpoint ? { controlEndpoint: opts.controlEndpoint } : {}),
        ...(opts.region ? { region: opts.region } : {}),
      }));
    } catch (err) {
      await engine.close();
      throw err;
    }
  }

  get microvmId(): string { return this.info.microvmId; }
  /** The bearer the VM's agentd accepts: a secret, needed to attach. */
  get agentToken(): string { return this.info.agentToken; }
  get controlEndpoint(): string | null { return this.info.controlEndpoint; }
  get region(): string { return this.info.region; }
  get endpoint(): string | null { return this.info.endpoint; }
  /** The idle policy's window in force: suspended after this many seconds without an inbound request. */
  get maxIdleSeconds(): number { return this.info.maxIdleSeconds; }
  /** When the platform ends the VM at its maximum duration (RFC 3339), null when not known. */
  get endsAt(): string | null { return this.info.endsAt; }
  /** The engine's pid, for a caller checking what it left behind. */
  get enginePid(): number | undefined { return this.engine.pid; }

  /** The last state the platform confirmed (RUNNING, SUSPENDED, TERMINATED...). */
  async lifecycle(): Promise<string> {
    this.info = await this.engine.info();
    return this.info.state;
  }

  toString(): string { return `Sandbox(${this.info.microvmId})`; }
  toJSON(): object { return { microvmId: this.info.microvmId }; } // never the token

  /** Run a command and wait: a string through sh -c, an array as argv. */
  async run(cmd: string | readonly string[], opts: ExecOptions = {}): Promise<ExecResult> {
    // The caller mints the id, so an abort can kill the command.
    const execId = opts.execId ?? `ts-${randomUUID()}`;
    const unhook = this.killOnAbort(execId, opts.signal);
    try {
      return toResult(await this.engine.run(execArgs(cmd, { ...opts, execId })));
    } finally {
      unhook();
    }
  }

  /**
   * Run a command, yielding its output as it arrives (output, gap, then
   * exit). Leaving the loop before the exit (break, throw) kills the
   * command, as does an abort of opts.signal.
   */
  stream(cmd: string | readonly string[], opts: ExecOptions = {}): ExecStream {
    const execId = opts.execId ?? `ts-${randomUUID()}`;
    const unhook = this.killOnAbort(execId, opts.signal);
    const stream = new ExecStream(this.engine.streamExec(execArgs(cmd, { ...opts, execId })), async (exited) => {
      unhook();
      if (!exited) await this.engine.kill({ execId }).catch(() => undefined); // the engine or VM gone: nothing to kill
    });
    return stream;
  }

  private killOnAbort(execId: string, signal: AbortSignal | undefined): () => void {
    if (!signal) return () => {};
    const onAbort = () => void this.engine.kill({ execId }).catch(() => undefined);
    if (signal.aborted) queueMicrotask(onAbort);
    else signal.addEventListener("abort", onAbort, { once: true });
    return () => signal.removeEventListener("abort", onAbort);
  }

  /** Start a command in the background: a string through sh -c, an array as argv. */
  async start(cmd: string | readonly string[], opts: StartOptions = {}): Promise<Process> {
    const { stdin, pty, ...exec } = opts;
    const d = await this.engine.start({
      ...execArgs(cmd, { ...exec, execId: exec.execId ?? `ts-${randomUUID()}` }),
      stdin: stdin ?? false,
      ...(pty ? { tty: true, rows: pty.rows, cols: pty.cols } : {}),
    });
    return new Process(this.engine, d.execId);
  }

  /** The handle of a command started earlier (by this or another process). */
  process(execId: string): Process { return new Process(this.engine, execId); }

  /** Every command the daemon holds, oldest first, as agentd's ExecSummary objects. */
  async processes(): Promise<Record<string, unknown>[]> {
    return (await this.engine.execs()).execs as Record<string, unknown>[];
  }

  /** agentd's health answer as its wire object. */
  async health(): Promise<Record<string, unknown>> { return (await this.engine.health()).probe; }

  /** The guest's CPU, memory, load and disk as agentd samples them, as its wire object. */
  async metrics(): Promise<Record<string, unknown>> { return (await this.engine.metrics()).probe; }

  /**
   * Hold the VM awake for forSec seconds for work nothing here waits on (a
   * started command): a health request through its endpoint every everySec
   * (unset: a quarter of the idle limit). Runs, streams and transfers are kept awake without it.
   */
  async holdAwake(forSec: number, opts: { everySec?: number } = {}): Promise<KeepaliveReport> {
    const d = await this.engine.keepalive({ forSec, ...(opts.everySec !== undefined ? { everySec: opts.everySec } : {}) });
    return { microvmId: d.microvmId, pings: d.pings, heldSeconds: d.heldSeconds };
  }

  /**
   * The network in force: the policy, the secrets' names, hosts and
   * placeholders (never their values), and the connections refused.
   */
  async network(): Promise<C.NetworkState> { return (await this.engine.networkShow()).network; }

  /**
   * Replace the network policy: new connections follow it at once, and open
   * ones it no longer allows are closed before this resolves. An empty
   * allow list needs { denyAll: true }. Resolves to what is then in force.
   */
  async setNetworkPolicy(allow: string[], opts: { denyAll?: boolean } = {}): Promise<C.NetworkState> {
    return (await this.engine.networkSet({ allow: [...allow], ...(opts.denyAll ? { denyAll: true } : {}) })).network;
  }

  /** Freeze the VM: files, processes and the token survive. Resolves to the new state. */
  async suspend(): Promise<string> { return (await this.engine.suspend()).state; }
  /** Thaw a suspended VM and wait until it runs. Resolves to the new state. */
  async resume(): Promise<string> { return (await this.engine.resume()).state; }

  /** Tear the VM down; never throws for what it could not delete, it names it. */
  async terminate(opts: { deleteImage?: boolean } = {}): Promise<TeardownReport> {
    const d = await this.engine.terminate({ deleteImage: opts.deleteImage ?? false });
    const undeleted = [...d.leaked, ...d.undeletedLogGroups];
    return { microvmId: d.microvmId, lifecycle: d.state, undeleted, leaked: undeleted.length > 0, imageIdentifier: d.imageIdentifier };
  }

  /**
   * The URL, headers and expiry that reach guest port `port`, through a token
   * minted for that port alone. Every port shares the endpoint URL: send the
   * headers (the token and X-aws-proxy-port) with every request; they are
   * credentials. expiresMinutes is 1..60, 0 for 60.
   */
  async url(port: number, opts: { expiresMinutes?: number } = {}): Promise<PortURL> {
    const d = await this.engine.url({ port, expiresMinutes: opts.expiresMinutes ?? 0 });
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(d.headers)) headers[k] = String(v);
    return { microvmId: d.microvmId, port: d.port, url: d.url, headers, expiresAt: d.expiresAt, subprotocols: [...d.subprotocols] };
  }

  /** What the run cost so far, from what the platform reports (also after terminate). */
  async cost(): Promise<CostReport> {
    const r = (await this.engine.cost()).report;
    return { label: r.label, size: r.size, items: r.lines, totalUsd: r.totalUsd, isLowerBound: r.isLowerBound, staleness: r.staleness, text: r.text };
  }

  /** Let the sandbox go: one this process launched is terminated (a local one's emulator stops); the process's engine lives on for the next. */
  async close(): Promise<void> { await this.engine.close(); }

  async [Symbol.asyncDispose](): Promise<void> { await this.close(); }
}

/** One MicroVM of a fleet: its command's outcome, or why it had none. */
export interface FleetRun {
  readonly index: number;
  readonly microvmId: string;
  readonly exitCode: number | null;
  readonly stdout: string;
  readonly stderr: string;
  readonly truncated: boolean;
  /** "" when the command exited 0; ERR_EXEC_FAILED when it exited non-zero; another code when the MicroVM never ran it. */
  readonly errorCode: string;
  readonly error: string;
  readonly ok: boolean;
}

/** What runMany reports: a run per MicroVM, in launch order, and one cost. */
export interface FleetResult {
  readonly imageIdentifier: string;
  readonly runs: FleetRun[];
  readonly leaked: string[];
  readonly cost: CostReport | null;
  readonly ok: boolean;
}

/** The fleet, and each MicroVM's launch (create's options). */
export interface RunManyOptions extends LaunchOptions {
  /** How many MicroVMs (1..MAX_FLEET_COUNT). */
  count: number;
  /** At most this many alive at once; 0 or unset takes the default. */
  parallel?: number;
  local?: boolean;
  image?: string;
  region?: string;
  controlEndpoint?: string;
  executionRoleArn?: string;
  agentd?: string;
  timeoutSec?: number;
  /** The microvm binary: this, then $MICROVM_BIN, then PATH. */
  binary?: string;
}

/**
 * Run `command` (through /bin/sh -c) in `opts.count` MicroVMs, each torn down
 * after: the CLI's `run --count`, run by the Go library in one engine, so the
 * bounds, the teardown and the one cost report are the CLI's. A command's
 * non-zero exit is a result in its run, not a throw.
 */
export async function runMany(command: string, opts: RunManyOptions): Promise<FleetResult> {
  const engine = Engine.own(opts.binary);
  try {
    return await fleetOf(() => engine.runMany({
      count: opts.count, parallel: opts.parallel ?? 0, command, local: opts.local ?? false, image: opts.image ?? "",
      region: opts.region ?? "", controlEndpoint: opts.controlEndpoint ?? "", executionRoleArn: opts.executionRoleArn ?? "",
      agentd: opts.agentd ?? "", timeoutSec: opts.timeoutSec ?? 0, ...launchArgs(opts),
    }));
  } finally {
    await engine.close();
  }
}

/** The FleetResult of a fleet op (run_many, fork); a command's non-zero exit is a result, not a throw. */
async function fleetOf(call: () => Promise<C.RunFleetData>): Promise<FleetResult> {
  {
    let data: C.RunFleetData;
    try {
      data = await call();
    } catch (err) {
      // The fleet ran; a command exited non-zero (ERR_EXEC_FAILED, the worst
      // run's exit by the exit table): still a result.
      if (err instanceof MicrovmError && err.code === "ERR_EXEC_FAILED" && Array.isArray(err.data.runs)) {
        data = err.data as unknown as C.RunFleetData;
      } else {
        throw err;
      }
    }
    const runs = data.runs.map((r) => ({
      index: r.index, microvmId: r.microvmId, exitCode: r.exitCode, stdout: r.stdout, stderr: r.stderr, truncated: r.truncated,
      errorCode: r.code, error: r.error, ok: r.code === "" && r.exitCode === 0,
    }));
    const c = data.cost;
    const cost = c ? { label: c.label, size: c.size, items: c.lines, totalUsd: c.totalUsd, isLowerBound: c.isLowerBound, staleness: c.staleness, text: c.text } : null;
    return { imageIdentifier: data.imageIdentifier, runs, leaked: data.leaked, cost, ok: runs.every((r) => r.ok) && data.leaked.length === 0 };
  }
}

export interface CheckpointOptions {
  /** Absolute guest paths to save; unset, the working directory (which must not be /). */
  paths?: string[];
  name?: string;
  labels?: Record<string, string>;
  /** false leaves the guest's commands running while its files are read. */
  pause?: boolean;
}

/** The checkpoint, the command, and each copy's launch (create's options, not this sandbox's). */
export interface ForkOptions extends CheckpointOptions, LaunchOptions {
  command?: string;
  parallel?: number;
  timeoutSec?: number;
}

/** Where the checkpoint is stored, and the launch (create's options, with its defaults). */
export interface RestoreOptions extends LaunchOptions {
  controlEndpoint?: string;
  region?: string;
  imageVersion?: string;
  allowOtherVersion?: boolean;
  executionRoleArn?: string;
  binary?: string;
}

function saveArgs(o: CheckpointOptions): C.CheckpointArgs {
  return { paths: o.paths ?? [], name: o.name ?? "", labels: Object.entries(o.labels ?? {}).map(([k, v]) => `${k}=${v}`), noPause: o.pause === false };
}

/** The stored checkpoints, through a sandbox's engine. */
export class Checkpoints {
  constructor(private readonly engine: Engine) {}
  /** Every stored checkpoint's manifest, newest first (with name, that one). */
  async list(name = ""): Promise<C.CheckpointManifest[]> { return (await this.engine.checkpointLs({ name })).checkpoints; }
  /** Remove a checkpoint by name or digest; the bucket keys deleted. */
  async remove(ref: string): Promise<string[]> { return (await this.engine.checkpointRm({ ref })).removed; }
  /**
   * Bake checkpoint ref into a new image whose launches start with its files
   * in place (`microvm checkpoint image`); name defaults to the source
   * image's name and the digest's first 12 characters. Locally the emulator
   * needs a base image for FROM (Sandbox.build's baseImage); without one it
   * throws PreconditionError and leaves nothing behind.
   */
  async bake(ref: string, name = ""): Promise<C.BakedImage> { return (await this.engine.checkpointImage({ ref, name })).image!; }
}

/** The volumes, through a sandbox's engine: one sandbox writes a volume at a time. */
export class Volumes {
  constructor(private readonly engine: Engine) {}
  /** Save a new generation of every volume this sandbox holds; their manifests. */
  async sync(): Promise<C.CheckpointManifest[]> { return (await this.engine.volumeSync()).saved; }
  /** Every stored volume with its generations (newest first) and lease holder. */
  async list(): Promise<C.VolumeInfo[]> { return (await this.engine.volumeLs()).volumes; }
  /** Delete a volume no live sandbox holds; the bucket keys deleted. */
  async remove(name: string): Promise<string[]> { return (await this.engine.volumeRm({ name })).removed; }
}

/** The pool as its engine last saw it. */
export interface PoolStatus {
  readonly size: number;
  /** Members launched, suspended and waiting. */
  readonly ready: number;
  /** Members handed out so far. */
  readonly served: number;
  readonly closed: boolean;
  /** After close: what members' teardowns could not delete. */
  readonly leaked: string[];
}

/** launchEnv is delivered at launch, long before an acquire: never one tenant's secrets; keep suspendedSec longer than members wait. */
export interface PoolOptions extends Omit<CreateOptions, "imageVersion" | "agentToken" | "timeoutSec" | "volumes" | "keepAwake" | NetworkKeys> {
  /** Members kept launched and suspended, 1..MAX_POOL_SIZE. */
  size: number;
  /** Launches in flight at once while filling; 0 or unset is the default. */
  refill?: number;
  imageVersion?: string;
}

function poolStatus(d: C.PoolData): PoolStatus {
  return { size: d.size, ready: d.ready, served: d.served, closed: d.closed, leaked: [...d.leaked] };
}

function costReport(r: C.CostReport): CostReport {
  return { label: r.label, size: r.size, items: r.lines, totalUsd: r.totalUsd, isLowerBound: r.isLowerBound, staleness: r.staleness, text: r.text };
}

/**
 * A warm pool of sandboxes of one image: size MicroVMs launched and
 * suspended in the background by one engine, so an acquire costs a resume.
 * A member acquired is a Sandbox attached under its own handle on the shared engine; release
 * terminates it (it is never put back). close tears down every member.
 */
export class Pool implements AsyncDisposable {
  private final: PoolStatus | null = null;

  private constructor(private readonly engine: Engine, private data: C.PoolData, private readonly binary: string | undefined) {}

  /** Start filling a pool in the background; resolves at once. */
  static async open(opts: PoolOptions): Promise<Pool> {
    const { binary, launchEnv, ...rest } = opts;
    const engine = Engine.own(binary);
    try {
      const args: C.PoolOpenArgs = { ...rest, ...(launchEnv ? { launchEnv: Object.entries(launchEnv).map(([k, v]) => `${k}=${v}`) } : {}) };
      return new Pool(engine, await engine.poolOpen(args), binary);
    } catch (err) {
      await engine.close();
      throw err;
    }
  }

  /** The status as of the last call. */
  get status(): PoolStatus { return poolStatus(this.data); }

  /** Wait until the pool is full; past timeoutSec the status says how full it got. */
  async waitReady(opts: { timeoutSec?: number } = {}): Promise<PoolStatus> {
    this.data = await this.engine.poolWaitReady(opts.timeoutSec !== undefined ? { timeoutSec: opts.timeoutSec } : {});
    return poolStatus(this.data);
  }

  /** One member, RUNNING, attached under its own handle on the shared engine; release() it when done. */
  async acquire(): Promise<Sandbox> {
    const d = await this.engine.poolAcquire();
    return Sandbox.attach(d.microvmId, { agentToken: d.agentToken, controlEndpoint: d.controlEndpoint, region: d.region, binary: this.binary });
  }

  /** Close the member's engine and terminate it; never throws for what it could not delete, it names it. */
  async release(sb: Sandbox): Promise<TeardownReport> {
    await sb.close();
    const d = await this.engine.poolRelease({ microvmId: sb.microvmId });
    const undeleted = [...d.leaked, ...d.undeletedLogGroups];
    return { microvmId: d.microvmId, lifecycle: d.state, undeleted, leaked: undeleted.length > 0, imageIdentifier: d.imageIdentifier };
  }

  /** What the pool's whole life cost so far, every member included. */
  async cost(): Promise<CostReport> { return costReport((await this.engine.poolCost()).report); }

  /** Stop the refill, tear down every member, then end the engine. A second close resolves to the first's status. */
  async close(): Promise<PoolStatus> {
    if (this.final) return this.final;
    try {
      this.data = await this.engine.poolClose();
      this.final = poolStatus(this.data);
      return this.final;
    } finally {
      await this.engine.close();
    }
  }

  async [Symbol.asyncDispose](): Promise<void> { await this.close(); }
}
