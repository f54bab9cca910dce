// The TypeScript row of BenchmarkTTI (client/sandbox): create -> first
// command's output through the microvms package (its compiled sandbox.js,
// argv[2]) against a running emulator (argv[3], image ARN argv[4]), argv[5]
// runs after one untimed run. Prints one JSON line per timed run: {"s":
// seconds} or {"error": why}.
import { pathToFileURL } from "node:url";

const { Sandbox } = await import(pathToFileURL(process.argv[2]).href);
const [endpoint, image, runs] = [process.argv[3], process.argv[4], Number(process.argv[5])];
// One untimed run first: it starts the package's engine process, which the
// timed runs share, as the Go row's runs share their process. BenchmarkTTI
// runs this driver once per round, so each round has one.
try {
  const sb = await Sandbox.create({ image, controlEndpoint: endpoint });
  try { await sb.run(["true"]); } finally { await sb.terminate().catch(() => {}); await sb.close().catch(() => {}); }
} catch {}
for (let i = 0; i < runs; i++) {
  const t = process.hrtime.bigint();
  let sb;
  try {
    sb = await Sandbox.create({ image, controlEndpoint: endpoint });
    const r = await sb.run(["echo", "hi"]);
    if (r.stdout !== "hi\n") throw new Error(`echo printed ${JSON.stringify(r.stdout)}`);
    console.log(JSON.stringify({ s: Number(process.hrtime.bigint() - t) / 1e9 }));
  } catch (err) {
    console.log(JSON.stringify({ error: `${err?.name ?? "Error"}: ${String(err?.message ?? err).slice(0, 200)}` }));
  } finally {
    if (sb) {
      try { await sb.terminate(); } catch {}
      try { await sb.close(); } catch {}
    }
  }
}
