"""Sandbox and AsyncSandbox: one MicroVM, its whole lifecycle, driven through `microvm engine`.

Nothing here decides anything the Go library decides (which transitions are
allowed, what a teardown leaked, what a run cost): each method is one engine
request, and its answer is the CLI envelope's data, wrapped in a small class.
"""
import asyncio
import base64
import codecs
import dataclasses
import os
import shutil
import tempfile
import uuid
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Union, cast

from . import _contract as c
from . import _sink
from ._engine import AsyncEngine, Engine
from .errors import InvalidArgError
from .errors import TimeoutError as TimeoutError_

if TYPE_CHECKING:
    from .fleet import FleetResult

Command = Union[str, Sequence[str]]


@dataclass(frozen=True)
class ExecResult:
    """A finished command: a non-zero exit is a result, not an exception."""

    exec_id: str
    phase: str
    exit_code: Optional[int]  # None when a signal ended the child
    signal: Optional[int]
    stdout: str  # at most 8 MiB (the daemon's max_output_bytes) per stream
    stderr: str
    truncated: bool  # True only when output bytes were dropped (past the cap, or lost)
    timed_out: bool = False  # a time limit ended the command or the wait
    timeout_limit: Optional[str] = None  # "timeout_sec" (the guest killed it) or "wait" (it runs on)
    # What the command used (wallSecs, userCpuSecs, systemCpuSecs,
    # peakMemoryBytes, stdoutBytes, stderrBytes, source, missing); None from
    # a daemon that reports none.
    usage: Optional[c.ExecUsage] = None
    oom_killed: bool = False  # killed by the guest kernel over its memory limit

    @property
    def ok(self) -> bool:
        """Whether the command exited zero."""
        return self.exit_code == 0

    @property
    def running(self) -> bool:
        """Whether the command was still running when this record was read."""
        return self.phase == "running"

    @classmethod
    def _from(cls, d: c.ExecResultData) -> "ExecResult":
        limit = {"timeoutSec": "timeout_sec", "wait": "wait"}.get(d["timeoutLimit"])
        return cls(d["execId"], d["phase"], d["exitCode"], d["signal"], d["stdout"], d["stderr"], d["truncated"],
                   d["timedOut"], limit, d.get("usage"), bool(d.get("oomKilled", False)))


@dataclass(frozen=True)
class OutputChunk:
    """Output as it arrived; stdout and stderr share one offset space."""

    stream: str
    offset: int
    text: str  # UTF-8, invalid bytes replaced (lossy says whether any were)
    size: int
    lossy: bool
    data: bytes = b""  # the exact bytes (Sandbox.stream and Process.stream on POSIX); text is them decoded


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

# MAX_LINE is ExecStream.lines' default bound on one line, in characters:
# the daemon's cap on a run's output per stream (8 MiB).
MAX_LINE = 8 << 20


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
        try:
            for ev in self._events:
                item = _item(self, ev)
                if item is not None:
                    yield item
        finally:
            if self.exit is None:
                self.close()

    def close(self) -> None:
        """Stop following: the engine stops sending (the command keeps running; kill it by exec id)."""
        close = getattr(self._events, "close", None)
        if close is not None:
            close()

    def lines(self, stream: str = "stdout", *, max_line: int = MAX_LINE) -> Iterator[str]:
        """Complete lines of one stream (without their newline) as each
        arrives, decoded as UTF-8 across chunks: a character split between
        two chunks comes out whole; invalid bytes are replaced. A line longer
        than max_line characters comes out in pieces of max_line, so output
        without newlines never grows this process without bound."""
        split = _LineSplitter(max_line)
        for item in self:
            if isinstance(item, OutputChunk) and item.stream == stream:
                yield from split.feed(item)
            elif isinstance(item, Gap):
                split.gap()
        yield from split.end()


class _LineSplitter:
    """ExecStream.lines' state: one incremental UTF-8 decoder over the
    chunks' exact bytes (a chunk's own text is decoded alone, so a
    character cut by a chunk boundary would be two replacement marks), and
    the line still open. Each chunk is split once, so a chunk of many short
    lines costs its length, not its length per line."""

    def __init__(self, max_line: int) -> None:
        if max_line < 1:
            raise InvalidArgError("max_line must be at least 1 character, got %d" % max_line, "ERR_INVALID_ARG")
        self._decode = codecs.getincrementaldecoder("utf-8")("replace").decode
        self._open = ""
        self._max = max_line

    def feed(self, item: OutputChunk) -> List[str]:
        # Only the engine's sink carries the bytes; its event lines (where
        # there are no FIFOs) carry text alone.
        text = self._decode(item.data) if item.data or not item.size else item.text
        if "\n" not in text:
            self._open += text
            done: List[str] = []
        else:
            done = (self._open + text).split("\n")
            self._open = done.pop()
        if len(self._open) > self._max or any(len(line) > self._max for line in done):
            done = [line[i:i + self._max] for line in done for i in range(0, max(len(line), 1), self._max)]
            # The open line keeps its last piece (up to max_line), which its
            # newline may still end: cutting it to nothing would make that
            # newline an empty line of its own.
            cut = (len(self._open) - 1) // self._max * self._max if self._open else 0
            done += [self._open[i:i + self._max] for i in range(0, cut, self._max)]
            self._open = self._open[cut:]
        return done

    def gap(self) -> None:
        # Bytes were lost here: a character begun before the gap does not
        # take its continuation from after it.
        self._open += self._decode(b"", True)

    def end(self) -> List[str]:
        rest = self._open + self._decode(b"", True)
        self._open = ""
        return [rest] if rest else []


def _item(owner: Any, ev: Any) -> Optional[StreamItem]:
    kind = ev.get("event")
    if kind == "output":
        return OutputChunk(ev["stream"], ev["offset"], ev["text"], ev["bytes"], ev["lossy"], ev.get("data", b""))
    if kind == "gap":
        return Gap(ev["from"], ev["to"])
    if kind == "exit":
        owner.exit = Exit(ev["exitCode"], ev["signal"], ev["truncated"], ev["writersMayBeAlive"], ev["offset"])
        exit_: Exit = owner.exit
        return exit_
    owner.summary = ev
    return None


class AsyncExecStream:
    """ExecStream on asyncio: `async for item in stream`."""

    def __init__(self, events: AsyncIterator[Any]) -> None:
        self._events = events
        self.summary: Optional[c.ExecStreamData] = None
        self.exit: Optional[Exit] = None

    async def __aiter__(self) -> AsyncIterator[StreamItem]:
        try:
            async for ev in self._events:
                item = _item(self, ev)
                if item is not None:
                    yield item
        finally:
            if self.exit is None:
                await self.aclose()

    async def aclose(self) -> None:
        """Stop following (the command keeps running; kill it by exec id)."""
        aclose = getattr(self._events, "aclose", None)
        if aclose is not None:
            await aclose()

    async def lines(self, stream: str = "stdout", *, max_line: int = MAX_LINE) -> AsyncIterator[str]:
        """ExecStream.lines: `async for line in stream.lines()`."""
        split = _LineSplitter(max_line)
        async for item in self:
            if isinstance(item, OutputChunk) and item.stream == stream:
                for line in split.feed(item):
                    yield line
            elif isinstance(item, Gap):
                split.gap()
        for line in split.end():
            yield line


@dataclass(frozen=True)
class BuildProgress:
    """One event of a local image build: a step's start or end, or a line of its output."""

    step: int
    steps: int
    instruction: str
    text: str  # output, UTF-8; empty for a step's start and end
    done: bool
    cached: bool


def _build_args(local: bool, dockerfile: Optional[Union[str, "os.PathLike[str]"]], memory_mib: int,
                base_image: Optional[str], create: c.CreateArgs) -> c.BuildArgs:
    args = cast(c.BuildArgs, {k: v for k, v in create.items() if k not in ("image", "imageVersion")})
    args["local"], args["memoryMib"] = local, memory_mib
    if dockerfile is not None:
        args["dockerfile"] = os.path.abspath(os.fspath(dockerfile))
    if base_image is not None:
        args["baseImage"] = base_image
    return args


def _progress(ev: Any, on_progress: Optional[Callable[[BuildProgress], None]]) -> Optional[c.SandboxData]:
    if ev.get("event") == "build":
        if on_progress is not None:
            on_progress(BuildProgress(ev["step"], ev["steps"], ev["instruction"], ev["text"], ev["done"], ev["cached"]))
        return None
    if "microvmId" in ev:
        return cast(c.SandboxData, ev)
    return None


@dataclass(frozen=True)
class FsEvent:
    """One change under a watched directory."""

    op: str  # create, write, remove, rename, chmod (agentd's watch ops)
    path: str
    seq: int


