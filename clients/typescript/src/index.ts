/**
 * TypeScript client of the microvms agentd wire protocol v1.
 *
 * Generated: src/schema.ts, by openapi-typescript from api/openapi.yaml
 * (`make gen`; never edit it): every route, parameter, body, status and error
 * slug as types, the SSE events as a discriminated union, the enum values.
 * Calls go through openapi-fetch, typed by those paths:
 *
 *   const agentd = createAgentdClient({ baseUrl, token });
 *   const started = unwrap(await agentd.POST("/v1/exec/start", { body: { exec_id, command } }));
 *
 * Hand-written (this file), each where no generator reaches:
 * - bearer auth: openapi-fetch has no security-scheme support; one middleware.
 * - unwrap/AgentdError: 401 and 503 have no body, so openapi-fetch leaves
 *   `error` undefined on them; unwrap throws on every non-2xx status.
 * - bootstrap: the run hook's payload is JSON inside a JSON string, which
 *   OpenAPI 3.0 cannot type (api/openapi.yaml names it in x-content-schema).
 * - events/follow: the SSE wire format and the resume rule (next offset =
 *   output offset + decoded length; a gap moves to its end; no exit event
 *   means the connection broke) are protocol semantics, not schema.
 * - run/offersRun: the run route (start, stream, release in one exchange)
 *   where the daemon's /v1/schema lists it, else start then follow.
 * - frames (frames.ts; constants generated into wire.ts from x-frames): the
 *   stream and run routes ask for binary frames where /v1/schema lists them
 *   (offersFrames) and read the body by the type it came with, so output
 *   arrives as raw bytes (data.raw), not base64; else SSE as before.
 * - writeFile/readFile/writeTar/readTar: byte bodies. openapi-typescript types
 *   `format: binary` as string, and openapi-fetch JSON-encodes bodies by
 *   default, which would store a quoted string; these send bytes as they are.
 */
import createClient, { type Client, type Middleware } from "openapi-fetch";
import type { components, paths } from "./schema.js";
import { FrameError, frameEvents, outputData, type ExecEvent } from "./frames.js";
import { FRAMES_MEDIA_TYPE } from "./wire.js";

export * from "./schema.js";
export * from "./wire.js";
export { FrameCut, FrameError, FrameReader, frameEvent, frameEvents, type ChunkSource, type ExecEvent, type Frame, type OutputData } from "./frames.js";

export type AgentdClient = Client<paths>;
export type Schemas = components["schemas"];
export type StreamEvent = Schemas["SSEEvent"];

/** The response header every agentd answer carries (x-version-header). */
export const VERSION_HEADER = "microvms-agentd-version";

export interface AgentdClientOptions {
  /** The daemon's base URL, e.g. http://127.0.0.1:9000. */
  baseUrl: string;
  /** The bearer token the run hook installed; sent as Authorization. */
  token?: string;
  fetch?: (input: Request) => Promise<Response>;
}

/** An openapi-fetch client of agentd, with bearer auth when a token is given. */
export function createAgentdClient(opts: AgentdClientOptions): AgentdClient {
  const client = createClient<paths>({ baseUrl: opts.baseUrl, fetch: opts.fetch });
  if (opts.token !== undefined) {
    const token = opts.token;
    const auth: Middleware = {
      onRequest({ request }) {
        request.headers.set("Authorization", `Bearer ${token}`);
        return request;
      },
    };
    client.use(auth);
  }
  return client;
}

/** A status a call did not succeed with. body is the decoded JSON error (with
 * its slug) on exec routes, the text on fs routes and the run hook, and
 * undefined on 401 and 503, which have no body. */
