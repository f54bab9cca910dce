// The TypeScript row of `make bench-clients`: the four operations of
// BenchmarkClientRows (client/sandbox) through the microvms package (its
// compiled dist/, argv[2]), against one local sandbox; prints
// {"row": seconds or {"error": why}} as one JSON line per operation, as it
// ends. An operation that fails is reported, and the rest still run.
import { pathToFileURL } from "node:url";

const { Sandbox } = await import(pathToFileURL(process.argv[2]).href);
const mib = Number(process.env.MICROVMS_BENCH_MIB ?? "256");
const size = mib * 1024 * 1024;
const data = Buffer.alloc(size, "0123456789abcdef");
const path = "/tmp/microvms-bench.bin";
const out = {};
const timed = async (name, op) => {
  const t = process.hrtime.bigint();
  try {
    await op();
  } catch (err) {
    out[name] = { error: `${err?.name ?? "Error"}: ${String(err?.message ?? err).slice(0, 200)}` };
    console.log(JSON.stringify({ [name]: out[name] }));
    return false;
  }
  out[name] = Number(process.hrtime.bigint() - t) / 1e9;
  console.log(JSON.stringify({ [name]: out[name] }));
  return true;
};
// The write goes last: an engine that refuses a request too long for it
// exits, and takes the sandbox with it. The read's file is made in the
// guest, so it does not depend on the write.
const sb = await Sandbox.create({ local: true });
try {
  await sb.run("true");
  await timed(`stream-${mib}MiB`, async () => {
    let n = 0;
    for await (const item of sb.stream(["sh", "-c", `yes 0123456789abcdef | head -c ${size}`])) {
      if (item.kind === "output") n += item.size;
    }
    if (n !== size) console.log(JSON.stringify({ [`stream-${mib}MiB#lost`]: size - n })); // lost behind agentd's output window: reported, not failed
  });
  await timed("run-x200", async () => {
    for (let i = 0; i < 200; i++) {
      const r = await sb.run(["true"]);
      if (r.exitCode !== 0) throw new Error(`true exited ${r.exitCode}`);
    }
  });
  await sb.run(`yes 0123456789abcdef | tr -d '\\n' | head -c ${size} > ${path}`);
  // Only the read is on the clock, as in the Go row, which checks the length
  // alone: comparing 256 MiB takes 22 ms here, a twentieth of the row. The
  // bytes are still compared, after the clock.
  let got = new Uint8Array(0);
  if (await timed(`read-${mib}MiB`, async () => { got = await sb.files.readBytes(path); })) {
    if (!Buffer.from(got.buffer, got.byteOffset, got.byteLength).equals(data)) {
      out[`read-${mib}MiB`] = { error: `read ${got.length} bytes that are not the ${size} written` };
      console.log(JSON.stringify({ [`read-${mib}MiB`]: out[`read-${mib}MiB`] }));
    }
    got = new Uint8Array(0);
  }
  await timed(`write-${mib}MiB`, () => sb.files.write(path, data));
} finally {
  await sb.terminate().catch(() => {});
  await sb.close().catch(() => {});
}
