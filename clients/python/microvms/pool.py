"""Pool and AsyncPool: the Go library's warm pool (sandbox.Pool), held by one
`microvm engine`. Members wait launched and suspended, so an acquire costs
a resume; an acquired member is a Sandbox attached under its own handle on
the process's shared engine, and leaving its block (or release) terminates
it: a member is never put back, the pool launches a fresh one in its place.

    from microvms import Pool
    with Pool.open(size=2, local=True) as pool:
        pool.wait_ready(timeout=120)
        with pool.acquire() as sb:
            print(sb.run("echo hi").stdout)
"""
import asyncio
from dataclasses import dataclass
from typing import Any, AsyncIterator, Dict, Iterator, List, Optional
from contextlib import asynccontextmanager, contextmanager

from . import _contract as c
from ._engine import AsyncEngine, Engine
from .sandbox import AsyncSandbox, CostReport, Sandbox, TeardownReport, _create_args, _teardown


@dataclass(frozen=True)
class PoolStatus:
    """The pool as its engine last saw it."""

    size: int
    ready: int  # members launched, suspended and waiting
    served: int  # members handed out so far
    closed: bool
    leaked: List[str]  # after close: what members' teardowns could not delete

    @classmethod
    def _from(cls, d: c.PoolData) -> "PoolStatus":
        return cls(d["size"], d["ready"], d["served"], d["closed"], list(d["leaked"]))


def _open_args(size: int, refill: int, local: bool, image: Optional[str], image_version: Optional[str],
               region: Optional[str], control_endpoint: Optional[str], execution_role_arn: Optional[str],
               agentd: Optional[str], egress: bool, launch_env: Optional[Dict[str, str]], max_idle_sec: Optional[int],
               suspended_sec: Optional[int], max_duration_sec: Optional[int]) -> c.PoolOpenArgs:
    create = _create_args(local, image, image_version, region, control_endpoint, execution_role_arn, None, agentd,
                          None, egress, launch_env, max_idle_sec, suspended_sec, max_duration_sec)
    args: Dict[str, Any] = dict(create)
    args["size"], args["refill"] = size, refill
    return args  # type: ignore[return-value]


