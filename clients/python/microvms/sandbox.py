"""Sandbox: one MicroVM, its whole lifecycle, driven through `microvm engine`.

Nothing here decides anything the Go library decides (which transitions are
allowed, what a teardown leaked, what a run cost): each method is one engine
request, and its answer is the CLI envelope's data, wrapped in a small class.
"""
import base64
import os
import weakref
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

from . import _contract as c
from ._engine import Engine

Command = Union[str, Sequence[str]]


@dataclass(frozen=True)
class ExecResult:
    """A finished command: a non-zero exit is a result, not an exception."""

    exec_id: str
    phase: str
    exit_code: Optional[int]  # None when a signal ended the child
    signal: Optional[int]
    stdout: str
    stderr: str
    truncated: bool
    # What the command used (wallSecs, userCpuSecs, systemCpuSecs,
    # peakMemoryBytes, stdoutBytes, stderrBytes, source, missing); None from
    # a daemon that reports none.
    usage: Optional[c.ExecUsage] = None
    oom_killed: bool = False  # killed by the guest kernel over its memory limit

    @property
    def ok(self) -> bool:
        """Whether the command exited zero."""
        return self.exit_code == 0

    @classmethod
    def _from(cls, d: c.ExecData) -> "ExecResult":
        return cls(d["execId"], d["phase"], d["exitCode"], d["signal"], d["stdout"], d["stderr"], d["truncated"],
                   d.get("usage"), bool(d.get("oomKilled", False)))


@dataclass(frozen=True)
class OutputChunk:
    """Output as it arrived; stdout and stderr share one offset space."""

    stream: str
    offset: int
    text: str  # UTF-8, invalid bytes replaced (lossy says whether any were)
    size: int
    lossy: bool


@dataclass(frozen=True)
class Gap:
    """Output [start, end) was lost before it was read."""

    start: int
    end: int


@dataclass(frozen=True)
class Exit:
    """The terminal event: its absence is what tells a cut stream from a finished command."""

    exit_code: Optional[int]
    signal: Optional[int]
    truncated: bool
    writers_may_be_alive: bool
    offset: int


StreamItem = Union[OutputChunk, Gap, Exit]


class ExecStream:
    """An iterator over a command's output as it arrives.

    The engine's stream reconnects at its byte offset when a connection
    drops, so a cut shows up as nothing more than a pause.
    """

    def __init__(self, events: Iterator[Union[c.StreamEvent, c.ExecStreamData]]) -> None:
        self._events = events
        self.summary: Optional[c.ExecStreamData] = None
        self.exit: Optional[Exit] = None

    def __iter__(self) -> Iterator[StreamItem]:
        for ev in self._events:
            kind = ev.get("event")
            if kind == "output":
                o: c.StreamOutputLine = ev  # type: ignore[assignment]
                yield OutputChunk(o["stream"], o["offset"], o["text"], o["bytes"], o["lossy"])
            elif kind == "gap":
                g: c.StreamGapLine = ev  # type: ignore[assignment]
                yield Gap(g["from"], g["to"])
            elif kind == "exit":
                x: c.StreamExitLine = ev  # type: ignore[assignment]
                self.exit = Exit(x["exitCode"], x["signal"], x["truncated"], x["writersMayBeAlive"], x["offset"])
                yield self.exit
            else:
                self.summary = ev  # type: ignore[assignment]

    def lines(self, stream: str = "stdout") -> Iterator[str]:
        """Complete lines of one stream (without their newline) as each arrives."""
        pending = ""
        for item in self:
            if isinstance(item, OutputChunk) and item.stream == stream:
                pending += item.text
                while "\n" in pending:
                    line, pending = pending.split("\n", 1)
                    yield line
        if pending:
            yield pending


@dataclass(frozen=True)
class FileEntry:
    """One entry of a directory listing."""

    path: str
    name: str
    type: str  # file, directory, symlink, fifo, socket, block_device, char_device
    size: int
    mode: str  # four octal digits
    mtime: str  # RFC 3339
    symlink_target: Optional[str]


@dataclass(frozen=True)
class TeardownReport:
    """What terminate did; it never raises, and names whatever it could not delete."""

    microvm_id: str
    lifecycle: Optional[str]
    undeleted: List[str]
    image_identifier: Optional[str]

    @property
    def leaked(self) -> bool:
        """Whether anything was left behind."""
        return bool(self.undeleted)


@dataclass(frozen=True)
class LineItem:
    """One billed line: usd is a decimal string, None (never zero) when unpriced."""

    phase: str
    billing: str
    quantity: str
    unit: str
    usd: Optional[str]
    unpriced: Optional[str]
    provenance: Optional[str]
    note: Optional[str]


