// One agentd process on 127.0.0.1 for a test suite (identity repair off, in a
// temporary directory), stopped by the suite after. The binary is
// $AGENTD_BIN, or built from cmd/agentd with `go build` when that is unset.
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync } from "node:fs";
import { createServer, type AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

import { createAgentdClient } from "../src/index.js";

// dist/test/daemon.js -> the repository root.
export const repo = resolve(fileURLToPath(import.meta.url), "../../../../..");

let built: string | undefined;
export function agentdBinary(): string {
  if (process.env.AGENTD_BIN) return process.env.AGENTD_BIN;
  if (!built) {
    built = join(mkdtempSync(join(tmpdir(), "agentd-ts-")), "agentd");
    execFileSync("go", ["build", "-o", built, "./cmd/agentd"], { cwd: repo, stdio: "inherit", timeout: 300_000 });
  }
  return built;
}

export async function freePort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
  const port = (srv.address() as AddressInfo).port;
  await new Promise((r) => srv.close(r));
  return port;
}

export class Daemon {
  proc!: ChildProcess;
  dir = mkdtempSync(join(tmpdir(), "agentd-ts-run-"));
  port = 0;
  get base() {
    return `http://127.0.0.1:${this.port}`;
  }
  async start(env: Record<string, string> = {}) {
    // A free port can be taken between probing it and agentd binding it
    // (other test processes share the machine): a daemon that exits at once
    // is started again on another port, a bounded number of times.
    for (let attempt = 1; ; attempt++) {
      const why = await this.startOnce(env);
      if (why === "") return;
      if (attempt >= 3 || why !== "exited") {
        let log = "";
        try {
          log = readFileSync(join(this.dir, "agentd.log"), "utf8");
        } catch {
          // no log written
        }
        throw new Error(`agentd never answered health (${why}): ${log.slice(-2000)}`);
      }
    }
  }
  private async startOnce(env: Record<string, string>): Promise<string> {
    this.port = await freePort();
    const log = openSync(join(this.dir, "agentd.log"), "w");
    this.proc = spawn(agentdBinary(), [], {
      cwd: this.dir,
      env: { PATH: process.env.PATH ?? "/usr/bin:/bin", AGENTD_PORT: String(this.port), AGENTD_IDENTITY_REPAIR: "0", ...env },
      stdio: ["ignore", log, log],
    });
    closeSync(log);
    const anon = createAgentdClient({ baseUrl: this.base });
    const deadline = Date.now() + 20_000;
    for (;;) {
      try {
        const r = await anon.GET("/v1/health");
        if (r.response.ok) return "";
      } catch {
        // not listening yet
      }
      if (this.proc.exitCode !== null) return "exited";
      if (Date.now() > deadline) return "no answer within 20 s";
      await new Promise((r) => setTimeout(r, 20));
    }
  }
  async stop() {
    if (this.proc.exitCode === null) {
      const exited = new Promise((r) => this.proc.once("exit", r));
      this.proc.kill("SIGTERM");
      const timer = setTimeout(() => this.proc.kill("SIGKILL"), 10_000);
      await exited;
      clearTimeout(timer);
    }
    rmSync(this.dir, { recursive: true, force: true });
  }
}


/**
 * A running `microvm emulator` ($MICROVM_BIN) on a free loopback port, with
 * AWS_ENDPOINT_URL pointed at it (so engines' S3 is its slice too) until
 * stop(), which also ends it. Its S3 slice outlives each engine.
 */
export async function startEmulator(prefix: string): Promise<{ url: string; stop: () => Promise<void> }> {
  const emu = spawn(process.env.MICROVM_BIN!, ["emulator", "--listen", "127.0.0.1:0", "--json"], {
    stdio: ["ignore", "ignore", "pipe"],
    env: { ...process.env, MICROVM_STATE_DIR: mkdtempSync(join(tmpdir(), `${prefix}-state-`)), MICROVM_ARTIFACT_DIR: mkdtempSync(join(tmpdir(), `${prefix}-art-`)) },
  });
  let url = "";
  let n = 0;
  for await (const line of createInterface({ input: emu.stderr! })) {
    const at = line.indexOf(" at http://");
    if (at >= 0) { url = line.slice(at + 4).trim(); break; }
    if (++n > 200) break;
  }
  if (!url) throw new Error("microvm emulator never said where it serves");
  process.env.AWS_ENDPOINT_URL = url;
  const stop = async () => {
    delete process.env.AWS_ENDPOINT_URL;
    if (emu.exitCode === null) {
      const gone = new Promise((resolve) => emu.once("exit", resolve));
      emu.kill("SIGINT");
      await gone;
    }
  };
  return { url, stop };
}