def _fs_item(ev: Any) -> Optional[Union[FsEvent, Gap]]:
    kind = ev.get("event")
    if kind == "fs":
        return FsEvent(ev["op"], ev["path"], ev["seq"])
    if kind == "gap":
        return Gap(ev["from"], ev["to"])
    return None


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

    @classmethod
    def _from(cls, e: Any) -> "FileEntry":
        return cls(e["path"], e["name"], e["type"], e["size"], e["mode"], e["mtime"], e.get("symlinkTarget"))


@dataclass(frozen=True)
class KeepaliveReport:
    """What hold_awake did: the pings it sent and how long it held the VM."""

    microvm_id: str
    pings: int
    held_seconds: float


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


# Where a file that only passes through lives: memory (tmpfs), when there is
# room, so the bytes are not also written back to a disk nobody reads them
# from again (256 MiB through /tmp cost 0.4 s more than through /dev/shm).
_SHM = "/dev/shm"
# Room left over in the tmpfs after the file: other users of it (and a
# container's 64 MiB /dev/shm) are not starved by one transfer.
_SHM_SPARE = 64 << 20


def _tempdir(need: Optional[int] = None) -> str:
    # Large bytes travel through a host file the engine reads or writes
    # (api/engine.yaml read/write localPath), not through its pipe: the
    # directory is this user's alone (mkdtemp makes it 0700).
    if need is not None:
        try:
            st = os.statvfs(_SHM)
            if os.access(_SHM, os.W_OK) and st.f_bavail * st.f_frsize >= need + _SHM_SPARE:
                return tempfile.mkdtemp(prefix="microvms-", dir=_SHM)
        except OSError:
            pass
    return tempfile.mkdtemp(prefix="microvms-")


def _max_args(max_bytes: Optional[int]) -> Dict[str, int]:
    """The read op's maxBytes for a caller's max_bytes (None: the op's own bound)."""
    if max_bytes is None:
        return {}
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
        raise InvalidArgError("max_bytes must be a whole number of bytes, at least 1, got %r" % (max_bytes,), "ERR_INVALID_ARG")
    return {"maxBytes": max_bytes}


def _read_args(path: str, local: str, max_bytes: Optional[int]) -> c.ReadArgs:
    args: c.ReadArgs = {"path": path, "localPath": local}
    if "maxBytes" in _max_args(max_bytes):
        args["maxBytes"] = cast(int, max_bytes)
    return args


def _refuse_over(path: str, size: Optional[int], max_bytes: Optional[int]) -> None:
    # A file whose size already says it is over the bound is refused before
    # the read starts; one that grows past it fails in the engine.
    if max_bytes is not None and size is not None and size > max_bytes:
        raise InvalidArgError("%s is %d bytes, over max_bytes (%d); raise max_bytes, or download it to a host file"
                              % (path, size, max_bytes), "ERR_INVALID_ARG")


def _read_size(d: c.PathData) -> Optional[int]:
    # A regular file's size is known before the read starts; anything else
    # (a symlink's target, a device) goes through the default temp dir.
    if d["exists"] and d["entry"] is not None and d["entry"]["type"] == "file":
        return int(d["entry"]["size"])
    return None


def _write_args(path: str, local: str, mode: Optional[str]) -> c.WriteArgs:
    args: c.WriteArgs = {"path": path, "localPath": local}
    if mode is not None:
        args["mode"] = mode
    return args


def _entries(d: c.DirData) -> List[FileEntry]:
    return [FileEntry._from(e) for e in d["entries"]]


def _stat(d: c.PathData) -> Optional[FileEntry]:
    return FileEntry._from(d["entry"]) if d["exists"] and d["entry"] is not None else None


class Files:
    """The sandbox's filesystem (E2B's sandbox.files). timeout, where a
    method takes one, is how long to wait for the answer in seconds
    (TimeoutError past it; None waits)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def write(self, path: str, data: Union[str, bytes], *, mode: Optional[str] = None,
              timeout: Optional[float] = None) -> None:
        """Write a whole file (any size), creating its parents; mode is four octal digits ("0755")."""
        raw = data.encode() if isinstance(data, str) else bytes(data)
        if _sink.sockets_supported():
            # Through a Unix socket the engine dials, no host file first.
            self._engine._socket_write(_write_args(path, "", mode), raw, timeout)
            return
        tmp = _tempdir(len(raw))
        try:
            local = os.path.join(tmp, "data")
            with open(local, "wb") as f:
                f.write(raw)
            self._engine._op_write(_write_args(path, local, mode), timeout)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def upload(self, local: Union[str, "os.PathLike[str]"], path: str, *, mode: Optional[str] = None,
               timeout: Optional[float] = None) -> int:
        """Copy one host file to path in the VM, streamed; returns its bytes."""
        return self._engine._op_write(_write_args(path, os.fspath(local), mode), timeout)["bytes"]

    def download(self, path: str, local: Union[str, "os.PathLike[str]"], *, max_bytes: Optional[int] = None,
                 timeout: Optional[float] = None) -> int:
        """Copy one VM file to a host file, streamed (up to max_bytes, else
        DEFAULT_MAX_DOWNLOAD_BYTES; past it InvalidArgError and nothing is
        left at local); returns its bytes."""
        return self._engine._op_read(_read_args(path, os.fspath(local), max_bytes), timeout)["bytes"]

    def read_bytes(self, path: str, *, max_bytes: Optional[int] = None, timeout: Optional[float] = None) -> bytes:
        """The whole file at path. The guest decides how large that is:
        max_bytes bounds what this process takes (a file over it raises
        InvalidArgError, before any byte when its size says so, else as the
        read passes it); without it, up to DEFAULT_MAX_DOWNLOAD_BYTES (8 GiB)."""
        extra = _max_args(max_bytes)
        size = _read_size(self._engine._op_stat({"path": path}, timeout))
        _refuse_over(path, size, max_bytes)
        if _sink.supported():
            # Through a FIFO the engine writes while this process reads.
            return self._engine._sink_read(path, size, timeout, extra)
        tmp = _tempdir(size)
        try:
            local = os.path.join(tmp, "data")
            self._engine._op_read(_read_args(path, local, max_bytes), timeout)
            with open(local, "rb") as f:
                return f.read()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def read(self, path: str, *, max_bytes: Optional[int] = None, timeout: Optional[float] = None) -> str:
        """The whole file at path as UTF-8 text (max_bytes as read_bytes)."""
        return self.read_bytes(path, max_bytes=max_bytes, timeout=timeout).decode()

    def list(self, path: str, *, depth: int = 1, timeout: Optional[float] = None) -> List[FileEntry]:
        """The entries under path, depth levels deep."""
        return _entries(self._engine._op_list({"path": path, "depth": depth}, timeout))

    def stat(self, path: str, *, timeout: Optional[float] = None) -> Optional[FileEntry]:
        """path's entry (a final symlink not followed), or None when nothing is there."""
        return _stat(self._engine._op_stat({"path": path}, timeout))

    def exists(self, path: str, *, timeout: Optional[float] = None) -> bool:
        """Whether anything is at path."""
        return self._engine._op_stat({"path": path}, timeout)["exists"]

    def mkdir(self, path: str, *, mode: Optional[str] = None, timeout: Optional[float] = None) -> bool:
        """Make a directory and its parents; False when it already was one."""
        args: c.MkdirArgs = {"path": path}
        if mode is not None:
            args["mode"] = mode
        return self._engine._op_mkdir(args, timeout)["changed"]

    def move(self, src: str, dst: str, *, replace: bool = False, timeout: Optional[float] = None) -> None:
        """Rename src to dst; an existing dst is refused unless replace."""
        self._engine._op_move({"from": src, "to": dst, "replace": replace}, timeout)

    def remove(self, path: str, *, recursive: bool = False, timeout: Optional[float] = None) -> int:
        """Remove path (a directory only with recursive); returns the entries removed, 0 when none was there."""
        return self._engine._op_remove({"path": path, "recursive": recursive}, timeout)["count"]

    def watch(self, path: str, *, recursive: bool = False) -> Iterator[Union[FsEvent, Gap]]:
        """Changes under path as they happen (FsEvent, or Gap for dropped ones); close the iterator to stop."""
        events = self._engine._op_watch({"path": path, "recursive": recursive})
        try:
            for ev in events:
                item = _fs_item(ev)
                if item is not None:
                    yield item
        finally:
            close = getattr(events, "close", None)
            if close is not None:
                close()  # ends the engine's watch now, not when collected

    def upload_dir(self, local: Union[str, "os.PathLike[str]"], remote: str, *, timeout: Optional[float] = None) -> int:
        """Copy a local directory tree into the VM; returns the bytes of its files."""
        return self._engine._op_upload_dir({"local": os.fspath(local), "remote": remote}, timeout)["bytes"]

    def download_dir(self, remote: str, local: Union[str, "os.PathLike[str]"], *, timeout: Optional[float] = None) -> int:
        """Copy a VM directory tree into local, every entry confined beneath it."""
        return self._engine._op_download_dir({"remote": remote, "local": os.fspath(local)}, timeout)["bytes"]


