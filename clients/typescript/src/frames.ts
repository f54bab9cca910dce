/**
 * Binary frames of the exec stream and run routes (x-frames in
 * api/openapi.yaml), hand-written: a strict reader, and the frames as the
 * stream events the SSE body carries. The layout's constants come from the
 * generated src/wire.ts, never from here.
 *
 * A FrameReader must never trust a length before checking it (a body
 * announcing a 4 GiB payload is refused, not buffered), and must never report
 * a body cut inside a frame as a clean end: that is FrameCut, a broken
 * connection follow resumes, while FrameError (bytes no conforming writer
 * sends) is never retried.
 */
import type { components } from "./schema.js";
import { FRAME, FRAME_HEADER_BYTES, FRAME_LAST_TYPE, FRAME_MAX_PAYLOAD_BYTES } from "./wire.js";

type Schemas = components["schemas"];

/** Bytes no conforming writer sends: an unknown type, a keepalive with a
 * payload, a payload over FRAME_MAX_PAYLOAD_BYTES, or a gap or exit frame
 * whose payload is not its event. */
export class FrameError extends Error {
  constructor(message: string) {
    super(`malformed frame: ${message}`);
    this.name = "FrameError";
  }
}

/** The body ended inside a frame: the connection broke, not the stream. */
export class FrameCut extends Error {
  constructor(message: string) {
    super(message);
    this.name = "FrameCut";
  }
}

/** One frame as it came; offset is a bigint because the wire's is a u64. */
export interface Frame {
  type: number;
  offset: bigint;
  payload: Uint8Array;
}

/** Anything that hands out chunks: a ReadableStream's reader. */
export interface ChunkSource {
  read(): Promise<{ done: boolean; value?: Uint8Array }>;
}

/** Reads frames from a chunk source. next() resolves to the next frame, or
 * undefined when the body ends between frames. */
export class FrameReader {
  private chunks: Uint8Array[] = [];
  private first = 0; // index of the first unread chunk
  private head = 0; // read position in chunks[first]
  private have = 0; // unread bytes in chunks
  private ended = false;

  constructor(private readonly src: ChunkSource) {}

  private async fill(n: number): Promise<boolean> {
    while (this.have < n && !this.ended) {
      const { done, value } = await this.src.read();
      if (done) {
        this.ended = true;
        break;
      }
      if (value && value.length > 0) {
        this.chunks.push(value);
        this.have += value.length;
      }
    }
    return this.have >= n;
  }

  /** Moves past k bytes of the first chunk, dropping it once read whole. */
  private advance(k: number, len: number): void {
    this.head += k;
    if (this.head === len) {
      this.first++;
      this.head = 0;
      if (this.first === this.chunks.length) {
        this.chunks = [];
        this.first = 0;
      } else if (this.first >= 1024) {
        this.chunks = this.chunks.slice(this.first);
        this.first = 0;
      }
    }
  }

  private take(n: number): Uint8Array {
    const c0 = this.chunks[this.first];
    let out: Uint8Array;
    if (c0.length - this.head >= n) {
      out = c0.subarray(this.head, this.head + n);
      this.advance(n, c0.length);
    } else {
      // Every byte is written below, so the allocation need not be zeroed
      // (zeroing fresh memory is most of a large payload's cost).
      out = Buffer.allocUnsafe(n);
      let o = 0;
      while (o < n) {
        const c = this.chunks[this.first];
        const k = Math.min(c.length - this.head, n - o);
        out.set(c.subarray(this.head, this.head + k), o);
        o += k;
        this.advance(k, c.length);
      }
    }
    this.have -= n;
    return out;
  }

