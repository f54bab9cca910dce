"""Typed errors: one class per error code of api/errors.yaml.

Every failure the engine reports is the CLI's failure envelope, so an error
carries the generated `code` (ERR_*), its `kind`, the `exit_code` the CLI
would exit with, the daemon's `wire_kind` when one produced it, and the
docs/PLATFORM.md `finding` behind a local refusal. Branch on the class or on
`code`, never on the message.
"""
from typing import Any, Dict, Mapping, Optional, Type

from ._contract import ERROR_KINDS, FailureEnvelope


class MicrovmError(Exception):
    """Base of every exception this package raises."""

    code: str
    kind: str
    exit_code: int
    wire_kind: Optional[str]
    finding: str
    finding_slug: str
    data: Dict[str, Any]

    def __init__(
        self,
        message: str,
        code: str,
        *,
        wire_kind: Optional[str] = None,
        finding: str = "",
        finding_slug: str = "",
        data: Optional[Mapping[str, Any]] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        kind, exit_code = ERROR_KINDS.get(code, ("Unexpected", ERROR_KINDS["ERR_UNEXPECTED"][1]))
        self.kind, self.exit_code = kind, exit_code
        self.wire_kind = wire_kind
        self.finding, self.finding_slug = finding, finding_slug
        self.data = dict(data or {})

    @property
    def retryable(self) -> bool:
        """Whether running the identical request again may succeed."""
        return self.code == "ERR_RETRYABLE"

    def __repr__(self) -> str:
        return "%s(code=%r, exit_code=%d, wire_kind=%r, message=%r)" % (
            type(self).__name__, self.code, self.exit_code, self.wire_kind, self.message)


class UnexpectedError(MicrovmError):
    """ERR_UNEXPECTED: a bug in this client, not the platform."""


class InvalidArgError(MicrovmError):
    """ERR_INVALID_ARG: refused locally, before anything was sent."""


class RetryableError(MicrovmError):
    """ERR_RETRYABLE: transient; run the identical request again."""


class CredentialsError(MicrovmError):
    """ERR_CREDENTIALS: an identity or token is wrong or absent."""


class ProtocolError(MicrovmError):
    """ERR_PROTOCOL: the daemon refused the request; `wire_kind` says how (NotFound, Conflict...)."""


class BuildWedgedError(MicrovmError):
    """ERR_BUILD_WEDGED: the image build was never scheduled."""


class LaunchDiedError(MicrovmError):
    """ERR_LAUNCH_DIED: the MicroVM reached a terminal state before RUNNING."""


class WindowClosedError(MicrovmError):
    """ERR_WINDOW_CLOSED: the suspended window passed; nothing is left to resume."""


class PlatformError(MicrovmError):
    """ERR_PLATFORM: a control-plane failure with no more specific class."""


class TimeoutError(MicrovmError):  # noqa: A001 - the reference's name
    """ERR_TIMEOUT: a client-side deadline passed; the VM and the exec are untouched."""


class InterruptedError(MicrovmError):  # noqa: A001 - the reference's name
    """ERR_INTERRUPTED: interrupted after launch; teardown ran."""


class PreconditionError(MicrovmError):
    """ERR_PRECONDITION: a prerequisite is missing (the microvm binary, an agentd for local mode...)."""


class ExecFailedError(MicrovmError):
    """ERR_EXEC_FAILED: the command's outcome is unknown (a stream ended without its exit)."""


class CheckpointRefusedError(MicrovmError):
    """ERR_CHECKPOINT_REFUSED: a checkpoint was refused before any file of it landed (truncated, corrupted, foreign, or another image version)."""


# The class of each code; tests hold it to the generated ERROR_KINDS.
ERROR_CLASSES: Dict[str, Type[MicrovmError]] = {
    "ERR_UNEXPECTED": UnexpectedError,
    "ERR_INVALID_ARG": InvalidArgError,
    "ERR_RETRYABLE": RetryableError,
    "ERR_CREDENTIALS": CredentialsError,
    "ERR_PROTOCOL": ProtocolError,
    "ERR_BUILD_WEDGED": BuildWedgedError,
    "ERR_LAUNCH_DIED": LaunchDiedError,
    "ERR_WINDOW_CLOSED": WindowClosedError,
    "ERR_PLATFORM": PlatformError,
    "ERR_TIMEOUT": TimeoutError,
    "ERR_INTERRUPTED": InterruptedError,
    "ERR_PRECONDITION": PreconditionError,
    "ERR_EXEC_FAILED": ExecFailedError,
    "ERR_CHECKPOINT_REFUSED": CheckpointRefusedError,
}


def from_envelope(env: FailureEnvelope) -> MicrovmError:
    """The typed error a failure envelope describes."""
    data = env["data"] if isinstance(env.get("data"), dict) else {}
    kind = data.get("kind")
    cls = ERROR_CLASSES.get(env["code"], UnexpectedError)
    return cls(
        env["error"],
        env["code"],
        wire_kind=kind if isinstance(kind, str) else None,
        finding=env["finding"],
        finding_slug=env["findingSlug"],
        data=data,
    )