def _exec_args(cmd: Command, cwd: Optional[str], env: Optional[Dict[str, str]],
               timeout_sec: Optional[float], exec_id: Optional[str],
               user: Optional[int] = None, group: Optional[int] = None,
               limits: Optional[Dict[str, int]] = None) -> c.RunArgs:
    # A string is a shell script (E2B's commands.run); a sequence is an argv.
    args: c.RunArgs = {"command": [cmd], "shell": True} if isinstance(cmd, str) else {"command": list(cmd)}
    if cwd is not None:
        args["cwd"] = cwd
    if env:
        args["env"] = ["%s=%s" % kv for kv in env.items()]
    if timeout_sec is not None:
        args["timeoutSec"] = timeout_sec
    # The caller mints the id, so a cancelled wait can still kill the command.
    args["execId"] = exec_id if exec_id is not None else "py-" + uuid.uuid4().hex
    if user is not None:
        args["user"] = str(user)
    if group is not None:
        args["group"] = str(group)
    if limits:
        # memory_bytes, cpu_millicores, pids: the guest refuses what it cannot apply.
        unknown = set(limits) - {"memory_bytes", "cpu_millicores", "pids"}
        if unknown:
            raise InvalidArgError("unknown limits: %s (memory_bytes, cpu_millicores, pids)" % ", ".join(sorted(unknown)),
                                  "ERR_INVALID_ARG")
        if "memory_bytes" in limits:
            args["memoryLimitBytes"] = int(limits["memory_bytes"])
        if "cpu_millicores" in limits:
            args["cpuMillicores"] = int(limits["cpu_millicores"])
        if "pids" in limits:
            args["pidsLimit"] = int(limits["pids"])
    return args


def _start_args(cmd: Command, cwd: Optional[str], env: Optional[Dict[str, str]], timeout_sec: Optional[float],
                exec_id: Optional[str], user: Optional[int], group: Optional[int], stdin: bool,
                pty: Optional["tuple[int, int]"], limits: Optional[Dict[str, int]] = None) -> c.StartArgs:
    args = cast(c.StartArgs, _exec_args(cmd, cwd, env, timeout_sec, exec_id, user, group, limits))
    args["stdin"] = stdin
    if pty is not None:
        args["tty"], args["rows"], args["cols"] = True, pty[0], pty[1]
    return args


def _create_args(local: bool, image: Optional[str], image_version: Optional[str], region: Optional[str],
                 control_endpoint: Optional[str], execution_role_arn: Optional[str], agent_token: Optional[str],
                 agentd: Optional[str], timeout_sec: Optional[float], egress: bool,
                 launch_env: Optional[Dict[str, str]], max_idle_sec: Optional[int], suspended_sec: Optional[int],
                 max_duration_sec: Optional[int]) -> c.CreateArgs:
    args: c.CreateArgs = {"local": local}
    for key, value in (("image", image), ("imageVersion", image_version), ("region", region),
                       ("controlEndpoint", control_endpoint), ("executionRoleArn", execution_role_arn),
                       ("agentToken", agent_token), ("agentd", agentd)):
        if value is not None:
            args[key] = value  # type: ignore[literal-required]
    if timeout_sec is not None:
        args["timeoutSec"] = timeout_sec
    _launch_into(cast(Dict[str, Any], args), egress, launch_env, max_idle_sec, suspended_sec, max_duration_sec,
                 None, False, None)
    return args


class Secret:
    """A credential bound to hosts, for Sandbox.create(secrets={NAME: Secret(value, host, ...)}).

    The guest's NAME holds an opaque placeholder; HTTPS requests to a bound
    host (exact, or *.suffix) get the value in their headers on the way out,
    outside the guest. Only an emulator enforces this (local=True or a
    control endpoint); on AWS create refuses it. The value is never in this
    object's repr or str, nor in any answer or error the engine gives.
    """

    __slots__ = ("_value", "hosts")

    def __init__(self, value: str, *hosts: str) -> None:
        if not isinstance(value, str) or not value:
            raise InvalidArgError("a Secret's value must be a non-empty string", "ERR_INVALID_ARG")
        if not hosts or not all(isinstance(h, str) and h for h in hosts):
            raise InvalidArgError("a Secret needs at least one host name", "ERR_INVALID_ARG")
        self._value = value
        self.hosts = tuple(hosts)

    def __repr__(self) -> str:
        return "Secret(<redacted>, %s)" % ", ".join(repr(h) for h in self.hosts)

    __str__ = __repr__

    def _spec(self, name: str) -> str:
        return "%s=%s@%s" % (name, self._value, ",".join(self.hosts))


def _network_args(args: c.CreateArgs, network_allow: Optional[Sequence[str]], network_deny_all: bool,
                  secrets: Optional[Mapping[str, Secret]]) -> None:
    """Adds create's network policy (issue 48) to args."""
    if isinstance(network_allow, str):
        raise InvalidArgError("network_allow is a list of rules, not one string", "ERR_INVALID_ARG")
    if network_allow:
        args["networkAllow"] = list(network_allow)
    if network_deny_all:
        args["networkDenyAll"] = True
    if secrets:
        specs = []
        for name, sec in secrets.items():
            if not isinstance(sec, Secret):
                # Never format the value: a mistaken str is a secret too.
                raise InvalidArgError("secrets[%r] must be a microvms.Secret(value, host, ...)" % (name,),
                                      "ERR_INVALID_ARG")
            specs.append(sec._spec(name))
        args["secrets"] = specs


def _launch_into(args: Dict[str, Any], egress: bool, launch_env: Optional[Dict[str, str]], max_idle_sec: Optional[int],
                 suspended_sec: Optional[int], max_duration_sec: Optional[int], network_allow: Optional[Sequence[str]],
                 network_deny_all: bool, secrets: Optional[Mapping[str, "Secret"]]) -> Dict[str, Any]:
    """create's launch options (outbound network, environment, idle and
    duration policy, network policy and secrets) into args, for every op
    that launches: create, build, pool_open, restore, fork, run_many."""
    if egress:
        args["egress"] = True
    if launch_env:
        args["launchEnv"] = ["%s=%s" % kv for kv in launch_env.items()]
    for key, value in (("maxIdleSec", max_idle_sec), ("suspendedSec", suspended_sec), ("maxDurationSec", max_duration_sec)):
        if value is not None:
            args[key] = value
    _network_args(cast(c.CreateArgs, args), network_allow, network_deny_all, secrets)
    return args


def _network_set_args(allow: Sequence[str], deny_all: bool) -> c.NetworkSetArgs:
    if isinstance(allow, str):
        raise InvalidArgError("allow is a list of rules, not one string", "ERR_INVALID_ARG")
    args: c.NetworkSetArgs = {"allow": list(allow)}
    if deny_all:
        args["denyAll"] = True
    return args


def _teardown(d: c.TeardownData) -> TeardownReport:
    return TeardownReport(d["microvmId"], d["state"], list(d["leaked"]) + list(d["undeletedLogGroups"]),
                          d["imageIdentifier"])


def _port_url(d: c.URLData) -> PortURL:
    return PortURL(d["microvmId"], d["port"], d["url"], {str(k): str(v) for k, v in d["headers"].items()},
                   d["expiresAt"], list(d["subprotocols"]))


class Process:
    """A command running in the background, addressed by its exec id: the
    id is the whole handle, so Sandbox.process(exec_id) in another process
    (attached to the same sandbox) reaches the same command."""

    def __init__(self, engine: Engine, exec_id: str) -> None:
        self._engine = engine
        self.exec_id = exec_id

    def __repr__(self) -> str:
        return "Process(%s)" % self.exec_id

    def poll(self, *, timeout: Optional[float] = None) -> ExecResult:
        """The record as it stands: running, or the outcome."""
        return ExecResult._from(self._engine._op_poll({"execId": self.exec_id}, timeout))

    def wait(self, timeout: Optional[float] = None) -> ExecResult:
        """Wait for the exit and take the record. Past timeout (seconds) the result has
        timed_out True, timeout_limit "wait", and the command runs on."""
        args: c.WaitArgs = {"execId": self.exec_id}
        if timeout is not None:
            args["timeoutSec"] = timeout
        return ExecResult._from(self._engine._op_wait(args))

    def stream(self, offset: int = 0) -> ExecStream:
        """The output from byte offset on, as it arrives, until the exit."""
        args: c.FollowArgs = {"execId": self.exec_id, "offset": offset}
        return ExecStream(self._engine._sink_stream("follow", args) if _sink.supported() else self._engine._op_follow(args))

    def kill(self, *, timeout: Optional[float] = None) -> bool:
        """SIGTERM then SIGKILL to the process group; False when it had already gone."""
        return self._engine._op_kill({"execId": self.exec_id}, timeout)["done"]

    def signal(self, name: str, *, timeout: Optional[float] = None) -> bool:
        """Send one named signal (TERM, HUP, INT, ...) once; False when the group had gone."""
        return self._engine._op_signal({"execId": self.exec_id, "signal": name}, timeout)["done"]

    def resize(self, rows: int, cols: int, *, timeout: Optional[float] = None) -> None:
        """Resize a pty command's terminal."""
        self._engine._op_resize({"execId": self.exec_id, "rows": rows, "cols": cols}, timeout)

    def write_stdin(self, data: Union[str, bytes], *, timeout: Optional[float] = None) -> int:
        """Write to the command's stdin (started with stdin=True or pty); returns the bytes taken."""
        raw = data.encode() if isinstance(data, str) else bytes(data)
        args: c.StdinWriteArgs = {"execId": self.exec_id, "dataBase64": base64.b64encode(raw).decode()}
        return self._engine._op_stdin_write(args, timeout)["bytes"]

    def close_stdin(self, *, timeout: Optional[float] = None) -> None:
        """Close the command's stdin: it reads end of file."""
        self._engine._op_stdin_close({"execId": self.exec_id}, timeout)


