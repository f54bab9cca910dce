// `make dist`'s npm half: packs the microvms package and one platform
// sub-package per target, as esbuild does.
//
//   node npm/pack.mjs OUTDIR linux-x64=BINDIR [linux-arm64=BINDIR ...]
//
// Each BINDIR holds the static microvm, agentd and microvm-guest-init for that platform. The
// sub-packages (npm/<platform>/package.json) carry os/cpu fields, so npm
// installs only the matching one. The optionalDependencies naming them are
// added to the main package here, at pack time, and never to the committed
// package.json: a clone's `npm install ./clients/typescript` must not look
// @microvms/* up in a registry (it finds microvm on $MICROVM_BIN / PATH).
// openapi-fetch is bundled, so the .tgz files install with no registry.
import { execFileSync } from "node:child_process";
import { chmodSync, copyFileSync, cpSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const pkgDir = join(here, "..");
const [outArg, ...targets] = process.argv.slice(2);
if (!outArg || targets.length === 0) {
  console.error("usage: node npm/pack.mjs OUTDIR PLATFORM=BINDIR...  (PLATFORM is a directory under npm/, e.g. linux-x64)");
  process.exit(2);
}
const out = resolve(outArg);
const stage = join(out, "npm-stage");
rmSync(stage, { recursive: true, force: true });
mkdirSync(stage, { recursive: true });

const main = JSON.parse(readFileSync(join(pkgDir, "package.json"), "utf8"));
const npm = process.platform === "win32" ? "npm.cmd" : "npm";
const pack = (dir) => {
  const name = execFileSync(npm, ["pack", "--silent", "--pack-destination", out], { cwd: dir, encoding: "utf8" }).trim().split("\n").pop();
  console.log(join(out, name));
};

// Every platform sub-package, targeted or not, is an optional dependency, at
// the main package's version: a sub-package of another version would run a
// microvm whose engine protocol may differ from this package's.
const optional = {};
for (const platform of ["linux-x64", "linux-arm64"]) {
  const sub = JSON.parse(readFileSync(join(here, platform, "package.json"), "utf8"));
  if (sub.version !== main.version) throw new Error(`npm/${platform}/package.json is version ${sub.version}, the package is ${main.version}`);
  optional[sub.name] = sub.version;
}

for (const target of targets) {
  const [platform, binDir] = target.split("=");
  const dir = join(stage, platform);
  mkdirSync(join(dir, "bin"), { recursive: true });
  copyFileSync(join(here, platform, "package.json"), join(dir, "package.json"));
  copyFileSync(join(here, platform, "README.md"), join(dir, "README.md"));
  for (const bin of ["microvm", "agentd", "microvm-guest-init"]) {
    copyFileSync(join(binDir, bin), join(dir, "bin", bin));
    chmodSync(join(dir, "bin", bin), 0o755);
  }
  pack(dir);
}

// The main package: dist/src compiled here, its sources and README, the
// bundled runtime dependency, and a package.json without the clone-only
// prepare script.
execFileSync(process.execPath, [join(pkgDir, "node_modules", "typescript", "bin", "tsc"), "-p", "tsconfig.build.json"], { cwd: pkgDir, stdio: "inherit" });
const dir = join(stage, "microvms");
mkdirSync(dir, { recursive: true });
for (const f of ["dist/src", "src", "README.md", "tsconfig.json", "tsconfig.build.json"]) cpSync(join(pkgDir, f), join(dir, f), { recursive: true });
// Every runtime dependency is bundled with what it depends on in turn.
const bundled = Object.keys(main.dependencies ?? {});
const copied = new Set();
const bundle = (dep) => {
  if (copied.has(dep)) return;
  copied.add(dep);
  const from = join(pkgDir, "node_modules", dep);
  cpSync(from, join(dir, "node_modules", dep), { recursive: true });
  for (const d of Object.keys(JSON.parse(readFileSync(join(from, "package.json"), "utf8")).dependencies ?? {})) bundle(d);
};
bundled.forEach(bundle);
const { scripts, devDependencies, ...rest } = main;
const published = {
  ...rest,
  files: rest.files.filter((f) => f !== "scripts"),
  optionalDependencies: optional,
  bundleDependencies: bundled,
};
writeFileSync(join(dir, "package.json"), JSON.stringify(published, null, 2) + "\n");
pack(dir);
