/**
 * Where the platform sub-package `make dist` builds keeps its binaries.
 *
 * The published `microvms` package lists one optional dependency per
 * platform (`@microvms/linux-x64`, `@microvms/linux-arm64`), each holding a
 * static `microvm` and `agentd` in bin/; npm installs only the one whose
 * os/cpu match. This module only locates that install: it never downloads
 * or builds a binary. Installed from a clone there is no sub-package and the
 * binary is found as before ($MICROVM_BIN, PATH).
 */
import { statSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";

/** The sub-package for each `${process.platform}-${process.arch}` a dist is built for. */
export const PLATFORM_PACKAGES: Readonly<Record<string, string>> = {
  "linux-x64": "@microvms/linux-x64",
  "linux-arm64": "@microvms/linux-arm64",
};

/** The microvm binary of the installed platform sub-package, or undefined.
 * The agentd beside it is found by microvm itself (next to its own executable). */
export function bundledBinary(): string | undefined {
  const name = PLATFORM_PACKAGES[`${process.platform}-${process.arch}`];
  if (!name) return undefined;
  let dir: string;
  try {
    dir = dirname(createRequire(import.meta.url).resolve(`${name}/package.json`));
  } catch {
    return undefined;
  }
  const bin = join(dir, "bin", "microvm");
  try {
    return statSync(bin).isFile() ? bin : undefined;
  } catch {
    return undefined;
  }
}