def _save_args(paths: Optional[Sequence[str]], name: Optional[str], labels: Optional[Dict[str, str]],
               pause: bool) -> Dict[str, Any]:
    args: Dict[str, Any] = {"paths": list(paths or []), "name": name or "",
                            "labels": [f"{k}={v}" for k, v in (labels or {}).items()]}
    if not pause:
        args["noPause"] = True
    return args


class Checkpoints:
    """The stored checkpoints (issue 47), reached through a sandbox's engine:
    the bucket MICROVM_BUCKET names on AWS, the emulator's S3 slice locally."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def list(self, *, name: Optional[str] = None, timeout: Optional[float] = None) -> List[c.CheckpointManifest]:
        """Every stored checkpoint's manifest, newest first (with name, that one)."""
        return self._engine._op_checkpoint_ls({"name": name or ""}, timeout)["checkpoints"]

    def remove(self, ref: str, *, timeout: Optional[float] = None) -> List[str]:
        """Remove a checkpoint by name or digest; returns the bucket keys deleted."""
        return self._engine._op_checkpoint_rm({"ref": ref}, timeout)["removed"]

    def bake(self, ref: str, *, name: Optional[str] = None, timeout: Optional[float] = None) -> c.BakedImage:
        """Bake checkpoint ref into a new image whose launches start with its
        files in place (`microvm checkpoint image`); name defaults to the
        source image's name and the digest's first 12 characters. Locally
        the emulator needs a base image for FROM (Sandbox.build's
        base_image); without one it raises PreconditionError and leaves
        nothing behind."""
        d = self._engine._op_checkpoint_image({"ref": ref, "name": name or ""}, timeout)
        assert d["image"] is not None
        return d["image"]


class AsyncCheckpoints:
    """Checkpoints on asyncio."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def list(self, *, name: Optional[str] = None) -> List[c.CheckpointManifest]:
        return (await self._engine._aop_checkpoint_ls({"name": name or ""}))["checkpoints"]

    async def remove(self, ref: str) -> List[str]:
        return (await self._engine._aop_checkpoint_rm({"ref": ref}))["removed"]

    async def bake(self, ref: str, *, name: Optional[str] = None) -> c.BakedImage:
        d = await self._engine._aop_checkpoint_image({"ref": ref, "name": name or ""})
        assert d["image"] is not None
        return d["image"]


class Volumes:
    """The volumes (issue 47) reached through a sandbox's engine: the ones
    it holds (Sandbox.create(volumes={NAME: "/path"})) and the stored ones,
    in the bucket MICROVM_BUCKET names, else the emulator's
    microvm-checkpoints. A volume is a chain of generations; one sandbox
    writes it at a time."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def sync(self, *, timeout: Optional[float] = None) -> List[c.CheckpointManifest]:
        """Save a new generation of every volume this sandbox holds; returns their manifests."""
        return self._engine._op_volume_sync({}, timeout)["saved"]

    def list(self, *, timeout: Optional[float] = None) -> List[c.VolumeInfo]:
        """Every stored volume with its generations (newest first) and lease holder."""
        return self._engine._op_volume_ls({}, timeout)["volumes"]

    def remove(self, name: str, *, timeout: Optional[float] = None) -> List[str]:
        """Delete a volume no live sandbox holds; returns the bucket keys deleted."""
        return self._engine._op_volume_rm({"name": name}, timeout)["removed"]


