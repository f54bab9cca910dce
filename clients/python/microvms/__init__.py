"""microvms: MicroVM sandboxes from Python.

    from microvms import Sandbox
    with Sandbox.create(local=True) as sb:
        print(sb.run("echo hi; exit 3").exit_code)   # 3: a result, not an exception

The lifecycle, the platform's traps, the state machine and the cost engine
are the Go library's: each Sandbox drives one `microvm engine` child process
(api/engine.yaml), found through binary=, $MICROVM_BIN, then PATH. The
generated agentd protocol client is the sibling package microvms_agentd.
"""
from ._contract import ERROR_KINDS, PROTOCOL_VERSION
from ._engine import BINARY_ENV, find_binary
from .errors import (
    BuildWedgedError,
    CheckpointRefusedError,
    CredentialsError,
    ExecFailedError,
    InterruptedError,
    InvalidArgError,
    LaunchDiedError,
    MicrovmError,
    PlatformError,
    PreconditionError,
    ProtocolError,
    RetryableError,
    TimeoutError,
    UnexpectedError,
    WindowClosedError,
)
from .fleet import FleetResult, FleetRun, run_many, run_many_async
from .pool import AsyncPool, Pool, PoolStatus
from .sandbox import (
    CostReport,
    ExecResult,
    ExecStream,
    Exit,
    FileEntry,
    Files,
    Gap,
    LineItem,
    OutputChunk,
    PortURL,
    Sandbox,
    BuildProgress,
    Process,
    FsEvent,
    AsyncSandbox,
    AsyncFiles,
    AsyncProcess,
    AsyncExecStream,
    TeardownReport,
    KeepaliveReport,
    Secret,
)

__all__ = [
    "BINARY_ENV", "ERROR_KINDS", "PROTOCOL_VERSION", "find_binary",
    "Sandbox", "Files", "run_many_async", "BuildProgress", "Pool", "AsyncPool", "PoolStatus", "Process", "FsEvent", "AsyncSandbox", "AsyncFiles", "AsyncProcess", "AsyncExecStream", "run_many", "FleetResult", "FleetRun", "ExecResult", "ExecStream", "OutputChunk", "Gap", "Exit", "FileEntry",
    "TeardownReport", "KeepaliveReport", "Secret", "CostReport", "LineItem", "PortURL",
    "MicrovmError", "UnexpectedError", "InvalidArgError", "RetryableError", "CredentialsError",
    "ProtocolError", "BuildWedgedError", "LaunchDiedError", "WindowClosedError", "PlatformError",
    "TimeoutError", "InterruptedError", "PreconditionError", "ExecFailedError",
    "CheckpointRefusedError",
]
