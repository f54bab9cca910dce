"""Many sandboxes in one call: the CLI's `run --count`, from Python.

    from microvms import run_many
    fleet = run_many("hostname", count=6, parallel=3, local=True)
    for r in fleet.runs:
        print(r.microvm_id, r.exit_code, r.stdout.strip())

One `microvm engine` runs the fleet with the Go library's own code
(sandbox.RunMany behind `run --count`): the bounds, the teardown of every
MicroVM (on an interrupt too), one cost report for the fleet. A command's
non-zero exit is a result in its run, not an exception.
"""
import asyncio
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, cast

from . import _contract as c
from ._engine import AsyncEngine, Engine
from ._contract import RunFleetData, RunManyArgs
from .errors import MicrovmError
from .sandbox import CostReport, Secret, _launch_into


@dataclass(frozen=True)
class FleetRun:
    """One MicroVM of a fleet: its command's outcome, or why it had none."""

    index: int
    microvm_id: str
    exit_code: Optional[int]
    stdout: str
    stderr: str
    truncated: bool
    # "" when the command exited 0; ERR_EXEC_FAILED when it exited non-zero
    # (exit_code says how); another code when the MicroVM never ran it.
    error_code: str
    error: str

    @property
    def ok(self) -> bool:
        return self.error_code == "" and self.exit_code == 0


@dataclass(frozen=True)
class FleetResult:
    """What run_many reports: a run per MicroVM, in launch order, and one cost."""

    image_identifier: str
    runs: List[FleetRun]
    leaked: List[str]
    cost: Optional[CostReport]

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.runs) and not self.leaked

    @classmethod
    def _from(cls, d: c.RunFleetData) -> "FleetResult":
        runs = [
            FleetRun(r["index"], r["microvmId"], r.get("exitCode"), r["stdout"], r["stderr"], r["truncated"],
                     r.get("code", ""), r.get("error", ""))
            for r in d["runs"]
        ]
        cost = d.get("cost")
        return cls(d["imageIdentifier"], runs, list(d["leaked"]), CostReport._from(cost) if cost else None)


def _fleet_args(command: str, count: int, parallel: int, local: bool, image: str, region: str,
                control_endpoint: str, execution_role_arn: str, agentd: str, timeout_sec: float) -> RunManyArgs:
    return {
        "count": count, "parallel": parallel, "command": command, "local": local, "image": image,
        "region": region, "controlEndpoint": control_endpoint, "executionRoleArn": execution_role_arn,
        "agentd": agentd, "timeoutSec": timeout_sec,
    }


def _fleet_outcome(e: MicrovmError) -> FleetResult:
    # The fleet ran; a run's command exited non-zero (ERR_EXEC_FAILED),
    # which is the worst outcome by the exit table: still a result.
    if e.code == "ERR_EXEC_FAILED" and isinstance(e.data.get("runs"), list):
        return FleetResult._from(cast(RunFleetData, e.data))
    raise e


def run_many(
    command: str,
    count: int,
    *,
    parallel: int = 0,
    local: bool = False,
    image: str = "",
    region: str = "",
    control_endpoint: str = "",
    execution_role_arn: str = "",
    agentd: str = "",
    timeout_sec: float = 0.0,
    egress: bool = False,
    launch_env: Optional[Dict[str, str]] = None,
    max_idle_sec: Optional[int] = None,
    suspended_sec: Optional[int] = None,
    max_duration_sec: Optional[int] = None,
    network_allow: Optional[Sequence[str]] = None,
    network_deny_all: bool = False,
    secrets: Optional[Mapping[str, Secret]] = None,
    binary: Optional[str] = None,
) -> FleetResult:
    """Run `command` (through /bin/sh -c) in `count` MicroVMs, at most
    `parallel` alive at once (0: the default), each torn down after; each
    launched with the launch options given (egress through secrets, as
    Sandbox.create's).

    Commands that exit non-zero are results (FleetRun.exit_code); a fleet
    that could not run at all (bad bounds, no image, no credentials) raises
    the typed error the CLI would exit with."""
    args = _fleet_args(command, count, parallel, local, image, region, control_endpoint, execution_role_arn,
                       agentd, timeout_sec)
    _launch_into(cast(Dict[str, Any], args), egress, launch_env, max_idle_sec, suspended_sec, max_duration_sec,
                 network_allow, network_deny_all, secrets)
    engine = Engine(binary)
    try:
        try:
            return FleetResult._from(engine._op_run_many(args))
        except MicrovmError as e:
            return _fleet_outcome(e)
    finally:
        engine.close()


async def run_many_async(
    command: str,
    count: int,
    *,
    parallel: int = 0,
    local: bool = False,
    image: str = "",
    region: str = "",
    control_endpoint: str = "",
    execution_role_arn: str = "",
    agentd: str = "",
    timeout_sec: float = 0.0,
    egress: bool = False,
    launch_env: Optional[Dict[str, str]] = None,
    max_idle_sec: Optional[int] = None,
    suspended_sec: Optional[int] = None,
    max_duration_sec: Optional[int] = None,
    network_allow: Optional[Sequence[str]] = None,
    network_deny_all: bool = False,
    secrets: Optional[Mapping[str, Secret]] = None,
    binary: Optional[str] = None,
) -> FleetResult:
    """run_many on asyncio: its own engine, awaited; cancelling the task ends
    the engine, which tears down every MicroVM of the fleet."""
    args = _fleet_args(command, count, parallel, local, image, region, control_endpoint, execution_role_arn,
                       agentd, timeout_sec)
    _launch_into(cast(Dict[str, Any], args), egress, launch_env, max_idle_sec, suspended_sec, max_duration_sec,
                 network_allow, network_deny_all, secrets)
    engine = await AsyncEngine.start(binary)
    try:
        try:
            return FleetResult._from(await engine._aop_run_many(args))
        except MicrovmError as e:
            return _fleet_outcome(e)
    finally:
        await asyncio.shield(engine.close())


__all__ = ["run_many", "run_many_async", "FleetResult", "FleetRun"]