class AsyncVolumes:
    """Volumes on asyncio."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def sync(self) -> List[c.CheckpointManifest]:
        return (await self._engine._aop_volume_sync({}))["saved"]

    async def list(self) -> List[c.VolumeInfo]:
        return (await self._engine._aop_volume_ls({}))["volumes"]

    async def remove(self, name: str) -> List[str]:
        return (await self._engine._aop_volume_rm({"name": name}))["removed"]


def _volume_args(args: c.CreateArgs, volumes: Optional[Mapping[str, str]]) -> None:
    # {NAME: "/path"}: a mapping, since one sandbox attaches a volume once.
    if volumes:
        args["volumes"] = ["%s:%s" % kv for kv in volumes.items()]


class Sandbox:
    """One MicroVM as a sandbox.

    Sandbox.create(local=True) runs the embedded emulator inside the engine
    (no AWS account and no root: an ordinary user runs it);
    Sandbox.create(image=...) launches on AWS Lambda MicroVMs. Use it as a
    context manager: leaving the block terminates it, and a process that
    dies without leaving takes its engine, and so its MicroVM, with it.
    Every method that blocks takes timeout (seconds to wait for the answer;
    TimeoutError past it, None waits), but create and build, which bound
    their wait for RUNNING with timeout_sec. A dead engine raises
    UnexpectedError naming it.
    """

    def __init__(self, engine: Engine, info: c.SandboxData) -> None:
        self._engine = engine
        self._info = info
        self.files = Files(engine)
        self.checkpoints = Checkpoints(engine)
        self.volumes = Volumes(engine)
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
        egress: bool = False,
        launch_env: Optional[Dict[str, str]] = None,
        max_idle_sec: Optional[int] = None,
        suspended_sec: Optional[int] = None,
        max_duration_sec: Optional[int] = None,
        keep_awake: bool = True,
        network_allow: Optional[Sequence[str]] = None,
        network_deny_all: bool = False,
        secrets: Optional[Mapping[str, Secret]] = None,
        volumes: Optional[Mapping[str, str]] = None,
        binary: Optional[str] = None,
    ) -> "Sandbox":
        """Launch a MicroVM and wait until it runs (timeout_sec bounds that wait).

        egress gives it outbound network; launch_env is the environment of
        every command, delivered once at launch; max_idle_sec (default 600),
        suspended_sec (600) and max_duration_sec (3600, at most 28800) are
        `microvm run`'s idle and duration policy. The platform suspends a VM
        after max_idle_sec without an inbound request however busy it is, so
        while a run, stream or file transfer is in flight the library sends
        one (GET /v1/health) every quarter of that window; keep_awake=False
        turns that off. A detached command nothing waits on is held awake
        with hold_awake().

        network_allow (rules as `microvm run --network-allow` spells them:
        HOST[:PORTS], *.SUFFIX[:PORTS], CIDR[:PORTS]), network_deny_all and
        secrets ({NAME: Secret(value, host, ...)}) launch the guest under a
        network policy that denies everything else, with each secret's
        value kept outside the guest (its NAME holds a placeholder). Only an
        emulator enforces a policy; on AWS create refuses it
        (egress-connector-or-none).

        volumes ({NAME: "/path"}, `microvm run --volume NAME:/path`) lays
        each volume's newest generation at its path before create returns
        (an empty directory on first use), under a lease this sandbox holds:
        sb.volumes.sync() saves a generation, terminate saves a last one and
        lets the lease go. A volume another live sandbox holds is refused
        (CheckpointRefusedError naming the holder). Volumes live in the bucket
        MICROVM_BUCKET names, else the emulator's own store.
        """
        args = _create_args(local, image, image_version, region, control_endpoint, execution_role_arn, agent_token,
                            agentd, timeout_sec, egress, launch_env, max_idle_sec, suspended_sec, max_duration_sec)
        if not keep_awake:
            args["noKeepAwake"] = True
        _network_args(args, network_allow, network_deny_all, secrets)
        _volume_args(args, volumes)
        engine = Engine.shared(binary)
        try:
            return cls(engine, engine._op_create(args))
        except BaseException:
            engine.close()
            raise

    @classmethod
    def build(
        cls,
        *,
        local: bool = False,
        dockerfile: Optional[Union[str, "os.PathLike[str]"]] = None,
        memory_mib: int = 0,
        base_image: Optional[str] = None,
        on_progress: Optional[Callable[[BuildProgress], None]] = None,
        region: Optional[str] = None,
        control_endpoint: Optional[str] = None,
        execution_role_arn: Optional[str] = None,
        agent_token: Optional[str] = None,
        agentd: Optional[str] = None,
        timeout_sec: Optional[float] = None,
        egress: bool = False,
        launch_env: Optional[Dict[str, str]] = None,
        max_idle_sec: Optional[int] = None,
        suspended_sec: Optional[int] = None,
        max_duration_sec: Optional[int] = None,
        binary: Optional[str] = None,
    ) -> "Sandbox":
        """Build an image (from dockerfile, or the default one at memory_mib's size
        class) and launch a sandbox of it, as `microvm build` then create.

        on_progress sees each step and output line of a local build while it
        runs. base_image (local) is what FROM stands for: an OCI layout
        directory or docker-save tarball, for a machine that cannot pull.
        terminate(delete_image=True) deletes the image.
        """
        create = _create_args(local, None, None, region, control_endpoint, execution_role_arn, agent_token, agentd,
                              timeout_sec, egress, launch_env, max_idle_sec, suspended_sec, max_duration_sec)
        args = _build_args(local, dockerfile, memory_mib, base_image, create)
        engine = Engine.shared(binary)
        try:
            info: Optional[c.SandboxData] = None
            for ev in engine._op_build(args):
                info = _progress(ev, on_progress) or info
            assert info is not None
            return cls(engine, info)
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
        timeout: Optional[float] = None,
        keep_awake: bool = True,
    ) -> "Sandbox":
        """Reach a MicroVM another process launched, by its id and agent token.

        For a local sandbox pass the launcher's control_endpoint. Leaving an
        attached sandbox does not terminate it; terminate() does. keep_awake
        is create's.
        """
        args: c.AttachArgs = {"microvmId": microvm_id, "agentToken": agent_token}
        if not keep_awake:
            args["noKeepAwake"] = True
        if control_endpoint is not None:
            args["controlEndpoint"] = control_endpoint
        if region is not None:
            args["region"] = region
        engine = Engine.shared(binary)
        try:
            return cls(engine, engine._op_attach(args, timeout))
        except BaseException:
            engine.close()
            raise

    @classmethod
    def restore(
        cls,
        checkpoint: str,
        *,
        control_endpoint: Optional[str] = None,
        region: Optional[str] = None,
        image_version: Optional[str] = None,
        allow_other_version: bool = False,
        execution_role_arn: Optional[str] = None,
        egress: bool = False,
        launch_env: Optional[Dict[str, str]] = None,
        max_idle_sec: Optional[int] = None,
        suspended_sec: Optional[int] = None,
        max_duration_sec: Optional[int] = None,
        network_allow: Optional[Sequence[str]] = None,
        network_deny_all: bool = False,
        secrets: Optional[Mapping[str, Secret]] = None,
        binary: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> "Sandbox":
        """Launch a sandbox from a stored checkpoint (its name or digest): its
        image and version, its files laid before anything runs. A corrupted
        or other-version checkpoint raises CheckpointRefusedError before
        anything launches. The store is a running emulator's
        (control_endpoint) or AWS's; a local engine's new emulator has none,
        so locally fork() instead. The launch options (egress through
        secrets) are create's, with its defaults."""
        args: Dict[str, Any] = {"ref": checkpoint, "allowOtherVersion": allow_other_version}
        if execution_role_arn is not None:
            args["executionRoleArn"] = execution_role_arn
        _launch_into(args, egress, launch_env, max_idle_sec, suspended_sec, max_duration_sec, network_allow, network_deny_all, secrets)
        if control_endpoint is not None:
            args["controlEndpoint"] = control_endpoint
        if region is not None:
            args["region"] = region
        if image_version is not None:
            args["imageVersion"] = image_version
        engine = Engine.shared(binary)
        try:
            return cls(engine, engine._op_restore(cast(c.RestoreArgs, args), timeout))
        except BaseException:
            engine.close()
            raise

    def checkpoint(self, *, paths: Optional[Sequence[str]] = None, name: Optional[str] = None,
                   labels: Optional[Dict[str, str]] = None, pause: bool = True,
                   timeout: Optional[float] = None) -> c.CheckpointManifest:
        """Save paths (default the working directory, which must not be /) as a
        checkpoint; returns its manifest. The sandbox keeps running."""
        d = self._engine._op_checkpoint(cast(c.CheckpointArgs, _save_args(paths, name, labels, pause)), timeout)
        assert d["checkpoint"] is not None
        return d["checkpoint"]

    def fork(self, n: int, *, command: str = "", parallel: int = 0, timeout_sec: float = 0.0,
             paths: Optional[Sequence[str]] = None, name: Optional[str] = None,
             labels: Optional[Dict[str, str]] = None, pause: bool = True,
             egress: bool = False, launch_env: Optional[Dict[str, str]] = None,
             max_idle_sec: Optional[int] = None, suspended_sec: Optional[int] = None, max_duration_sec: Optional[int] = None,
             network_allow: Optional[Sequence[str]] = None, network_deny_all: bool = False,
             secrets: Optional[Mapping[str, "Secret"]] = None,
             timeout: Optional[float] = None) -> "FleetResult":
        """Checkpoint this sandbox and run command in n copies restored from it,
        each torn down after: per-copy outcomes and one cost report, as
        run_many's FleetResult. This sandbox keeps running. Each copy is
        launched with the launch options given (egress through secrets, as
        create's), not this sandbox's."""
        from .fleet import FleetResult, _fleet_outcome
        from .errors import MicrovmError
        args = _save_args(paths, name, labels, pause)
        args.update({"count": n, "parallel": parallel, "command": command, "timeoutSec": timeout_sec})
        _launch_into(args, egress, launch_env, max_idle_sec, suspended_sec, max_duration_sec, network_allow, network_deny_all, secrets)
        try:
            return FleetResult._from(self._engine._op_fork(cast(c.ForkArgs, args), timeout))
        except MicrovmError as e:
            return _fleet_outcome(e)

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
    def engine_pid(self) -> int:
        """The `microvm engine` child process's pid."""
        return self._engine.pid

    @property
    def lifecycle(self) -> str:
        """The last state the platform confirmed (RUNNING, SUSPENDED, TERMINATED...)."""
        self._info = self._engine._op_info({})
        return self._info["state"]

    @property
    def max_idle_seconds(self) -> int:
        """The VM's maxIdleDurationSeconds: without an inbound request for this
        long the platform suspends it (0 when it reported no idle policy)."""
        return self._info["maxIdleSeconds"]

    @property
    def ends_at(self) -> Optional[str]:
        """When the platform ends the VM whatever it is doing (RFC 3339), or None."""
        return self._info["endsAt"]

    def hold_awake(self, for_sec: float, *, every_sec: Optional[float] = None,
                   timeout: Optional[float] = None) -> KeepaliveReport:
        """Hold the VM awake for for_sec seconds, for work nothing here waits on
        (a command started and left running): a GET /v1/health through its
        endpoint every every_sec (default a quarter of max_idle_seconds).
        Runs, streams and transfers need none of this: they are kept awake
        while in flight. timeout bounds the call (default for_sec plus a minute).
        """
        if for_sec <= 0:
            raise InvalidArgError("hold_awake takes for_sec > 0 seconds, not %r" % (for_sec,), "ERR_INVALID_ARG")
        args: c.KeepaliveArgs = {"forSec": for_sec}
        if every_sec is not None:
            args["everySec"] = every_sec
        d = self._engine._op_keepalive(args, timeout if timeout is not None else for_sec + 60)
        return KeepaliveReport(d["microvmId"], d["pings"], d["heldSeconds"])

    def network(self, *, timeout: Optional[float] = None) -> c.NetworkState:
        """The network in force: the policy, the secrets' names, hosts and
        placeholders (never their values), and the connections refused,
        counted and the latest listed."""
        return self._engine._op_network_show({}, timeout)["network"]

    def set_network_policy(self, allow: Sequence[str], *, deny_all: bool = False,
                           timeout: Optional[float] = None) -> c.NetworkState:
        """Replace the network policy: new connections follow it at once, and
        open ones it no longer allows are closed before this returns. An
        empty allow needs deny_all=True. Returns what is then in force."""
        return self._engine._op_network_set(_network_set_args(allow, deny_all), timeout)["network"]

    def __repr__(self) -> str:
        return "Sandbox(%s)" % self._info["microvmId"]  # never the token

    def run(self, cmd: Command, *, cwd: Optional[str] = None, env: Optional[Dict[str, str]] = None,
            timeout_sec: Optional[float] = None, exec_id: Optional[str] = None, user: Optional[int] = None,
            group: Optional[int] = None, timeout: Optional[float] = None,
            limits: Optional[Dict[str, int]] = None) -> ExecResult:
        """Run a command and wait for it: a string through the shell, a sequence as argv.

        timeout_sec has the guest kill it (the result then has timed_out True,
        timeout_limit "timeout_sec"). timeout is how long this call waits:
        past it the command is killed and the result has timed_out True,
        timeout_limit "wait". stdout and stderr keep at most 8 MiB each;
        truncated says bytes were dropped. user and group are numeric ids.
        limits ({"memory_bytes": ..., "cpu_millicores": ..., "pids": ...}) are
        enforced by the guest kernel for this command alone (oom_killed says
        it went over its memory); a guest that cannot apply them refuses the
        command rather than run it unlimited. usage says what it used.
        """
        args = _exec_args(cmd, cwd, env, timeout_sec, exec_id, user, group, limits)
        try:
            return ExecResult._from(self._engine._op_run(args, timeout))
        except TimeoutError_:
            p = Process(self._engine, args["execId"])
            p.kill()
            r = p.wait(timeout=30)
            return dataclasses.replace(r, timed_out=True, timeout_limit="wait")

    def stream(self, cmd: Command, *, cwd: Optional[str] = None, env: Optional[Dict[str, str]] = None,
               timeout_sec: Optional[float] = None, exec_id: Optional[str] = None, user: Optional[int] = None,
               group: Optional[int] = None, limits: Optional[Dict[str, int]] = None) -> ExecStream:
        """Run a command, yielding its output as it arrives (OutputChunk, Gap, then Exit).

        Closing the stream early (break, close()) kills the command. limits
        are run()'s.
        """
        args = _exec_args(cmd, cwd, env, timeout_sec, exec_id, user, group, limits)
        # The engine's sink (binary frames through a FIFO) where there are
        # FIFOs; its event lines elsewhere.
        sargs = cast(c.StreamArgs, args)  # the same keys; a sink is added by _sink_stream
        events = self._engine._sink_stream("stream", sargs) if _sink.supported() else self._engine._op_stream(sargs)
        return _KillingStream(self._engine, args["execId"], events)

    def start(self, cmd: Command, *, cwd: Optional[str] = None, env: Optional[Dict[str, str]] = None,
              timeout_sec: Optional[float] = None, exec_id: Optional[str] = None, user: Optional[int] = None,
              group: Optional[int] = None, stdin: bool = False, pty: Optional["tuple[int, int]"] = None,
              limits: Optional[Dict[str, int]] = None, timeout: Optional[float] = None) -> Process:
        """Start a command in the background; pty=(rows, cols) runs it on a
        terminal; limits as run's (the guest refuses what it cannot apply)."""
        args = _start_args(cmd, cwd, env, timeout_sec, exec_id, user, group, stdin, pty, limits)
        return Process(self._engine, self._engine._op_start(args, timeout)["execId"])

    def process(self, exec_id: str) -> Process:
        """The handle of a command started earlier, by any process, by its exec id."""
        return Process(self._engine, exec_id)

    def processes(self, *, timeout: Optional[float] = None) -> List[Dict[str, Any]]:
        """Every exec the guest's agentd holds (exec_id, command, phase, pid, started_at)."""
        return [x for x in self._engine._op_execs({}, timeout)["execs"]]

    def health(self, *, timeout: Optional[float] = None) -> Dict[str, Any]:
        """agentd's health answer."""
        return self._engine._op_health({}, timeout)["probe"]

    def metrics(self, *, timeout: Optional[float] = None) -> Dict[str, Any]:
        """The guest's CPU, memory, load and disk."""
        return self._engine._op_metrics({}, timeout)["probe"]

    def suspend(self, *, timeout: Optional[float] = None) -> str:
        """Freeze the VM: files, processes and the token survive. Returns the new state."""
        return self._engine._op_suspend({}, timeout)["state"]

    def resume(self, *, timeout: Optional[float] = None) -> str:
        """Thaw a suspended VM and wait until it runs again. Returns the new state."""
        return self._engine._op_resume({}, timeout)["state"]

    def terminate(self, *, delete_image: bool = False, timeout: Optional[float] = None) -> TeardownReport:
        """Tear the VM down; never raises for what it could not delete, it names it."""
        return _teardown(self._engine._op_terminate({"deleteImage": delete_image}, timeout))

    def url(self, port: int, *, expires_minutes: int = 0, timeout: Optional[float] = None) -> PortURL:
        """The URL, headers and expiry that reach guest port `port`; expires_minutes is 1..60, 0 for 60."""
        return _port_url(self._engine._op_url({"port": port, "expiresMinutes": expires_minutes}, timeout))

    def cost(self, *, timeout: Optional[float] = None) -> CostReport:
        """What the run cost so far, from what the platform reports (also after terminate)."""
        return CostReport._from(self._engine._op_cost({}, timeout)["report"])

    def close(self, *, timeout: Optional[float] = None) -> None:
        """Let the sandbox go: one this process launched is terminated (a local
        one's emulator stops); the process's engine lives on for the next.
        timeout bounds the wait for that teardown (None: the engine's own
        budget, 120 s); past it TimeoutError is raised and the teardown goes
        on in the engine, which never abandons it. A second close does
        nothing."""
        if timeout is None:
            self._finalizer()
        elif self._finalizer.detach() is not None:
            self._engine.close(timeout, raise_timeout=True)

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class _KillingStream(ExecStream):
    """A run's stream: left before its exit, it kills the command it ran."""

    def __init__(self, engine: Engine, exec_id: str, events: Iterator[Any]) -> None:
        super().__init__(events)
        self._engine = engine
        self.exec_id = exec_id

    def __iter__(self) -> Iterator[StreamItem]:
        try:
            yield from super().__iter__()
        finally:
            if self.exit is None:
                self.close()
                try:
                    self._engine._op_kill({"execId": self.exec_id})
                except Exception:  # the engine or the VM is gone: nothing left to kill
                    pass


