"""Python client of the microvms agentd wire protocol v1.

models and client are generated from api/openapi.yaml by `make gen` (never
edit them); stream holds the one piece a generator cannot derive from the
contract: resuming an output stream from the next unread byte, and starting
an exec through the run route where the daemon offers it. Standard library
only.
"""

from . import models
from .client import ApiError, Client, EventStream
from .stream import StreamCut, follow, next_offset, offers_run, run

__all__ = ["ApiError", "Client", "EventStream", "StreamCut", "follow", "models", "next_offset", "offers_run", "run"]