  async next(): Promise<Frame | undefined> {
    if (!(await this.fill(FRAME_HEADER_BYTES))) {
      if (this.have === 0) return undefined;
      throw new FrameCut(`the body ended ${this.have} bytes into a frame header`);
    }
    const h = this.take(FRAME_HEADER_BYTES);
    const dv = new DataView(h.buffer, h.byteOffset, FRAME_HEADER_BYTES);
    const type = h[0];
    const offset = dv.getBigUint64(1);
    const n = dv.getUint32(9);
    if (type > FRAME_LAST_TYPE) throw new FrameError(`unknown type ${type}`);
    if (type === FRAME.keepalive && n !== 0) throw new FrameError(`a keepalive with ${n} payload bytes`);
    if (n > FRAME_MAX_PAYLOAD_BYTES) throw new FrameError(`a ${n}-byte payload is over the ${FRAME_MAX_PAYLOAD_BYTES}-byte limit`);
    if (n === 0) return { type, offset, payload: new Uint8Array(0) };
    if (!(await this.fill(n))) throw new FrameCut(`the body ended ${this.have} bytes into a ${n}-byte payload`);
    return { type, offset, payload: this.take(n) };
  }
}

/** The data of an output event, holding its bytes as they came: raw from
 * frames, decoded once from an SSE event's base64. output (the contract's
 * base64 field) is computed only when read, for code written against SSE. */
export type OutputData = Schemas["OutputEvent"] & { readonly raw: Uint8Array };

/** One event of an exec's stream, SSE or frames: the generated SSEEvent
 * union, with output events carrying their raw bytes too. */
export type ExecEvent =
  | { event: "output"; data: OutputData }
  | Schemas["SSEGap"]
  | Schemas["SSEExit"];

export function outputData(offset: number, stream: Schemas["StreamKind"], raw?: Uint8Array, b64?: string): OutputData {
  let r = raw;
  let b = b64;
  return {
    offset,
    stream,
    get output(): string {
      b ??= Buffer.from(r!.buffer, r!.byteOffset, r!.length).toString("base64");
      return b;
    },
    get raw(): Uint8Array {
      r ??= new Uint8Array(Buffer.from(b ?? "", "base64"));
      return r;
    },
  };
}

function offsetOf(f: Frame): number {
  if (f.offset > BigInt(Number.MAX_SAFE_INTEGER)) throw new FrameError(`offset ${f.offset} is beyond what a number holds exactly`);
  return Number(f.offset);
}

function json(f: Frame, what: string): Record<string, unknown> {
  let v: unknown;
  try {
    v = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(f.payload));
  } catch (e) {
    throw new FrameError(`${what} frame: ${String(e)}`);
  }
  if (typeof v !== "object" || v === null || Array.isArray(v)) throw new FrameError(`${what} frame: not a JSON object`);
  return v as Record<string, unknown>;
}

/** A frame (never a keepalive) as the event SSE would have carried. */
export function frameEvent(f: Frame): ExecEvent {
  switch (f.type) {
    case FRAME.stdout:
    case FRAME.stderr:
      return { event: "output", data: outputData(offsetOf(f), f.type === FRAME.stdout ? "stdout" : "stderr", f.payload) };
    case FRAME.gap: {
      const g = json(f, "gap");
      if (typeof g.from !== "number" || typeof g.to !== "number" || g.to < g.from) throw new FrameError(`gap frame: not a range: ${JSON.stringify(g)}`);
      return { event: "gap", data: g as Schemas["GapEvent"] };
    }
    case FRAME.exit: {
      const x = json(f, "exit");
      if (typeof x.offset !== "number" || !("exit_code" in x) || !("signal" in x)) throw new FrameError(`exit frame: not an exit event: ${JSON.stringify(x)}`);
      return { event: "exit", data: x as Schemas["ExitEvent"] };
    }
  }
  throw new FrameError(`type ${f.type} carries no event`);
}

/** The events of one body of frames; keepalives are skipped. */
export async function* frameEvents(body: ReadableStream<Uint8Array> | null | undefined): AsyncGenerator<ExecEvent> {
  if (!body) return;
  const reader = body.getReader();
  const frames = new FrameReader(reader as ChunkSource);
  try {
    for (;;) {
      const f = await frames.next();
      if (f === undefined) return;
      if (f.type !== FRAME.keepalive) yield frameEvent(f);
    }
  } finally {
    await reader.cancel().catch(() => undefined);
  }
}
