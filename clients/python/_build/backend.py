"""An in-tree PEP 517 build backend, standard library only.

`pip install ./clients/python` must work with no package index, so the
backend cannot be fetched (setuptools from PyPI would be). It builds a pure
Python wheel of the packages listed in PACKAGES: their .py files, their
py.typed markers, the generated botocore model (clients/botocore, into
microvms/_botocore) and the metadata from pyproject.toml. An editable install
(pip install -e) writes a .pth file pointing at this directory instead.
platform_wheel() writes the same wheel tagged for one Linux architecture
with the static microvm, agentd and microvm-guest-init in microvms/_bin (`make dist`).
"""
import base64
import hashlib
import os
import re
import zipfile
from typing import Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("microvms", "microvms_agentd")
# What microvms/_bin holds: the CLI, the daemon its local guests run, and
# their init, which the emulator looks for beside agentd (without it local
# guests start from the microvm binary, tens of milliseconds slower).
BINARIES = ("microvm", "agentd", "microvm-guest-init")


def _project() -> Dict[str, str]:
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        text = f.read()
    section = text.split("[project]", 1)[1].split("\n[", 1)[0]
    meta = {}
    for key in ("name", "version", "description", "requires-python"):
        m = re.search(r'^%s\s*=\s*"([^"]*)"' % re.escape(key), section, re.M)
        if not m:
            raise RuntimeError("pyproject.toml: [project] %s is missing" % key)
        meta[key] = m.group(1)
    return meta


def _dist(meta: Dict[str, str]) -> str:
    return "%s-%s" % (re.sub(r"[-_.]+", "_", meta["name"]), meta["version"])


def _metadata(meta: Dict[str, str]) -> str:
    lines = [
        "Metadata-Version: 2.1",
        "Name: " + meta["name"],
        "Version: " + meta["version"],
        "Summary: " + meta["description"],
        "Requires-Python: " + meta["requires-python"],
    ]
    readme = os.path.join(ROOT, "README.md")
    body = ""
    if os.path.exists(readme):
        lines.append("Description-Content-Type: text/markdown")
        with open(readme, encoding="utf-8") as f:
            body = "\n" + f.read()
    return "\n".join(lines) + "\n" + body


# The botocore model: generated into clients/botocore in a clone, already
# inside the package in an unpacked sdist.
MODEL_ARC = "microvms/_botocore"


def _model_dir() -> Optional[str]:
    for path in (os.path.join(ROOT, MODEL_ARC), os.path.join(os.path.dirname(ROOT), "botocore")):
        if os.path.isdir(os.path.join(path, "lambda-microvms")):
            return path
    return None


def _files() -> List[Tuple[str, str]]:
    out = []
    for pkg in PACKAGES:
        for name in sorted(os.listdir(os.path.join(ROOT, pkg))):
            if name.endswith(".py") or name == "py.typed":
                out.append((os.path.join(ROOT, pkg, name), pkg + "/" + name))
    model = _model_dir()
    if model:
        for dirpath, dirnames, filenames in os.walk(os.path.join(model, "lambda-microvms")):
            dirnames.sort()
            for name in sorted(filenames):
                if name.endswith(".json"):
                    path = os.path.join(dirpath, name)
                    out.append((path, MODEL_ARC + "/" + os.path.relpath(path, model).replace(os.sep, "/")))
    return out


def _write_wheel(directory: str, entries: List[Tuple[str, bytes]], platform: str = "any") -> str:
    meta = _project()
    dist = _dist(meta)
    info = dist + ".dist-info"
    # A compressed platform tag (a.b.c) is one Tag line per platform.
    tags = "".join("Tag: py3-none-%s\n" % p for p in platform.split("."))
    purelib = "true" if platform == "any" else "false"
    entries = entries + [
        (info + "/METADATA", _metadata(meta).encode()),
        (info + "/WHEEL", ("Wheel-Version: 1.0\nGenerator: microvms-inline-backend\nRoot-Is-Purelib: %s\n%s" % (purelib, tags)).encode()),
    ]
    record = []
    for arcname, data in entries:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append("%s,sha256=%s,%d" % (arcname, digest, len(data)))
    record.append(info + "/RECORD,,")
    name = "%s-py3-none-%s.whl" % (dist, platform)
    with zipfile.ZipFile(os.path.join(directory, name), "w", zipfile.ZIP_DEFLATED) as zf:
        for arcname, data in entries:
            zi = zipfile.ZipInfo(arcname, date_time=(1980, 1, 1, 0, 0, 0))
            zi.compress_type = zipfile.ZIP_DEFLATED
            # pip keeps the executable bit of a member whose mode has one.
            zi.external_attr = ((0o100755 if arcname.startswith(BIN_ARC + "/") else 0o100644) << 16)
            zf.writestr(zi, data)
        zf.writestr(info + "/RECORD", "\n".join(record) + "\n")
    return name


