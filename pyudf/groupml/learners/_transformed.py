"""A model with its raw-column transform (kind ``xform``): what train_groups stores when it
encoded raw columns, so scoring applies the same encoding.

Payload: a 4-byte big-endian length, the inner model's own bytes (any registered kind), then
the transform's JSON (:meth:`Transform.to_json`). The inner model comes first so that the
bytes the scoring cache keys on (a model's length and first 2 kB,
:data:`groupml.udf.predict.KEY_PREFIX`) tell apart the models of one run, which share their
transform. Nothing is unpickled.
"""

from __future__ import annotations

import struct

from ..errors import ModelFormatError
from ._model import load_model, pack_model, register_loader

KIND = "xform"
MAX_TRANSFORM_BYTES = 16 << 20


class TransformedModel:
    """The inner model (its ``n_features`` is the transform's width: ``predict(fit, float8[])``
    takes the encoded vector) and ``transform``; every other attribute is the inner model's."""

    def __init__(self, transform, inner):
        self.transform = transform
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.__dict__["inner"], name)

    def to_bytes(self) -> bytes:
        return wrap(self.inner.to_bytes(), self.transform)


def wrap(model_bytes: bytes, transform) -> bytes:
    """``model_bytes`` (a groupml model) stored with ``transform``."""
    inner = bytes(model_bytes)
    return pack_model(KIND, struct.pack(">I", len(inner)) + inner + transform.to_json().encode("utf-8"))


def _load(payload: bytes) -> TransformedModel:
    from ..transforms import Transform

    if len(payload) < 4:
        raise ModelFormatError("The groupml model of kind 'xform' is truncated",
                               hint="Retrain the model or load the value stored by train_groups.")
    n = struct.unpack(">I", payload[:4])[0]
    if len(payload) < 4 + n or len(payload) - 4 - n > MAX_TRANSFORM_BYTES:
        raise ModelFormatError("The groupml model of kind 'xform' is truncated",
                               hint="Retrain the model or load the value stored by train_groups.")
    transform = Transform.from_json(payload[4 + n:].decode("utf-8"))
    inner = load_model(payload[4:4 + n])
    if isinstance(inner, TransformedModel) or transform.width != int(inner.n_features):
        raise ModelFormatError("The transform stored with the model does not match it",
                               hint="Retrain the model or load the value stored by train_groups.")
    return TransformedModel(transform, inner)


register_loader(KIND, _load)