# asyncio: the same surface, each call awaiting the engine's answer. Cancelling
# a task that awaits a command (run, wait, a stream) kills that command.


class AsyncFiles:
    """Files on asyncio."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def write(self, path: str, data: Union[str, bytes], *, mode: Optional[str] = None) -> None:
        """Write a whole file (any size), creating its parents."""
        raw = data.encode() if isinstance(data, str) else bytes(data)
        if _sink.sockets_supported():
            # Through a Unix socket the engine dials, no host file first.
            await self._engine._asocket_write(_write_args(path, "", mode), raw)
            return
        tmp = _tempdir(len(raw))
        try:
            local = os.path.join(tmp, "data")
            with open(local, "wb") as f:
                f.write(raw)
            await self._engine._aop_write(_write_args(path, local, mode))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    async def upload(self, local: Union[str, "os.PathLike[str]"], path: str, *, mode: Optional[str] = None) -> int:
        """Copy one host file to path in the VM; returns its bytes."""
        return (await self._engine._aop_write(_write_args(path, os.fspath(local), mode)))["bytes"]

    async def download(self, path: str, local: Union[str, "os.PathLike[str]"], *, max_bytes: Optional[int] = None) -> int:
        """Files.download: up to max_bytes, else DEFAULT_MAX_DOWNLOAD_BYTES; returns its bytes."""
        return (await self._engine._aop_read(_read_args(path, os.fspath(local), max_bytes)))["bytes"]

    async def read_bytes(self, path: str, *, max_bytes: Optional[int] = None) -> bytes:
        """Files.read_bytes: the whole file, max_bytes bounding what this process takes."""
        extra = _max_args(max_bytes)
        size = _read_size(await self._engine._aop_stat({"path": path}))
        _refuse_over(path, size, max_bytes)
        if _sink.supported():
            return await self._engine._asink_read(path, size, extra)
        tmp = _tempdir(size)
        try:
            local = os.path.join(tmp, "data")
            await self._engine._aop_read(_read_args(path, local, max_bytes))
            with open(local, "rb") as f:
                return f.read()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    async def read(self, path: str, *, max_bytes: Optional[int] = None) -> str:
        """The whole file at path as UTF-8 text (max_bytes as read_bytes)."""
        return (await self.read_bytes(path, max_bytes=max_bytes)).decode()

    async def list(self, path: str, *, depth: int = 1) -> List[FileEntry]:
        """The entries under path, depth levels deep."""
        return _entries(await self._engine._aop_list({"path": path, "depth": depth}))

    async def stat(self, path: str) -> Optional[FileEntry]:
        """path's entry, or None when nothing is there."""
        return _stat(await self._engine._aop_stat({"path": path}))

    async def exists(self, path: str) -> bool:
        """Whether anything is at path."""
        return (await self._engine._aop_stat({"path": path}))["exists"]

    async def mkdir(self, path: str, *, mode: Optional[str] = None) -> bool:
        """Make a directory and its parents; False when it already was one."""
        args: c.MkdirArgs = {"path": path}
        if mode is not None:
            args["mode"] = mode
        return (await self._engine._aop_mkdir(args))["changed"]

    async def move(self, src: str, dst: str, *, replace: bool = False) -> None:
        """Rename src to dst."""
        await self._engine._aop_move({"from": src, "to": dst, "replace": replace})

    async def remove(self, path: str, *, recursive: bool = False) -> int:
        """Remove path; returns the entries removed."""
        return (await self._engine._aop_remove({"path": path, "recursive": recursive}))["count"]

    async def watch(self, path: str, *, recursive: bool = False) -> AsyncIterator[Union[FsEvent, Gap]]:
        """Changes under path as they happen; leave the `async for` to stop."""
        events = self._engine._aop_watch({"path": path, "recursive": recursive})
        try:
            async for ev in events:
                item = _fs_item(ev)
                if item is not None:
                    yield item
        finally:
            aclose = getattr(events, "aclose", None)
            if aclose is not None:
                await aclose()  # ends the engine's watch now, not when collected

    async def upload_dir(self, local: Union[str, "os.PathLike[str]"], remote: str) -> int:
        """Copy a local directory tree into the VM; returns the bytes of its files."""
        return (await self._engine._aop_upload_dir({"local": os.fspath(local), "remote": remote}))["bytes"]

    async def download_dir(self, remote: str, local: Union[str, "os.PathLike[str]"]) -> int:
        """Copy a VM directory tree into local, every entry confined beneath it."""
        return (await self._engine._aop_download_dir({"remote": remote, "local": os.fspath(local)}))["bytes"]


