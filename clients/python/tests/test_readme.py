"""The README's quickstart, extracted and run verbatim against local mode."""
import os
import re
import subprocess
import sys
import unittest

from .engine_env import require_engine

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def quickstart() -> str:
    with open(os.path.join(HERE, "README.md"), encoding="utf-8") as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    first: str = blocks[0]
    return first


class ReadmeTest(unittest.TestCase):
    def test_quickstart_runs_verbatim(self) -> None:
        require_engine()
        out = subprocess.run([sys.executable, "-c", quickstart()], env=dict(os.environ, PYTHONPATH=HERE),
                             capture_output=True, text=True, timeout=300)
        self.assertEqual(out.returncode, 0, out.stderr)
        lines = out.stdout.splitlines()
        self.assertEqual(lines[:5], ["0 hello from the sandbox", "3 oops", "tick 1", "tick 2", "tick 3"])
        self.assertIn("kept across a suspend", lines)
        self.assertIn("left behind: []", lines)


if __name__ == "__main__":
    unittest.main()
