"""An in-tree PEP 517 build backend, standard library only.

`pip install ./clients/python` must work with no package index, so the
backend cannot be fetched (setuptools from PyPI would be). It builds a pure
Python wheel of the packages listed in PACKAGES: their .py files, their
py.typed markers, and the metadata from pyproject.toml. An editable install
(pip install -e) writes a .pth file pointing at this directory instead.
"""
import base64
import hashlib
import os
import re
import zipfile
from typing import Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("microvms", "microvms_agentd")


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


def _files() -> List[Tuple[str, str]]:
    out = []
    for pkg in PACKAGES:
        for name in sorted(os.listdir(os.path.join(ROOT, pkg))):
            if name.endswith(".py") or name == "py.typed":
                out.append((os.path.join(ROOT, pkg, name), pkg + "/" + name))
    return out


def _write_wheel(directory: str, entries: List[Tuple[str, bytes]]) -> str:
    meta = _project()
    dist = _dist(meta)
    info = dist + ".dist-info"
    entries = entries + [
        (info + "/METADATA", _metadata(meta).encode()),
        (info + "/WHEEL", b"Wheel-Version: 1.0\nGenerator: microvms-inline-backend\nRoot-Is-Purelib: true\nTag: py3-none-any\n"),
    ]
    record = []
    for arcname, data in entries:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append("%s,sha256=%s,%d" % (arcname, digest, len(data)))
    record.append(info + "/RECORD,,")
    name = dist + "-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(directory, name), "w", zipfile.ZIP_DEFLATED) as zf:
        for arcname, data in entries:
            zf.writestr(arcname, data)
        zf.writestr(info + "/RECORD", "\n".join(record) + "\n")
    return name


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