@dataclass(frozen=True)
class CostReport:
    """An estimate from a dated rate table, never an invoice."""

    label: str
    size: str
    items: List[LineItem]
    total_usd: str  # a decimal string: Decimal(report.total_usd) for arithmetic
    is_lower_bound: bool
    staleness: str
    text: str = field(repr=False)

    def __str__(self) -> str:
        return self.text

    @classmethod
    def _from(cls, r: c.CostReport) -> "CostReport":
        items = [
            LineItem(li["phase"], li["billing"], li["quantity"], li["unit"], li.get("usd"), li.get("unpriced"),
                     li.get("provenance"), li.get("note"))
            for li in r["lines"]
        ]
        return cls(r["label"], r["size"], items, r["totalUsd"], r["isLowerBound"], r["staleness"], r["text"])


@dataclass(frozen=True)
class PortURL:
    """How to reach one port inside the VM from outside, with a token for that port alone.

    Every port shares the endpoint URL: the headers name the port and carry
    the token, so send both with every request (a browser needs
    `microvm forward`). expires_at is RFC 3339 UTC, this machine's clock at
    the mint plus the lifetime. The headers are credentials: repr hides them.
    """

    microvm_id: str
    port: int
    url: str
    headers: Dict[str, str] = field(repr=False)
    expires_at: str
    # The same credentials for a browser's WebSocket, which sets no header:
    # offer all three as its protocols. A credential too.
    subprotocols: List[str] = field(repr=False)