BIN_ARC = "microvms/_bin"
# The Go binaries are static (CGO_ENABLED=0) and need no libc, so one wheel
# per architecture is installable on glibc (manylinux) and musl (musllinux)
# systems alike; manylinux2014 is the legacy alias older pips know.
PLATFORMS = {
    "amd64": "manylinux_2_17_x86_64.manylinux2014_x86_64.musllinux_1_1_x86_64",
    "arm64": "manylinux_2_17_aarch64.manylinux2014_aarch64.musllinux_1_1_aarch64",
}


def platform_wheel(directory: str, goarch: str, bindir: str) -> str:
    """The wheel for linux/goarch with bindir's microvm, agentd and microvm-guest-init in microvms/_bin."""
    entries = []
    for path, arcname in _files():
        with open(path, "rb") as f:
            entries.append((arcname, f.read()))
    for name in BINARIES:
        with open(os.path.join(bindir, name), "rb") as f:
            data = f.read()
        _check_elf(name, data, goarch)
        entries.append((BIN_ARC + "/" + name, data))
    return _write_wheel(directory, entries, PLATFORMS[goarch])


# ELF e_machine of each architecture a wheel is built for.
_MACHINE = {"amd64": 62, "arm64": 183}


def _check_elf(name: str, data: bytes, goarch: str) -> None:
    """Refuses a binary for another architecture, or one that asks for a dynamic loader."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or int.from_bytes(data[18:20], "little") != _MACHINE[goarch]:
        raise RuntimeError("%s is not a 64-bit ELF for linux/%s" % (name, goarch))
    phoff = int.from_bytes(data[32:40], "little")
    phentsize = int.from_bytes(data[54:56], "little")
    for i in range(int.from_bytes(data[56:58], "little")):
        if int.from_bytes(data[phoff + i * phentsize:phoff + i * phentsize + 4], "little") == 3:  # PT_INTERP
            raise RuntimeError("%s is dynamically linked (build it with CGO_ENABLED=0)" % name)


if __name__ == "__main__":
    import sys

    if len(sys.argv) != 4:
        sys.exit("usage: backend.py OUTDIR GOARCH BINDIR  (writes the platform wheel for linux/GOARCH)")
    print(os.path.join(sys.argv[1], platform_wheel(sys.argv[1], sys.argv[2], sys.argv[3])))


def get_requires_for_build_wheel(config_settings: Optional[dict] = None) -> List[str]:
    return []


def get_requires_for_build_editable(config_settings: Optional[dict] = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Optional[dict] = None) -> List[str]:
    return []


def build_wheel(wheel_directory: str, config_settings: Optional[dict] = None, metadata_directory: Optional[str] = None) -> str:
    entries = []
    for path, arcname in _files():
        with open(path, "rb") as f:
            entries.append((arcname, f.read()))
    return _write_wheel(wheel_directory, entries)


def build_editable(wheel_directory: str, config_settings: Optional[dict] = None, metadata_directory: Optional[str] = None) -> str:
    return _write_wheel(wheel_directory, [("_microvms_editable.pth", (ROOT + "\n").encode())])


def build_sdist(sdist_directory: str, config_settings: Optional[dict] = None) -> str:
    import tarfile

    meta = _project()
    dist = _dist(meta)
    name = dist + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as tf:
        for rel in ["pyproject.toml", "README.md", "_build/backend.py"]:
            if os.path.exists(os.path.join(ROOT, rel)):
                tf.add(os.path.join(ROOT, rel), arcname=dist + "/" + rel)
        for path, arcname in _files():
            tf.add(path, arcname=dist + "/" + arcname)
    return name
