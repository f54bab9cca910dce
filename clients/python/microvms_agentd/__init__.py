"""Python client of the microvms agentd wire protocol v1.

models and client are generated from api/openapi.yaml by `make gen` (never
edit them); stream holds the one piece a generator cannot derive from the
contract: resuming an output stream from the next unread byte, starting an
exec through the run route and reading binary frames where the daemon offers
them. Standard library
only.
"""

from . import models
from .client import ApiError, Client, EventStream, Frame, FrameCut, FrameError, FrameReader, FrameStream
from .stream import OutputChunk, StreamCut, events, follow, next_offset, offers_frames, offers_run, output_bytes, run

__all__ = [
    "ApiError", "Client", "EventStream", "Frame", "FrameCut", "FrameError", "FrameReader", "FrameStream", "OutputChunk",
    "StreamCut", "events", "follow", "models", "next_offset", "offers_frames", "offers_run", "output_bytes", "run",
]
