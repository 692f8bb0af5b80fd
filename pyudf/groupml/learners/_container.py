"""A JSON header followed by an opaque body: the payload of the mlp and lightgbm models.

Layout::

    len(header)   4 bytes, big-endian
    header        UTF-8 JSON object (family, params, n_features, ...)
    body          torch.save bytes (read with weights_only=True) or LightGBM model text

Never pickle: the header is JSON and each body is read by a loader that cannot run code.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Tuple

from ..errors import ModelFormatError

_HINT = ("The bytes are not a groupml model (or were truncated or written by a newer "
         "version); retrain the model or load the value stored by learn_over_groups.")
MAX_HEADER = 1 << 24


def pack(header: Dict[str, Any], body: bytes) -> bytes:
    h = json.dumps(header, sort_keys=True, allow_nan=False).encode("utf-8")
    return len(h).to_bytes(4, "big") + h + bytes(body)


def unpack(payload: bytes, what: str) -> Tuple[Dict[str, Any], bytes]:
    """Split a payload; raise ModelFormatError for anything malformed."""
    payload = bytes(payload)
    if len(payload) < 4:
        raise ModelFormatError(f"The {what} is truncated", hint=_HINT)
    n = int.from_bytes(payload[:4], "big")
    if n > MAX_HEADER or len(payload) < 4 + n:
        raise ModelFormatError(f"The {what} is truncated", hint=_HINT)
    try:
        header = json.loads(payload[4:4 + n].decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ModelFormatError(f"The {what} has a corrupt header", hint=_HINT) from None
    if not isinstance(header, dict):
        raise ModelFormatError(f"The {what} has a corrupt header", hint=_HINT)
    return header, payload[4 + n:]


def bad(what: str, why: str) -> ModelFormatError:
    return ModelFormatError(f"The {what} is invalid: {why}", hint=_HINT)
