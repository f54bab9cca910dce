"""What a platform wheel carries beside the Python code, and where it is (public: `microvms.packaged`).

`make dist` builds one wheel per Linux architecture holding the static
`microvm`, `agentd` and `microvm-guest-init` binaries in microvms/_bin, and every wheel (pure or
platform) holds the botocore model in microvms/_botocore. This module only
locates them; it must never download, build or choose a binary for another
architecture. A wheel built from a clone (`pip install ./clients/python`)
has no _bin, and then the binary is found as before ($MICROVM_BIN, PATH).
"""
import os
from typing import Optional

_HERE = os.path.dirname(os.path.abspath(__file__))


def bundled_binary() -> Optional[str]:
    """The microvm binary this wheel carries, or None (a wheel built from a clone has none).

    The agentd beside it is found by microvm itself (it looks next to its own executable),
    and the local guests' init beside that agentd.
    """
    path = os.path.join(_HERE, "_bin", "microvm")
    return path if os.path.isfile(path) and os.access(path, os.X_OK) else None


def botocore_data_path() -> str:
    """The directory holding the lambda-microvms botocore model, for $AWS_DATA_PATH.

    Installed from a wheel it is inside the package; from a clone (an editable
    install) it is the generated model under clients/botocore.
    """
    for path in (os.path.join(_HERE, "_botocore"), os.path.join(os.path.dirname(os.path.dirname(_HERE)), "botocore")):
        if os.path.isdir(os.path.join(path, "lambda-microvms")):
            return path
    raise FileNotFoundError("the lambda-microvms botocore model is not in this install (looked in microvms/_botocore)")