async def _kill_quietly(engine: AsyncEngine, exec_id: str) -> None:
    try:
        await engine._aop_kill({"execId": exec_id})
    except Exception:  # the engine or the VM is gone: nothing left to kill
        pass


class AsyncProcess:
    """Process on asyncio."""

    def __init__(self, engine: AsyncEngine, exec_id: str) -> None:
        self._engine = engine
        self.exec_id = exec_id

    def __repr__(self) -> str:
        return "AsyncProcess(%s)" % self.exec_id

    async def poll(self) -> ExecResult:
        """The record as it stands."""
        return ExecResult._from(await self._engine._aop_poll({"execId": self.exec_id}))

    async def wait(self, timeout: Optional[float] = None) -> ExecResult:
        """Wait for the exit; past timeout a timed_out result (the command runs on).
        Cancelling the awaiting task kills the command."""
        args: c.WaitArgs = {"execId": self.exec_id}
        if timeout is not None:
            args["timeoutSec"] = timeout
        try:
            return ExecResult._from(await self._engine._aop_wait(args))
        except asyncio.CancelledError:
            await asyncio.shield(_kill_quietly(self._engine, self.exec_id))
            raise

    def stream(self, offset: int = 0) -> AsyncExecStream:
        """The output from byte offset on, until the exit."""
        args: c.FollowArgs = {"execId": self.exec_id, "offset": offset}
        return AsyncExecStream(self._engine._asink_stream("follow", args) if _sink.supported() else self._engine._aop_follow(args))

    async def kill(self) -> bool:
        """SIGTERM then SIGKILL to the process group; False when it had already gone."""
        return (await self._engine._aop_kill({"execId": self.exec_id}))["done"]

    async def signal(self, name: str) -> bool:
        """Send one named signal once."""
        return (await self._engine._aop_signal({"execId": self.exec_id, "signal": name}))["done"]

    async def resize(self, rows: int, cols: int) -> None:
        """Resize a pty command's terminal."""
        await self._engine._aop_resize({"execId": self.exec_id, "rows": rows, "cols": cols})

    async def write_stdin(self, data: Union[str, bytes]) -> int:
        """Write to the command's stdin; returns the bytes taken."""
        raw = data.encode() if isinstance(data, str) else bytes(data)
        return (await self._engine._aop_stdin_write({"execId": self.exec_id,
                                                     "dataBase64": base64.b64encode(raw).decode()}))["bytes"]

    async def close_stdin(self) -> None:
        """Close the command's stdin."""
        await self._engine._aop_stdin_close({"execId": self.exec_id})


class _AsyncKillingStream(AsyncExecStream):
    """A run's stream on asyncio: left or cancelled before its exit, it kills the command."""

    def __init__(self, engine: AsyncEngine, exec_id: str, events: AsyncIterator[Any]) -> None:
        super().__init__(events)
        self._engine = engine
        self.exec_id = exec_id

    async def __aiter__(self) -> AsyncIterator[StreamItem]:
        try:
            async for item in super().__aiter__():
                yield item
        finally:
            if self.exit is None:
                await asyncio.shield(self._stop())

    async def _stop(self) -> None:
        await self.aclose()
        await _kill_quietly(self._engine, self.exec_id)