export class AgentdError extends Error {
  readonly status: number;
  readonly body: Schemas["ErrorBody"] | string | undefined;
  readonly response: Response;
  constructor(response: Response, body: unknown) {
    const slugged = typeof body === "object" && body !== null && "error" in body ? (body as Schemas["ErrorBody"]) : undefined;
    const text = slugged ? `${slugged.error}: ${slugged.detail}` : typeof body === "string" && body !== "" ? body : "no body";
    super(`HTTP ${response.status}: ${text}`);
    this.name = "AgentdError";
    this.status = response.status;
    this.body = slugged ?? (typeof body === "string" ? body : undefined);
    this.response = response;
  }
  /** The machine-readable slug, when the body carried one. */
  get slug(): string | undefined {
    return typeof this.body === "object" ? this.body.error : undefined;
  }
}

/** The data of a successful openapi-fetch result; throws AgentdError otherwise. */
export function unwrap<T>(result: { data?: T; error?: unknown; response: Response }): T {
  if (!result.response.ok) throw new AgentdError(result.response, result.error);
  return result.data as T;
}

/** Installs the token (and launch env) through the run hook, as the platform does. */
export async function bootstrap(client: AgentdClient, payload: Schemas["RunHookPayload"]): Promise<void> {
  unwrap(await client.POST("/aws/lambda-microvms/runtime/v1/run", { body: { runHookPayload: JSON.stringify(payload) } }));
}

const identity = (b: unknown) => b as BodyInit;

/** PUT /v1/fs/file with the bytes as they are. */
export async function writeFile(client: AgentdClient, path: string, data: Uint8Array | string, mode?: string): Promise<void> {
  unwrap(
    await client.PUT("/v1/fs/file", {
      params: { query: { path, mode } },
      body: data as unknown as string,
      bodySerializer: identity,
      headers: { "Content-Type": "application/octet-stream" },
    }),
  );
}

/** GET /v1/fs/file as bytes, optionally an inclusive 1-based line range. */
export async function readFile(client: AgentdClient, path: string, lines?: { start?: number; end?: number }): Promise<Uint8Array> {
  const buf = unwrap(
    await client.GET("/v1/fs/file", {
      params: { query: { path, start_line: lines?.start, end_line: lines?.end } },
      parseAs: "arrayBuffer",
    }),
  );
  return new Uint8Array(buf);
}

/** PUT /v1/fs/tar: extracts an uncompressed tar under path. */
export async function writeTar(client: AgentdClient, path: string, tar: Uint8Array): Promise<void> {
  unwrap(
    await client.PUT("/v1/fs/tar", {
      params: { query: { path } },
      body: tar as unknown as string,
      bodySerializer: identity,
      headers: { "Content-Type": "application/x-tar" },
    }),
  );
}

/** GET /v1/fs/tar: the tree under path as an uncompressed tar. */
export async function readTar(client: AgentdClient, path: string): Promise<Uint8Array> {
  return new Uint8Array(unwrap(await client.GET("/v1/fs/tar", { params: { query: { path } }, parseAs: "arrayBuffer" })));
}

/** The Accept header that asks for binary frames, SSE still acceptable. */
const ACCEPT_FRAMES = `${FRAMES_MEDIA_TYPE}, text/event-stream;q=0.5`;

/** The events of one answer of the stream or run route, read by the type it
 * came with: binary frames, or SSE (whose output events are decoded once). */
async function* answerEvents(response: Response, body: unknown): AsyncGenerator<ExecEvent> {
  const stream = body as ReadableStream<Uint8Array> | null | undefined;
  const type = (response.headers.get("Content-Type") ?? "").split(";")[0].trim().toLowerCase();
  if (type === FRAMES_MEDIA_TYPE) {
    yield* frameEvents(stream);
    return;
  }
  for await (const ev of sseBody(stream)) {
    if (ev.event === "output") {
      yield { event: "output", data: outputData(ev.data.offset, ev.data.stream, new Uint8Array(Buffer.from(ev.data.output, "base64")), ev.data.output) };
    } else {
      yield ev;
    }
  }
}

