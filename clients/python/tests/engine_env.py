"""What the sandbox tests need: the microvm binary and an agentd, from the
environment (make test-clients builds both). Without them the tests skip,
unless MICROVMS_REQUIRE_ENGINE is set (make test-clients sets it), when a
missing prerequisite fails instead."""
import os
import unittest
from typing import List


def require_engine() -> None:
    missing = [name for name in ("MICROVM_BIN", "MICROVM_AGENTD") if not os.environ.get(name)]
    if missing:
        message = "the sandbox tests need %s (make test-clients sets them)" % " and ".join(missing)
        if os.environ.get("MICROVMS_REQUIRE_ENGINE"):
            raise AssertionError(message)
        raise unittest.SkipTest(message)


GUEST_INIT = b"microvms-emulator-guest-init"


def guest_inits_of(pid: int) -> List[int]:
    """The emulator guest init processes whose parent is pid (the engine)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % entry, "rb") as f:
                argv0 = f.read().split(b"\0")[0]
            with open("/proc/%s/stat" % entry, "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except OSError:
            continue
        if argv0 == GUEST_INIT and ppid == pid:
            out.append(int(entry))
    return out


def alive(pid: int) -> bool:
    """Whether pid is still a process (a zombie counts as gone)."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False
