// `prepare`: build dist/ when the package is installed from a directory
// (`npm install ./clients/typescript`) or a clone. npm does not install a
// linked directory's devDependencies before running this, so when the pinned
// TypeScript compiler is missing it is installed here first, from the
// committed lockfile (--ignore-scripts: this script is not run again).
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const pkg = join(dirname(fileURLToPath(import.meta.url)), "..");
const tsc = join(pkg, "node_modules", "typescript", "bin", "tsc");
const npm = process.platform === "win32" ? "npm.cmd" : "npm";
if (!existsSync(tsc)) {
  execFileSync(npm, ["ci", "--include=dev", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"], { cwd: pkg, stdio: "inherit" });
}
execFileSync(process.execPath, [tsc, "-p", "tsconfig.build.json"], { cwd: pkg, stdio: "inherit" });