class Files:
    """The sandbox's filesystem (E2B's sandbox.files)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def write(self, path: str, data: Union[str, bytes], *, mode: Optional[str] = None) -> None:
        """Write a whole file, creating its parents; mode is four octal digits ("0755")."""
        raw = data.encode() if isinstance(data, str) else bytes(data)
        args: c.WriteArgs = {"path": path, "dataBase64": base64.b64encode(raw).decode()}
        if mode is not None:
            args["mode"] = mode
        self._engine._op_write(args)

    def read_bytes(self, path: str) -> bytes:
        """The whole file at path."""
        return base64.b64decode(self._engine._op_read({"path": path})["dataBase64"])

    def read(self, path: str) -> str:
        """The whole file at path as UTF-8 text."""
        return self.read_bytes(path).decode()

    def list(self, path: str, *, depth: int = 1) -> List[FileEntry]:
        """The entries under path, depth levels deep."""
        d = self._engine._op_list({"path": path, "depth": depth})
        return [FileEntry(e["path"], e["name"], e["type"], e["size"], e["mode"], e["mtime"], e["symlinkTarget"])
                for e in d["entries"]]

    def upload_dir(self, local: Union[str, "os.PathLike[str]"], remote: str) -> int:
        """Copy a local directory tree into the VM; returns the bytes of its files."""
        return self._engine._op_upload_dir({"local": os.fspath(local), "remote": remote})["bytes"]

    def download_dir(self, remote: str, local: Union[str, "os.PathLike[str]"]) -> int:
        """Copy a VM directory tree into local, every entry confined beneath it."""
        return self._engine._op_download_dir({"remote": remote, "local": os.fspath(local)})["bytes"]


def _exec_args(cmd: Command, cwd: Optional[str], env: Optional[Dict[str, str]],
               timeout_sec: Optional[float], exec_id: Optional[str],
               limits: Optional[Dict[str, int]] = None) -> c.RunArgs:
    # A string is a shell script (E2B's commands.run); a sequence is an argv.
    args: c.RunArgs = {"command": [cmd], "shell": True} if isinstance(cmd, str) else {"command": list(cmd)}
    if cwd is not None:
        args["cwd"] = cwd
    if env:
        args["env"] = ["%s=%s" % kv for kv in env.items()]
    if timeout_sec is not None:
        args["timeoutSec"] = timeout_sec
    if exec_id is not None:
        args["execId"] = exec_id
    if limits:
        # memory_bytes, cpu_millicores, pids: the guest refuses what it cannot apply.
        unknown = set(limits) - {"memory_bytes", "cpu_millicores", "pids"}
        if unknown:
            raise ValueError("unknown limits: %s (memory_bytes, cpu_millicores, pids)" % ", ".join(sorted(unknown)))
        if "memory_bytes" in limits:
            args["memoryLimitBytes"] = int(limits["memory_bytes"])
        if "cpu_millicores" in limits:
            args["cpuMillicores"] = int(limits["cpu_millicores"])
        if "pids" in limits:
            args["pidsLimit"] = int(limits["pids"])
    return args


class Sandbox:
    """One MicroVM as a sandbox.

    Sandbox.create(local=True) runs the embedded emulator inside the engine
    (no AWS account; Linux and root); Sandbox.create(image=...) launches on
    AWS Lambda MicroVMs. Use it as a context manager: leaving the block
    terminates it, and a process that dies without leaving takes its
    engine, and so its MicroVM, with it.
    """

    def __init__(self, engine: Engine, info: c.SandboxData) -> None:
        self._engine = engine
        self._info = info
        self.files = Files(engine)
        self._finalizer = weakref.finalize(self, engine.close)

    @classmethod
    def create(
        cls,
        *,
        local: bool = False,
        image: Optional[str] = None,
        image_version: Optional[str] = None,
        region: Optional[str] = None,
        control_endpoint: Optional[str] = None,
        execution_role_arn: Optional[str] = None,
        agent_token: Optional[str] = None,
        agentd: Optional[str] = None,
        timeout_sec: Optional[float] = None,
        binary: Optional[str] = None,
    ) -> "Sandbox":
        """Launch a MicroVM and wait until it runs."""
        args: c.CreateArgs = {"local": local}
        for key, value in (("image", image), ("imageVersion", image_version), ("region", region),
                           ("controlEndpoint", control_endpoint), ("executionRoleArn", execution_role_arn),
                           ("agentToken", agent_token), ("agentd", agentd)):
            if value is not None:
                args[key] = value  # type: ignore[literal-required]
        if timeout_sec is not None:
            args["timeoutSec"] = timeout_sec
        engine = Engine(binary)
        try:
            return cls(engine, engine._op_create(args))
        except BaseException:
            engine.close()
            raise

    @classmethod
    def attach(
        cls,
        microvm_id: str,
        *,
        agent_token: str,
        control_endpoint: Optional[str] = None,
        region: Optional[str] = None,
        binary: Optional[str] = None,
    ) -> "Sandbox":
        """Reach a MicroVM another process launched, by its id and agent token.

        For a local sandbox pass the launcher's control_endpoint. Leaving an
        attached sandbox does not terminate it; terminate() does.
        """
        args: c.AttachArgs = {"microvmId": microvm_id, "agentToken": agent_token}
        if control_endpoint is not None:
            args["controlEndpoint"] = control_endpoint
        if region is not None:
            args["region"] = region
        engine = Engine(binary)
        try:
            return cls(engine, engine._op_attach(args))
        except BaseException:
            engine.close()
            raise

    # The reference's names for what identifies the sandbox.
    @property
    def microvm_id(self) -> str:
        return self._info["microvmId"]

    @property
    def agent_token(self) -> str:
        """The bearer the VM's agentd accepts: a secret, needed to attach."""
        return self._info["agentToken"]

    @property
    def control_endpoint(self) -> Optional[str]:
        return self._info["controlEndpoint"]

    @property
    def region(self) -> str:
        return self._info["region"]

    @property
    def endpoint(self) -> Optional[str]:
        return self._info["endpoint"]

    @property
    def lifecycle(self) -> str:
        """The last state the platform confirmed (RUNNING, SUSPENDED, TERMINATED...)."""
        self._info = self._engine._op_info({})
        return self._info["state"]

    def __repr__(self) -> str:
        return "Sandbox(%s)" % self._info["microvmId"]  # never the token

    def run(self, cmd: Command, *, cwd: Optional[str] = None, env: Optional[Dict[str, str]] = None,
            timeout_sec: Optional[float] = None, exec_id: Optional[str] = None,
            limits: Optional[Dict[str, int]] = None) -> ExecResult:
        """Run a command and wait for it: a string through the shell, a sequence as argv.

        limits ({"memory_bytes": ..., "cpu_millicores": ..., "pids": ...}) are
        enforced by the guest kernel for this command alone; a guest that
        cannot apply them refuses the command rather than run it unlimited."""
        return ExecResult._from(self._engine._op_run(_exec_args(cmd, cwd, env, timeout_sec, exec_id, limits)))

    def stream(self, cmd: Command, *, cwd: Optional[str] = None, env: Optional[Dict[str, str]] = None,
               timeout_sec: Optional[float] = None, exec_id: Optional[str] = None,
               limits: Optional[Dict[str, int]] = None) -> ExecStream:
        """Run a command, yielding its output as it arrives (OutputChunk, Gap, then Exit)."""
        args = _exec_args(cmd, cwd, env, timeout_sec, exec_id, limits)
        return ExecStream(self._engine._op_stream(args))

    def suspend(self) -> str:
        """Freeze the VM: files, processes and the token survive. Returns the new state."""
        return self._engine._op_suspend({})["state"]

    def resume(self) -> str:
        """Thaw a suspended VM and wait until it runs again. Returns the new state."""
        return self._engine._op_resume({})["state"]

    def terminate(self, *, delete_image: bool = False) -> TeardownReport:
        """Tear the VM down; never raises for what it could not delete, it names it."""
        d = self._engine._op_terminate({"deleteImage": delete_image})
        return TeardownReport(d["microvmId"], d["state"], list(d["leaked"]) + list(d["undeletedLogGroups"]),
                              d["imageIdentifier"])

    def url(self, port: int, *, expires_minutes: int = 0) -> PortURL:
        """The URL, headers and expiry that reach guest port `port`; expires_minutes is 1..60, 0 for 60."""
        d = self._engine._op_url({"port": port, "expiresMinutes": expires_minutes})
        return PortURL(d["microvmId"], d["port"], d["url"], {str(k): str(v) for k, v in d["headers"].items()},
                       d["expiresAt"], list(d["subprotocols"]))

    def cost(self) -> CostReport:
        """What the run cost so far, from what the platform reports (also after terminate)."""
        return CostReport._from(self._engine._op_cost({})["report"])

    def close(self) -> None:
        """End the engine: a sandbox this process launched is terminated, a local emulator stops."""
        self._finalizer()

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