class Pool:
    """A warm pool of sandboxes of one image (sync). Every blocking call takes timeout."""

    def __init__(self, engine: Engine, data: c.PoolData, binary: Optional[str]) -> None:
        self._engine = engine
        self._data = data
        self._binary = binary
        self._final: Optional[PoolStatus] = None

    @classmethod
    def open(cls, *, size: int, refill: int = 0, local: bool = False, image: Optional[str] = None,
             image_version: Optional[str] = None, region: Optional[str] = None,
             control_endpoint: Optional[str] = None, execution_role_arn: Optional[str] = None,
             agentd: Optional[str] = None, egress: bool = False, launch_env: Optional[Dict[str, str]] = None,
             max_idle_sec: Optional[int] = None, suspended_sec: Optional[int] = None,
             max_duration_sec: Optional[int] = None, binary: Optional[str] = None,
             timeout: Optional[float] = None) -> "Pool":
        """Start filling a pool of size members in the background; returns at once."""
        args = _open_args(size, refill, local, image, image_version, region, control_endpoint, execution_role_arn,
                          agentd, egress, launch_env, max_idle_sec, suspended_sec, max_duration_sec)
        engine = Engine(binary)
        try:
            return cls(engine, engine._op_pool_open(args, timeout), binary)
        except BaseException:
            engine.close()
            raise

    def wait_ready(self, timeout: Optional[float] = None) -> PoolStatus:
        """Wait until the pool is full; past timeout, the status says how full it got."""
        args: c.PoolWaitReadyArgs = {}
        if timeout is not None:
            args["timeoutSec"] = timeout
        self._data = self._engine._op_pool_wait_ready(args)
        return PoolStatus._from(self._data)

    def take(self, *, timeout: Optional[float] = None) -> Sandbox:
        """One member, RUNNING, attached through this process's shared engine; release() it when done."""
        d = self._engine._op_pool_acquire({}, timeout)
        return Sandbox.attach(d["microvmId"], agent_token=d["agentToken"], control_endpoint=d["controlEndpoint"],
                              region=d["region"], binary=self._binary)

    def release(self, sb: Sandbox, *, timeout: Optional[float] = None) -> TeardownReport:
        """Terminate a member take() handed out (it is never put back)."""
        sb.close()
        return _teardown(self._engine._op_pool_release({"microvmId": sb.microvm_id}, timeout))

    @contextmanager
    def acquire(self, *, timeout: Optional[float] = None) -> Iterator[Sandbox]:
        """`with pool.acquire() as sb:` a member, released when the block ends."""
        sb = self.take(timeout=timeout)
        try:
            yield sb
        finally:
            self.release(sb)

    def cost(self, *, timeout: Optional[float] = None) -> CostReport:
        """What the pool's whole life cost so far, every member included."""
        return CostReport._from(self._engine._op_pool_cost({}, timeout)["report"])

    def close(self, *, timeout: Optional[float] = None) -> PoolStatus:
        """Stop the refill and tear down every member; then end the engine. A second close returns the first's status."""
        if self._final is None:
            try:
                self._final = PoolStatus._from(self._engine._op_pool_close({}, timeout))
            finally:
                self._engine.close()
        return self._final

    def __enter__(self) -> "Pool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class AsyncPool:
    """Pool on asyncio."""

    def __init__(self, engine: AsyncEngine, data: c.PoolData, binary: Optional[str]) -> None:
        self._engine = engine
        self._data = data
        self._binary = binary
        self._final: Optional[PoolStatus] = None

    @classmethod
    async def open(cls, *, size: int, refill: int = 0, local: bool = False, image: Optional[str] = None,
                   image_version: Optional[str] = None, region: Optional[str] = None,
                   control_endpoint: Optional[str] = None, execution_role_arn: Optional[str] = None,
                   agentd: Optional[str] = None, egress: bool = False, launch_env: Optional[Dict[str, str]] = None,
                   max_idle_sec: Optional[int] = None, suspended_sec: Optional[int] = None,
                   max_duration_sec: Optional[int] = None, binary: Optional[str] = None) -> "AsyncPool":
        """Start filling a pool of size members in the background."""
        args = _open_args(size, refill, local, image, image_version, region, control_endpoint, execution_role_arn,
                          agentd, egress, launch_env, max_idle_sec, suspended_sec, max_duration_sec)
        engine = await AsyncEngine.start(binary)
        try:
            return cls(engine, await engine._aop_pool_open(args), binary)
        except BaseException:
            await asyncio.shield(engine.close())
            raise

    async def wait_ready(self, timeout: Optional[float] = None) -> PoolStatus:
        """Wait until the pool is full; past timeout, the status says how full it got."""
        args: c.PoolWaitReadyArgs = {}
        if timeout is not None:
            args["timeoutSec"] = timeout
        self._data = await self._engine._aop_pool_wait_ready(args)
        return PoolStatus._from(self._data)

    async def take(self) -> AsyncSandbox:
        """One member, RUNNING, attached through this process's shared engine; release() it when done."""
        d = await self._engine._aop_pool_acquire({})
        return await AsyncSandbox.attach(d["microvmId"], agent_token=d["agentToken"],
                                         control_endpoint=d["controlEndpoint"], region=d["region"],
                                         binary=self._binary)

    async def release(self, sb: AsyncSandbox) -> TeardownReport:
        """Terminate a member take() handed out."""
        await sb.close()
        return _teardown(await self._engine._aop_pool_release({"microvmId": sb.microvm_id}))

    @asynccontextmanager
    async def acquire(self) -> AsyncIterator[AsyncSandbox]:
        """`async with pool.acquire() as sb:` a member, released when the block ends."""
        sb = await self.take()
        try:
            yield sb
        finally:
            await asyncio.shield(self.release(sb))

    async def cost(self) -> CostReport:
        """What the pool's whole life cost so far, every member included."""
        return CostReport._from((await self._engine._aop_pool_cost({}))["report"])

    async def close(self) -> PoolStatus:
        """Stop the refill and tear down every member; then end the engine. A second close returns the first's status."""
        if self._final is None:
            try:
                self._final = PoolStatus._from(await self._engine._aop_pool_close({}))
            finally:
                await asyncio.shield(self._engine.close())
        return self._final

    async def __aenter__(self) -> "AsyncPool":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await asyncio.shield(self.close())


__all__ = ["Pool", "AsyncPool", "PoolStatus"]
