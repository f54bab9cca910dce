// The TypeScript row of `make bench-clients`: the four operations of
// BenchmarkClientRows (client/sandbox) through the microvms package (its
// compiled dist/, argv[2]), against one local sandbox; prints
// {"row": seconds} as one JSON line.
import { pathToFileURL } from "node:url";

const { Sandbox } = await import(pathToFileURL(process.argv[2]).href);
const mib = Number(process.env.MICROVMS_BENCH_MIB ?? "256");
const size = mib * 1024 * 1024;
const data = Buffer.alloc(size, "0123456789abcdef");
const path = "/tmp/microvms-bench.bin";
const out = {};
const secs = (t) => Number(process.hrtime.bigint() - t) / 1e9;
const sb = await Sandbox.create({ local: true });
try {
  await sb.run("true");
  let t = process.hrtime.bigint();
  await sb.files.write(path, data);
  out[`write-${mib}MiB`] = secs(t);

  t = process.hrtime.bigint();
  const got = await sb.files.readBytes(path);
  out[`read-${mib}MiB`] = secs(t);
  if (!Buffer.from(got.buffer, got.byteOffset, got.byteLength).equals(data)) throw new Error(`read ${got.length} bytes, wrote ${size}`);

  t = process.hrtime.bigint();
  let n = 0;
  for await (const item of sb.stream(["head", "-c", String(size), "/dev/zero"])) {
    if (item.kind === "output") n += item.size;
  }
  out[`stream-${mib}MiB`] = secs(t);
  if (n !== size) throw new Error(`streamed ${n} bytes of ${size}`);

  t = process.hrtime.bigint();
  for (let i = 0; i < 200; i++) {
    const r = await sb.run(["true"]);
    if (r.exitCode !== 0) throw new Error(`true exited ${r.exitCode}`);
  }
  out["run-x200"] = secs(t);
  await sb.run(["rm", "-f", path]);
} finally {
  await sb.terminate();
  await sb.close?.();
}
console.log(JSON.stringify(out));
