"""Every argument the engine's launching and exec ops take (api/engine.yaml, generated
into _contract) has its parameter, by the same name in snake_case, on the
sync and the async call that sends the op, or is named here as the call's
own business. No engine is needed: this reads signatures.

Catches: a field added to create, build, restore, fork, run_many,
pool_open, run, stream or start without its Python parameter, as restore,
fork and run_many once launched every copy with no egress, environment or
network policy, and start ran without limits, because their signatures never
had them."""
import inspect
import re
import unittest
from typing import Any, Callable, Dict, List, Optional, Tuple

from microvms import AsyncPool, AsyncSandbox, Pool, Sandbox, run_many, run_many_async
from microvms import _contract as c

EXEC: Dict[str, Optional[str]] = {"command": "cmd", "shell": "cmd", "memoryLimitBytes": "limits", "cpuMillicores": "limits",
                                  "pidsLimit": "limits"}

# (the op's generated argument type, the calls that send it, the fields
# spelled otherwise: a parameter name, or None for a field the call sets
# itself).
CASES: List[Tuple[str, List[Callable[..., Any]], Dict[str, Optional[str]]]] = [
    ("CreateArgs", [Sandbox.create, AsyncSandbox.create], {"noKeepAwake": "keep_awake"}),
    ("BuildArgs", [Sandbox.build, AsyncSandbox.build], {}),
    ("RestoreArgs", [Sandbox.restore, AsyncSandbox.restore], {"ref": "checkpoint", "local": None, "agentd": None}),
    ("ForkArgs", [Sandbox.fork, AsyncSandbox.fork], {"count": "n", "noPause": "pause"}),
    ("RunManyArgs", [run_many, run_many_async], {}),
    ("PoolOpenArgs", [Pool.open, AsyncPool.open], {}),
    # The exec ops: an argv or a script is cmd, the three limits are one
    # limits mapping, a terminal is pty=(rows, cols), and the sink is the
    # package's own FIFO.
    ("RunArgs", [Sandbox.run, AsyncSandbox.run], EXEC),
    ("StreamArgs", [Sandbox.stream, AsyncSandbox.stream], {**EXEC, "sink": None}),
    ("StartArgs", [Sandbox.start, AsyncSandbox.start], {**EXEC, "tty": "pty", "rows": "pty", "cols": "pty"}),
]


def snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


class LaunchArgsTest(unittest.TestCase):
    def test_every_launch_field_has_its_parameter(self) -> None:
        for typed, calls, own in CASES:
            fields = list(getattr(c, typed).__annotations__)
            self.assertTrue(fields, typed)
            for call in calls:
                params = set(inspect.signature(call).parameters)
                missing = [f for f in fields if own.get(f, snake(f)) is not None and own.get(f, snake(f)) not in params]
                self.assertEqual(missing, [], "%s lacks parameters for %s's %s" % (call.__qualname__, typed, missing))


if __name__ == "__main__":
    unittest.main()


class SyncTimeoutTest(unittest.TestCase):
    # Why each call without a timeout= parameter is bounded otherwise.
    UNBOUNDED_BY_DESIGN = {
        "Sandbox.create": "timeout_sec bounds the wait for RUNNING",
        "Sandbox.build": "timeout_sec bounds the wait for RUNNING; the build reports progress",
        "Sandbox.process": "makes no call: a handle by exec id",
        "Sandbox.stream": "an iterator: each item comes as the command writes; close() stops it",
        "Files.watch": "an iterator of events; close() stops it",
        "Process.stream": "an iterator from an offset; close() stops it",
    }

    def test_every_blocking_sync_call_takes_timeout(self) -> None:
        # Catches: a sync call added (or left, as network() and
        # set_network_policy() were) with no timeout=, which blocks its
        # caller for as long as the engine takes.
        from microvms import Files, Process
        from microvms.sandbox import Checkpoints, Volumes
        missing = []
        for cls in (Sandbox, Files, Process, Pool, Checkpoints, Volumes):
            for name in dir(cls):
                attr = inspect.getattr_static(cls, name)
                if name.startswith("_") or isinstance(attr, property) or not callable(getattr(cls, name)):
                    continue
                key = "%s.%s" % (cls.__name__, name)
                if key not in self.UNBOUNDED_BY_DESIGN and "timeout" not in inspect.signature(getattr(cls, name)).parameters:
                    missing.append(key)
        self.assertEqual(missing, [])