class AsyncSandbox:
    """Sandbox on asyncio, one engine per sandbox driven by one reader task.

    `async with await AsyncSandbox.create(local=True) as sb:`; local mode
    needs no AWS account and no root. Cancelling a task that awaits a
    command kills that command in the guest. A dead engine raises
    UnexpectedError naming it.
    """

    def __init__(self, engine: AsyncEngine, info: c.SandboxData) -> None:
        self._engine = engine
        self._info = info
        self.files = AsyncFiles(engine)
        self.checkpoints = AsyncCheckpoints(engine)
        self.volumes = AsyncVolumes(engine)

    @classmethod
    async def create(
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
        egress: bool = False,
        launch_env: Optional[Dict[str, str]] = None,
        max_idle_sec: Optional[int] = None,
        suspended_sec: Optional[int] = None,
        max_duration_sec: Optional[int] = None,
        keep_awake: bool = True,
        network_allow: Optional[Sequence[str]] = None,
        network_deny_all: bool = False,
        secrets: Optional[Mapping[str, Secret]] = None,
        volumes: Optional[Mapping[str, str]] = None,
        binary: Optional[str] = None,
    ) -> "AsyncSandbox":
        """Launch a MicroVM and wait until it runs (Sandbox.create's options)."""
        args = _create_args(local, image, image_version, region, control_endpoint, execution_role_arn, agent_token,
                            agentd, timeout_sec, egress, launch_env, max_idle_sec, suspended_sec, max_duration_sec)
        if not keep_awake:
            args["noKeepAwake"] = True
        _network_args(args, network_allow, network_deny_all, secrets)
        _volume_args(args, volumes)
        engine = await AsyncEngine.shared(binary)
        try:
            return cls(engine, await engine._aop_create(args))
        except BaseException:
            await asyncio.shield(engine.close())
            raise

    @classmethod
    async def build(
        cls,
        *,
        local: bool = False,
        dockerfile: Optional[Union[str, "os.PathLike[str]"]] = None,
        memory_mib: int = 0,
        base_image: Optional[str] = None,
        on_progress: Optional[Callable[[BuildProgress], None]] = None,
        region: Optional[str] = None,
        control_endpoint: Optional[str] = None,
        execution_role_arn: Optional[str] = None,
        agent_token: Optional[str] = None,
        agentd: Optional[str] = None,
        timeout_sec: Optional[float] = None,
        egress: bool = False,
        launch_env: Optional[Dict[str, str]] = None,
        max_idle_sec: Optional[int] = None,
        suspended_sec: Optional[int] = None,
        max_duration_sec: Optional[int] = None,
        binary: Optional[str] = None,
    ) -> "AsyncSandbox":
        """Sandbox.build on asyncio."""
        create = _create_args(local, None, None, region, control_endpoint, execution_role_arn, agent_token, agentd,
                              timeout_sec, egress, launch_env, max_idle_sec, suspended_sec, max_duration_sec)
        args = _build_args(local, dockerfile, memory_mib, base_image, create)
        engine = await AsyncEngine.shared(binary)
        try:
            info: Optional[c.SandboxData] = None
            async for ev in engine._aop_build(args):
                info = _progress(ev, on_progress) or info
            assert info is not None
            return cls(engine, info)
        except BaseException:
            await asyncio.shield(engine.close())
            raise

    @classmethod
    async def attach(cls, microvm_id: str, *, agent_token: str, control_endpoint: Optional[str] = None,
                     region: Optional[str] = None, binary: Optional[str] = None,
                     keep_awake: bool = True) -> "AsyncSandbox":
        """Reach a MicroVM another process launched, by its id and agent token."""
        args: c.AttachArgs = {"microvmId": microvm_id, "agentToken": agent_token}
        if not keep_awake:
            args["noKeepAwake"] = True
        if control_endpoint is not None:
            args["controlEndpoint"] = control_endpoint
        if region is not None:
            args["region"] = region
        engine = await AsyncEngine.shared(binary)
        try:
            return cls(engine, await engine._aop_attach(args))
        except BaseException:
            await asyncio.shield(engine.close())
            raise

    @classmethod
    async def restore(cls, checkpoint: str, *, control_endpoint: Optional[str] = None, region: Optional[str] = None,
                      image_version: Optional[str] = None, allow_other_version: bool = False,
                      execution_role_arn: Optional[str] = None, egress: bool = False, launch_env: Optional[Dict[str, str]] = None,
                      max_idle_sec: Optional[int] = None, suspended_sec: Optional[int] = None, max_duration_sec: Optional[int] = None,
                      network_allow: Optional[Sequence[str]] = None, network_deny_all: bool = False,
                      secrets: Optional[Mapping[str, "Secret"]] = None,
                      binary: Optional[str] = None) -> "AsyncSandbox":
        """Sandbox.restore on asyncio."""
        args: Dict[str, Any] = {"ref": checkpoint, "allowOtherVersion": allow_other_version}
        if execution_role_arn is not None:
            args["executionRoleArn"] = execution_role_arn
        _launch_into(args, egress, launch_env, max_idle_sec, suspended_sec, max_duration_sec, network_allow, network_deny_all, secrets)
        if control_endpoint is not None:
            args["controlEndpoint"] = control_endpoint
        if region is not None:
            args["region"] = region
        if image_version is not None:
            args["imageVersion"] = image_version
        engine = await AsyncEngine.shared(binary)
        try:
            return cls(engine, await engine._aop_restore(cast(c.RestoreArgs, args)))
        except BaseException:
            await asyncio.shield(engine.close())
            raise

    async def checkpoint(self, *, paths: Optional[Sequence[str]] = None, name: Optional[str] = None,
                         labels: Optional[Dict[str, str]] = None, pause: bool = True) -> c.CheckpointManifest:
        """Sandbox.checkpoint on asyncio."""
        d = await self._engine._aop_checkpoint(cast(c.CheckpointArgs, _save_args(paths, name, labels, pause)))
        assert d["checkpoint"] is not None
        return d["checkpoint"]

    async def fork(self, n: int, *, command: str = "", parallel: int = 0, timeout_sec: float = 0.0,
                   paths: Optional[Sequence[str]] = None, name: Optional[str] = None,
                   labels: Optional[Dict[str, str]] = None, pause: bool = True,
                   egress: bool = False, launch_env: Optional[Dict[str, str]] = None,
                   max_idle_sec: Optional[int] = None, suspended_sec: Optional[int] = None, max_duration_sec: Optional[int] = None,
                   network_allow: Optional[Sequence[str]] = None, network_deny_all: bool = False,
                   secrets: Optional[Mapping[str, "Secret"]] = None) -> "FleetResult":
        """Sandbox.fork on asyncio."""
        from .fleet import FleetResult, _fleet_outcome
        from .errors import MicrovmError
        args = _save_args(paths, name, labels, pause)
        args.update({"count": n, "parallel": parallel, "command": command, "timeoutSec": timeout_sec})
        _launch_into(args, egress, launch_env, max_idle_sec, suspended_sec, max_duration_sec, network_allow, network_deny_all, secrets)
        try:
            return FleetResult._from(await self._engine._aop_fork(cast(c.ForkArgs, args)))
        except MicrovmError as e:
            return _fleet_outcome(e)

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
        """Sandbox.endpoint: the VM's agentd URL as the platform gave it."""
        return self._info["endpoint"]

    @property
    def engine_pid(self) -> int:
        """The `microvm engine` child process's pid."""
        return self._engine.pid

    async def lifecycle(self) -> str:
        """The last state the platform confirmed."""
        self._info = await self._engine._aop_info({})
        return self._info["state"]

    @property
    def max_idle_seconds(self) -> int:
        """Sandbox.max_idle_seconds."""
        return self._info["maxIdleSeconds"]

    @property
    def ends_at(self) -> Optional[str]:
        """Sandbox.ends_at."""
        return self._info["endsAt"]

    async def hold_awake(self, for_sec: float, *, every_sec: Optional[float] = None) -> KeepaliveReport:
        """Sandbox.hold_awake on asyncio; cancelling the task stops the hold."""
        if for_sec <= 0:
            raise InvalidArgError("hold_awake takes for_sec > 0 seconds, not %r" % (for_sec,), "ERR_INVALID_ARG")
        args: c.KeepaliveArgs = {"forSec": for_sec}
        if every_sec is not None:
            args["everySec"] = every_sec
        d = await self._engine._aop_keepalive(args)
        return KeepaliveReport(d["microvmId"], d["pings"], d["heldSeconds"])

    async def network(self) -> c.NetworkState:
        """Sandbox.network on asyncio."""
        return (await self._engine._aop_network_show({}))["network"]

    async def set_network_policy(self, allow: Sequence[str], *, deny_all: bool = False) -> c.NetworkState:
        """Sandbox.set_network_policy on asyncio."""
        return (await self._engine._aop_network_set(_network_set_args(allow, deny_all)))["network"]

    def __repr__(self) -> str:
        return "AsyncSandbox(%s)" % self._info["microvmId"]

    async def run(self, cmd: Command, *, cwd: Optional[str] = None, env: Optional[Dict[str, str]] = None,
                  timeout_sec: Optional[float] = None, exec_id: Optional[str] = None, user: Optional[int] = None,
                  group: Optional[int] = None, limits: Optional[Dict[str, int]] = None) -> ExecResult:
        """Sandbox.run (limits and usage included); cancelling the awaiting task kills the command."""
        args = _exec_args(cmd, cwd, env, timeout_sec, exec_id, user, group, limits)
        try:
            return ExecResult._from(await self._engine._aop_run(args))
        except asyncio.CancelledError:
            await asyncio.shield(_kill_quietly(self._engine, args["execId"]))
            raise

    def stream(self, cmd: Command, *, cwd: Optional[str] = None, env: Optional[Dict[str, str]] = None,
               timeout_sec: Optional[float] = None, exec_id: Optional[str] = None, user: Optional[int] = None,
               group: Optional[int] = None, limits: Optional[Dict[str, int]] = None) -> AsyncExecStream:
        """Sandbox.stream; leaving the `async for` early, or cancelling it, kills the command."""
        args = _exec_args(cmd, cwd, env, timeout_sec, exec_id, user, group, limits)
        sargs = cast(c.StreamArgs, args)  # the same keys; a sink is added by _asink_stream
        events = self._engine._asink_stream("stream", sargs) if _sink.supported() else self._engine._aop_stream(sargs)
        return _AsyncKillingStream(self._engine, args["execId"], events)

    async def start(self, cmd: Command, *, cwd: Optional[str] = None, env: Optional[Dict[str, str]] = None,
                    timeout_sec: Optional[float] = None, exec_id: Optional[str] = None, user: Optional[int] = None,
                    group: Optional[int] = None, stdin: bool = False,
                    pty: Optional["tuple[int, int]"] = None, limits: Optional[Dict[str, int]] = None) -> AsyncProcess:
        """Start a command in the background (Sandbox.start)."""
        args = _start_args(cmd, cwd, env, timeout_sec, exec_id, user, group, stdin, pty, limits)
        return AsyncProcess(self._engine, (await self._engine._aop_start(args))["execId"])

    def process(self, exec_id: str) -> AsyncProcess:
        """The handle of a command started earlier, by its exec id."""
        return AsyncProcess(self._engine, exec_id)

    async def processes(self) -> List[Dict[str, Any]]:
        """Every exec the guest's agentd holds."""
        return [x for x in (await self._engine._aop_execs({}))["execs"]]

    async def health(self) -> Dict[str, Any]:
        """agentd's health answer."""
        return (await self._engine._aop_health({}))["probe"]

    async def metrics(self) -> Dict[str, Any]:
        """The guest's CPU, memory, load and disk."""
        return (await self._engine._aop_metrics({}))["probe"]

    async def suspend(self) -> str:
        """Freeze the VM. Returns the new state."""
        return (await self._engine._aop_suspend({}))["state"]

    async def resume(self) -> str:
        """Thaw a suspended VM. Returns the new state."""
        return (await self._engine._aop_resume({}))["state"]

    async def terminate(self, *, delete_image: bool = False) -> TeardownReport:
        """Tear the VM down; never raises for what it could not delete."""
        return _teardown(await self._engine._aop_terminate({"deleteImage": delete_image}))

    async def url(self, port: int, *, expires_minutes: int = 0) -> PortURL:
        """The URL, headers and expiry that reach guest port `port`."""
        return _port_url(await self._engine._aop_url({"port": port, "expiresMinutes": expires_minutes}))

    async def cost(self) -> CostReport:
        """What the run cost so far."""
        return CostReport._from((await self._engine._aop_cost({}))["report"])

    async def close(self) -> None:
        """Let the sandbox go: one this process launched is terminated (a local
        one's emulator stops); the loop's engine lives on for the next."""
        await self._engine.close()

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await asyncio.shield(self.close())
