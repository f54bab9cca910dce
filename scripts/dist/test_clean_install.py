"""`make dist`'s files installed as a new user would, on a machine with no
Go and no clone, and the READMEs' quickstarts run from them verbatim.

A fresh venv gets the host's platform wheel with `pip install --no-index`; a
fresh npm project gets the .tgz files with no reachable registry. Each runs
with an environment holding only PATH (system directories, no Go, nothing of
the repository) and HOME, so the package must find its own bundled microvm
and agentd. Run by `make test-dist` (part of check), after `make dist`.
"""
import glob
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DIST = os.environ.get("MICROVMS_DIST_DIR", os.path.join(REPO, "bin", "dist"))
TS_PKG = os.path.join(REPO, "clients", "typescript")
WHEEL_ARCH = {"x86_64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}[platform.machine()]
NPM_CPU = {"x86_64": "x64", "aarch64": "arm64"}[WHEEL_ARCH]
QUICKSTART_LINES = ["0 hello from the sandbox", "3 oops", "tick 1", "tick 2", "tick 3"]


def blocks(readme: str, lang: str) -> list:
    with open(os.path.join(REPO, readme), encoding="utf-8") as f:
        return re.findall(r"```%s\n(.*?)```" % lang, f.read(), re.S)


def clean_path(*first: str) -> str:
    """System directories only: none holding go or microvm, none inside the repository."""
    dirs = list(first)
    for d in ("/usr/local/bin", "/usr/bin", "/bin"):
        if os.path.isdir(d) and not any(os.path.exists(os.path.join(d, b)) for b in ("go", "microvm", "agentd")):
            dirs.append(d)
    return os.pathsep.join(dirs)


class CleanInstallTest(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = tempfile.mkdtemp(prefix="microvms-clean-install-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.home = os.path.join(self.tmp, "home")
        os.mkdir(self.home)

    def env(self, path: str) -> dict:
        env = {"PATH": path, "HOME": self.home, "LANG": "C.UTF-8"}
        # Catches: a bundled-binary lookup that only works because the test
        # machine has Go, a built bin/ or the clone on PATH.
        self.assertIsNone(shutil.which("go", path=path))
        self.assertIsNone(shutil.which("microvm", path=path))
        self.assertNotIn(REPO, path)
        return env

    def check_quickstart(self, out: "subprocess.CompletedProcess[str]") -> None:
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        lines = out.stdout.splitlines()
        self.assertEqual(lines[:5], QUICKSTART_LINES)
        self.assertIn("kept across a suspend", lines)
        self.assertIn("left behind: []", lines)

    def check_guest_init(self, bindir: str, env: dict) -> None:
        """Catches: a package that carries no microvm-guest-init, or one the
        bundled emulator does not find beside its agentd: local guests would
        still start, from the microvm binary, tens of milliseconds slower."""
        out = subprocess.run([os.path.join(bindir, "microvm"), "doctor", "--local", "--json"], env=env, cwd=self.tmp,
                             capture_output=True, text=True, timeout=120)
        checks = {c["name"]: c for c in json.loads(out.stdout)["data"]["checks"]}
        self.assertTrue(checks["guest-init"]["ok"], checks["guest-init"])
        self.assertIn(os.path.join(bindir, "microvm-guest-init"), checks["guest-init"]["detail"])

    def test_python_quickstart_runs_from_the_wheel(self) -> None:
        wheels = glob.glob(os.path.join(DIST, "microvms-*-py3-none-*%s*.whl" % WHEEL_ARCH))
        self.assertEqual(len(wheels), 1, "make dist writes one wheel for this machine into %s" % DIST)
        venv = os.path.join(self.tmp, "venv")
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        py = os.path.join(venv, "bin", "python")
        env = self.env(clean_path(os.path.join(venv, "bin")))
        subprocess.run([py, "-m", "pip", "install", "--quiet", "--no-index", "--no-cache-dir", wheels[0]],
                       env=env, cwd=self.tmp, check=True)
        out = subprocess.run([py, "-c", blocks("clients/python/README.md", "python")[0]], env=env, cwd=self.tmp,
                             capture_output=True, text=True, timeout=600)
        self.check_quickstart(out)
        bindir = subprocess.run([py, "-c", "import os, microvms.packaged as p; print(os.path.dirname(p.bundled_binary()))"],
                                env=env, cwd=self.tmp, capture_output=True, text=True, check=True).stdout.strip()
        self.check_guest_init(bindir, env)

        # The botocore model rides in the wheel, and the README's one-liner
        # points boto3 at it. boto3 is not in the fresh venv (no index): it is
        # borrowed from this interpreter's site-packages through PYTHONPATH.
        probe = subprocess.run([sys.executable, "-c", "import boto3, os; print(os.path.dirname(os.path.dirname(boto3.__file__)))"],
                               capture_output=True, text=True)
        if probe.returncode != 0:
            self.skipTest("boto3 is not installed for %s: the wheel's botocore model is not exercised" % sys.executable)
        boto = [b for b in blocks("clients/python/README.md", "sh") if "botocore_data_path" in b]
        self.assertEqual(len(boto), 1, "the Python README shows the boto3 one-liner once")
        out = subprocess.run(["bash", "-euc", boto[0] + 'echo "$AWS_DATA_PATH"\n'], env=dict(env, PYTHONPATH=probe.stdout.strip()),
                             cwd=self.tmp, capture_output=True, text=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr)
        answer, data_path = out.stdout.split()
        self.assertEqual(answer, "True")
        # Catches: the model found in the clone instead of the installed wheel.
        self.assertTrue(data_path.startswith(venv + os.sep), data_path)
        with open(glob.glob(os.path.join(data_path, "lambda-microvms", "*", "service-2.json"))[0], encoding="utf-8") as f:
            self.assertIn("ListMicrovms", json.load(f)["operations"])

    def test_typescript_quickstart_runs_from_the_tgz_files(self) -> None:
        tgz = [os.path.join(DIST, "microvms-1.0.0.tgz"), os.path.join(DIST, "microvms-linux-%s-1.0.0.tgz" % NPM_CPU)]
        for f in tgz:
            self.assertTrue(os.path.isfile(f), "make dist writes %s" % f)
        node = shutil.which("node")
        npm = shutil.which("npm")
        assert node and npm
        proj = os.path.join(self.tmp, "my-app")
        os.mkdir(proj)
        with open(os.path.join(proj, "package.json"), "w") as f:
            json.dump({"name": "my-app", "private": True, "type": "module"}, f)
        env = self.env(clean_path(os.path.dirname(node)))
        # No registry: a refused port, a fresh cache and --offline, so the
        # other platform's optional sub-package is skipped at once.
        subprocess.run([npm, "install", "--offline", "--no-audit", "--no-fund", "--loglevel=error",
                        "--registry", "http://127.0.0.1:9/", "--cache", os.path.join(self.tmp, "npm-cache")] + tgz,
                       env=env, cwd=proj, check=True, timeout=600, stdout=subprocess.DEVNULL)
        self.assertTrue(os.path.isfile(os.path.join(proj, "node_modules", "@microvms", "linux-" + NPM_CPU, "bin", "agentd")))
        # The quickstart is TypeScript: compiled by the clone's pinned tsc (a
        # build tool, not the package under test) against the installed
        # package's own .d.ts files, then run by node inside the project.
        with open(os.path.join(proj, "quickstart.ts"), "w") as f:
            f.write(blocks("clients/typescript/README.md", "ts")[0])
        with open(os.path.join(proj, "tsconfig.json"), "w") as f:
            json.dump({"compilerOptions": {
                "target": "ES2022", "module": "NodeNext", "moduleResolution": "NodeNext", "strict": True,
                "lib": ["ES2022", "DOM", "ESNext.Disposable"], "types": ["node"],
                "typeRoots": [os.path.join(TS_PKG, "node_modules", "@types")], "skipLibCheck": True,
            }, "files": ["quickstart.ts"]}, f)
        tsc = os.path.join(TS_PKG, "node_modules", "typescript", "bin", "tsc")
        subprocess.run([node, tsc, "-p", proj], env=env, cwd=proj, check=True, timeout=300)
        out = subprocess.run([node, "quickstart.js"], env=env, cwd=proj, capture_output=True, text=True, timeout=600)
        self.check_quickstart(out)
        self.check_guest_init(os.path.join(proj, "node_modules", "@microvms", "linux-" + NPM_CPU, "bin"), env)


if __name__ == "__main__":
    unittest.main()
