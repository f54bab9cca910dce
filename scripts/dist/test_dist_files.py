"""The shape of `make dist`'s files, beside the clean install
(test_clean_install.py): what pip and npm trust without checking. Run by
`make test-dist` after `make dist` for this machine's architecture."""
import base64
import hashlib
import json
import os
import sys
import tarfile
import tempfile
import unittest
import zipfile

from test_clean_install import DIST, NPM_CPU, REPO, WHEEL_ARCH

sys.path.insert(0, os.path.join(REPO, "clients", "python", "_build"))
import backend  # noqa: E402

GOARCH = {"x86_64": "amd64", "aarch64": "arm64"}[WHEEL_ARCH]
OTHER = {"amd64": "arm64", "arm64": "amd64"}[GOARCH]


def the_wheel() -> str:
    names = [n for n in os.listdir(DIST) if n.endswith(".whl") and WHEEL_ARCH in n]
    assert len(names) == 1, names
    return os.path.join(DIST, names[0])


class DistFilesTest(unittest.TestCase):
    def test_wheel_record_tags_and_modes(self) -> None:
        with zipfile.ZipFile(the_wheel()) as zf:
            names = zf.namelist()
            info = [n for n in names if n.endswith(".dist-info/RECORD")][0].rsplit("/", 1)[0]
            record = {}
            for line in zf.read(info + "/RECORD").decode().splitlines():
                path, digest, size = line.rsplit(",", 2)
                record[path] = (digest, size)
            # Catches: a member added after RECORD was written, or a wrong hash.
            self.assertEqual(sorted(record), sorted(names))
            for name in names:
                if name == info + "/RECORD":
                    continue
                data = zf.read(name)
                want = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                self.assertEqual(record[name], (want, str(len(data))), name)
            # Catches: binaries that pip unpacks without the executable bit.
            for b in ("microvm", "agentd", "microvm-guest-init"):
                self.assertEqual(zf.getinfo("microvms/_bin/" + b).external_attr >> 16, 0o100755)
            # Catches: a WHEEL file whose tags disagree with the file name, or a
            # platform wheel marked pure (installed where binaries do not belong).
            wheel = zf.read(info + "/WHEEL").decode()
            self.assertIn("Root-Is-Purelib: false", wheel)
            tags = sorted(l.split(": ", 1)[1] for l in wheel.splitlines() if l.startswith("Tag: "))
            plat = os.path.basename(the_wheel())[:-4].split("-")[-1]
            self.assertEqual(tags, sorted("py3-none-" + p for p in plat.split(".")))
            self.assertTrue(any(n.endswith("lambda-microvms/2025-09-09/service-2.json") for n in names))

    def test_wheel_builder_refuses_another_architecture(self) -> None:
        # Catches: an aarch64 wheel packed with the x86_64 binaries (or the reverse).
        with tempfile.TemporaryDirectory() as tmp, self.assertRaisesRegex(RuntimeError, "not a 64-bit ELF for linux/" + OTHER):
            backend.platform_wheel(tmp, OTHER, os.path.join(DIST, "go", "linux-" + GOARCH))

    def test_npm_main_package_names_every_platform_at_its_version(self) -> None:
        with tarfile.open(os.path.join(DIST, "microvms-1.0.0.tgz")) as tf:
            pkg = json.load(tf.extractfile("package/package.json"))  # type: ignore[arg-type]
            members = tf.getnames()
        self.assertEqual(pkg["optionalDependencies"], {"@microvms/linux-x64": pkg["version"], "@microvms/linux-arm64": pkg["version"]})
        # Catches: a published package that needs the registry (openapi-fetch
        # not bundled) or runs the clone-only prepare script on install.
        self.assertIn("package/node_modules/openapi-fetch/package.json", members)
        self.assertNotIn("prepare", pkg.get("scripts", {}))
        with tarfile.open(os.path.join(DIST, "microvms-linux-%s-1.0.0.tgz" % NPM_CPU)) as tf:
            sub = json.load(tf.extractfile("package/package.json"))  # type: ignore[arg-type]
            for b in ("microvm", "agentd", "microvm-guest-init"):
                self.assertEqual(tf.getmember("package/bin/" + b).mode & 0o111, 0o111)
        self.assertEqual((sub["os"], sub["cpu"], sub["version"]), (["linux"], [NPM_CPU], pkg["version"]))

    def test_committed_package_json_names_no_platform_package(self) -> None:
        # Catches: optionalDependencies committed to clients/typescript, which
        # would make a clone's `npm install` look @microvms/* up in a registry.
        with open(os.path.join(REPO, "clients", "typescript", "package.json"), encoding="utf-8") as f:
            self.assertNotIn("optionalDependencies", json.load(f))


if __name__ == "__main__":
    unittest.main()