/** One connection's events of GET /v1/exec/{id}/stream: the generated
 * SSEEvent union, output events carrying their bytes in data.raw;
 * keepalives are skipped. Ends when the body does (after exit, or when the
 * connection breaks). frames asks for binary frames (the daemon may still
 * answer SSE). */
export async function* events(client: AgentdClient, id: string, offset = 0, signal?: AbortSignal, frames = false): AsyncGenerator<ExecEvent> {
  const result = await client.GET("/v1/exec/{id}/stream", {
    params: { path: { id }, query: offset > 0 ? { offset } : {} },
    parseAs: "stream",
    headers: frames ? { Accept: ACCEPT_FRAMES } : {},
    signal,
  });
  if (!result.response.ok) {
    throw new AgentdError(result.response, result.error);
  }
  yield* answerEvents(result.response, result.data);
}

/** The events of one SSE body. */
async function* sseBody(body: ReadableStream<Uint8Array> | null | undefined): AsyncGenerator<StreamEvent> {
  if (!body) return;
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffered = "";
  let event = "message";
  let data: string[] = [];
  let id_: string | undefined;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      buffered += decoder.decode(value, { stream: true });
      let nl: number;
      while ((nl = buffered.indexOf("\n")) >= 0) {
        const line = buffered.slice(0, nl).replace(/\r$/, "");
        buffered = buffered.slice(nl + 1);
        if (line === "") {
          if (data.length > 0) {
            const frame: Record<string, unknown> = { event, data: JSON.parse(data.join("\n")) };
            if (id_ !== undefined) frame.id = id_;
            yield frame as unknown as StreamEvent;
          }
          event = "message";
          data = [];
          id_ = undefined;
          continue;
        }
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const key = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? "" : line.slice(colon + 1);
        if (value.startsWith(" ")) value = value.slice(1);
        if (key === "event") event = value;
        else if (key === "data") data.push(value);
        else if (key === "id") id_ = value;
      }
    }
  } finally {
    await reader.cancel().catch(() => undefined);
  }
}

/** The resume point after event, given the one before it. */
export function nextOffset(event: StreamEvent | ExecEvent, offset: number): number {
  switch (event.event) {
    case "output":
      return event.data.offset + ("raw" in event.data ? event.data.raw.length : Buffer.from(event.data.output, "base64").length);
    case "gap":
      return Math.max(offset, event.data.to);
    default:
      return offset;
  }
}

/** Raised by follow when the stream kept breaking; offset is where to resume. */
export class StreamCut extends Error {
  constructor(
    readonly execId: string,
    readonly offset: number,
    cause: unknown,
  ) {
    super(`stream of ${execId} cut at offset ${offset}: ${String(cause)}`);
    this.name = "StreamCut";
  }
}

/** Options of follow and run. frames: undefined asks for binary frames where
 * the daemon's /v1/schema lists them; false never asks (SSE); true always
 * asks (the daemon may still answer SSE). */
export interface FollowOptions {
  offset?: number;
  reconnects?: number;
  backoffMs?: number;
  signal?: AbortSignal;
  frames?: boolean;
}

/** Every event of exec id from offset to its exit event, reconnecting from the
 * next unread byte when the connection breaks; each event is yielded once.
 * Throws StreamCut after `reconnects` consecutive breaks with no event between
 * them, AgentdError (404 unknown_exec, 401, ...) at once, and FrameError at
 * once for a frame no conforming writer sends (a body cut inside a frame is a
 * break, and is resumed). */
