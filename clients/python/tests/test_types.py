"""mypy --strict over the package, these tests and every README example.

mypy is not a dependency: the test uses the first interpreter that has it
(this one, then Debian's /usr/bin/python3 with python3-mypy) and skips
without one, unless MICROVMS_REQUIRE_MYPY is set (.ci/run sets it)."""
import glob
import os
import re
import subprocess
import sys
import tempfile
import unittest
from typing import Optional

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def mypy_python() -> Optional[str]:
    for py in (sys.executable, "/usr/bin/python3"):
        if os.path.exists(py) and subprocess.run([py, "-m", "mypy", "--version"], capture_output=True).returncode == 0:
            return py
    return None


class TypesTest(unittest.TestCase):
    def test_mypy_strict(self) -> None:
        py = mypy_python()
        if py is None:
            if os.environ.get("MICROVMS_REQUIRE_MYPY"):
                self.fail("mypy is required (MICROVMS_REQUIRE_MYPY) but no interpreter has it")
            self.skipTest("no mypy installed")
        with open(os.path.join(HERE, "README.md"), encoding="utf-8") as f:
            blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
        self.assertGreaterEqual(len(blocks), 2)
        with tempfile.TemporaryDirectory() as tmp:
            examples = []
            for i, block in enumerate(blocks):
                path = os.path.join(tmp, "readme_example_%d.py" % i)
                with open(path, "w", encoding="utf-8") as f:
                    f.write(block)
                examples.append(path)
            tests = sorted(glob.glob(os.path.join(HERE, "tests", "test_[rst]*.py"))) + [os.path.join(HERE, "tests", "engine_env.py")]
            out = subprocess.run([py, "-m", "mypy", "--strict", "--cache-dir", os.path.join(tmp, "cache"),
                                  os.path.join(HERE, "microvms")] + tests + examples,
                                 capture_output=True, text=True, cwd=HERE, env=dict(os.environ, MYPYPATH=HERE))
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)


if __name__ == "__main__":
    unittest.main()