export async function* follow(client: AgentdClient, id: string, opts: FollowOptions = {}): AsyncGenerator<ExecEvent> {
  let offset = opts.offset ?? 0;
  const reconnects = opts.reconnects ?? 5;
  const frames = opts.frames ?? (await offersFrames(client));
  let failures = 0;
  for (;;) {
    let cause: unknown = new Error("the body ended without an exit event");
    try {
      for await (const ev of events(client, id, offset, opts.signal, frames)) {
        failures = 0;
        offset = nextOffset(ev, offset);
        yield ev;
        if (ev.event === "exit") return;
      }
    } catch (e) {
      if (e instanceof AgentdError || e instanceof FrameError || opts.signal?.aborted) throw e;
      cause = e;
    }
    failures++;
    if (failures > reconnects) throw new StreamCut(id, offset, cause);
    await new Promise((r) => setTimeout(r, (opts.backoffMs ?? 200) * failures));
  }
}

interface Offers {
  run: boolean;
  frames: boolean;
}
const offersCache = new WeakMap<AgentdClient, Offers>();

/** What the daemon serves beyond the reference's protocol v1, read once per
 * client from its /v1/capabilities (a few hundred bytes) or, where that is
 * 404 (the reference's daemon, an older one), its /v1/schema document (about
 * 124 KB): the run route and binary frames (a reference daemon lists
 * neither). A failed read is not remembered. */
async function offers(client: AgentdClient): Promise<Offers> {
  const known = offersCache.get(client);
  if (known !== undefined) return known;
  let doc: unknown;
  try {
    const caps = await client.GET("/v1/capabilities", {});
    const result = caps.response.status === 404 ? await client.GET("/v1/schema", {}) : caps;
    if (!result.response.ok) {
      const none = { run: false, frames: false };
      offersCache.set(client, none);
      return none;
    }
    doc = result.data;
  } catch {
    return { run: false, frames: false };
  }
  const d = (doc ?? {}) as { routes?: { method?: string; path?: string }[]; frames?: { media_type?: string } };
  const found = {
    run: (d.routes ?? []).some((r) => r.method === "POST" && r.path === "/v1/exec/run"),
    frames: d.frames?.media_type === FRAMES_MEDIA_TYPE,
  };
  offersCache.set(client, found);
  return found;
}

/** Whether the daemon serves POST /v1/exec/run (its /v1/capabilities or
 * /v1/schema lists it). */
export async function offersRun(client: AgentdClient): Promise<boolean> {
  return (await offers(client)).run;
}

/** Whether the daemon lists binary frames (x-frames) for the stream and run
 * routes. */
export async function offersFrames(client: AgentdClient): Promise<boolean> {
  return (await offers(client)).frames;
}

/** Starts request and yields its events from offset 0 to the exit event.
 * Where the daemon offers the run route this is one exchange, and the daemon
 * releases the exec with the exit event: there is nothing to ack. A
 * connection that breaks before the exit leaves the exec unacked, and the
 * rest is followed through the stream route (the caller then acks, as after
 * follow). Against any other daemon it is a start, then follow. Where the
 * daemon lists binary frames, output comes as raw bytes; opts.frames as for
 * follow. */
export async function* run(
  client: AgentdClient,
  request: Schemas["StartRequest"],
  opts: Omit<FollowOptions, "offset"> = {},
): AsyncGenerator<ExecEvent> {
  const frames = opts.frames ?? (await offersFrames(client));
  if (await offersRun(client)) {
    let offset = 0;
    try {
      const result = await client.POST("/v1/exec/run", {
        body: request,
        parseAs: "stream",
        headers: frames ? { Accept: ACCEPT_FRAMES } : {},
        signal: opts.signal,
      });
      if (!result.response.ok) {
        throw new AgentdError(result.response, result.error);
      }
      for await (const ev of answerEvents(result.response, result.data)) {
        offset = nextOffset(ev, offset);
        yield ev;
        if (ev.event === "exit") return;
      }
    } catch (e) {
      if (e instanceof AgentdError || e instanceof FrameError || opts.signal?.aborted) throw e;
    }
    yield* follow(client, request.exec_id, { ...opts, frames, offset });
    return;
  }
  unwrap(await client.POST("/v1/exec/start", { body: request, signal: opts.signal }));
  yield* follow(client, request.exec_id, { ...opts, frames });
}
