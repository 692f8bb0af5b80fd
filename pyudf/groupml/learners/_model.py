"""Fitted GLM models and the safe model format.

Wire format of every groupml model (never pickle)::

    b"GROUPML\\x00"  magic (8 bytes)
    version          1 byte (currently 1)
    len(kind)        1 byte
    kind             ASCII, e.g. b"glm"; selects the loader in the registry
    payload          kind-specific; for "glm" an ``np.savez`` archive holding
                     ``coef`` (d,), ``intercept`` () float64 and ``header``, a
                     UTF-8 JSON document stored as a uint8 array

Loaders are registered per *kind* with :func:`register_loader`; later learners
(torch state dicts, LightGBM text models) add their own kind without touching
this module's callers, who only call :func:`load_model`.
"""

from __future__ import annotations

import io
import json
import math
from typing import Any, Callable, Dict, Mapping

import numpy as np

from ..errors import (ArrayLengthError, DatatypeMismatchError, FeatureNotSupportedError, GroupmlError,
                      ModelFormatError)

MAGIC = b"GROUPML\x00"
FORMAT_VERSION = 1
#: Unpacked size of a GLM model's arrays that is read at most: 2^24 float64 weights and
#: room for the header (groupml writes them stored, never compressed)
MAX_GLM_BYTES = 8 * (1 << 24) + (1 << 20)

_HINT = ("The bytes are not a groupml model (or were truncated or written by a newer "
         "version); retrain the model or load the value stored by learn_over_groups.")

_LOADERS: Dict[str, Callable[[bytes], Any]] = {}


def register_loader(kind: str, loader: Callable[[bytes], Any]) -> None:
    """Register ``loader(payload: bytes) -> model`` for models written with ``kind``."""
    if not kind.isascii() or not 0 < len(kind) < 256:
        raise ValueError("model kind must be 1..255 ASCII characters")
    _LOADERS[kind] = loader


def pack_model(kind: str, payload: bytes) -> bytes:
    """Prefix ``payload`` with the magic, version and kind."""
    k = kind.encode("ascii")
    return MAGIC + bytes([FORMAT_VERSION, len(k)]) + k + payload


def load_model(data: bytes):
    """Decode bytes written by any registered model's ``to_bytes``.

    Garbage, truncated or foreign bytes raise :class:`ModelFormatError`.
    """
    if isinstance(data, memoryview):
        data = data.tobytes()
    if not isinstance(data, (bytes, bytearray)):
        raise ModelFormatError(f"A model must be given as bytes; got {type(data).__name__}",
                               hint=_HINT)
    data = bytes(data)
    if len(data) < len(MAGIC) + 2 or not data.startswith(MAGIC):
        raise ModelFormatError("The value is not a groupml model (missing magic prefix)",
                               hint=_HINT)
    pos = len(MAGIC)
    version, klen = data[pos], data[pos + 1]
    if version != FORMAT_VERSION:
        raise ModelFormatError(f"Unsupported groupml model format version {version}; "
                               f"this installation reads version {FORMAT_VERSION}", hint=_HINT)
    kind_bytes = data[pos + 2: pos + 2 + klen]
    if len(kind_bytes) != klen:
        raise ModelFormatError("The groupml model is truncated", hint=_HINT)
    try:
        kind = kind_bytes.decode("ascii")
    except UnicodeDecodeError:
        raise ModelFormatError("The groupml model has a corrupt kind field", hint=_HINT) from None
    loader = _LOADERS.get(kind)
    if loader is None:
        raise ModelFormatError(f"Unknown groupml model kind {kind!r}",
                               hint=f"This installation reads kinds {', '.join(sorted(_LOADERS))}; "
                                    "upgrade groupml or retrain the model.")
    payload = data[pos + 2 + klen:]
    try:
        return loader(payload)
    except (ModelFormatError, MemoryError):
        raise                 # out of memory is sql_entry's 53200, not a corrupt model
    except Exception as exc:  # any decoding failure of untrusted bytes
        # a cancel noticed while a model was checked, an SPI error; a groupml error of the
        # loader (a header's parameter out of range) is a corrupt model
        if getattr(exc, "sqlstate", None) and not isinstance(exc, GroupmlError):
            raise
        raise ModelFormatError(f"The groupml model of kind {kind!r} cannot be decoded: "
                               f"{type(exc).__name__}", hint=_HINT) from None


def check_matrix(X, n_features: int) -> np.ndarray:
    """Rows to predict on as a float64 matrix with ``n_features`` columns (a vector is one row)."""
    try:
        X = np.asarray(X, dtype=np.float64)
    except (TypeError, ValueError):
        raise DatatypeMismatchError("Features must be numbers",
                                    hint="Pass a float8[] (or a 2-D numeric array).") from None
    if X.ndim == 1:
        X = X.reshape(1, -1)
    if X.ndim != 2:
        raise DatatypeMismatchError(f"Features must be a vector or a matrix; got {X.ndim} "
                                    "dimensions", hint="Pass one row or a 2-D array of rows.")
    if X.shape[1] != n_features:
        raise ArrayLengthError(
            f"The model expects {n_features} features; got {X.shape[1]}",
            hint="Pass the features in the same order and number as at training time.")
    return X


class ContainerModel:
    """Base of the fitted MLP and LightGBM models: ``family``, ``params`` and ``n_features``
    in a JSON header, the weights or trees (:meth:`_body`) after it (:mod:`._container`).
    Subclasses give ``kind``, ``decision_function`` and ``_body``."""

    kind = ""
    family: str
    params: Dict[str, Any]
    n_features: int

    @property
    def regression(self) -> bool:
        from ._extfamilies import EXTRA_FAMILIES
        return EXTRA_FAMILIES[self.family].kind == "regression"

    def _as_matrix(self, X) -> np.ndarray:
        return check_matrix(X, self.n_features)

    def decision_function(self, X) -> np.ndarray:
        raise NotImplementedError

    def memory_bytes(self) -> int:
        """About how much memory the decoded model holds (subclasses refine it)."""
        return 0

    def predict(self, X) -> np.ndarray:
        """0/1 labels (int64) for a classifier, values for a regressor."""
        z = self.decision_function(X)
        return z if self.regression else (z > 0).astype(np.int64)

    def predict_proba(self, X) -> np.ndarray:
        """Probability of class 1 (classifiers only)."""
        return self.proba_of(self.decision_function(X))

    def proba_of(self, z: np.ndarray) -> np.ndarray:
        """Probability of class 1 for margins ``z`` of :meth:`decision_function`."""
        if self.regression:
            raise FeatureNotSupportedError(
                f"predict_proba is not available for model '{self.family}'",
                hint="Only classifiers give probabilities; use predict instead.")
        from scipy.special import expit
        return expit(z)

    def _body(self) -> bytes:
        raise NotImplementedError

    def to_bytes(self) -> bytes:
        from . import _container
        body = self._body()
        digest = body_digest(body)
        self._saved(digest)
        header = {"family": self.family, "params": self.params, "n_features": self.n_features,
                  "sha256": digest}
        return pack_model(self.kind, _container.pack(header, body))

    def _saved(self, digest: str) -> None:
        """Called with the body's SHA-256 whenever the model is serialized (a hook)."""


def body_digest(body: bytes) -> str:
    """SHA-256 of a model body, kept in the model's header and checked before the body is parsed."""
    import hashlib
    return hashlib.sha256(body).hexdigest()


def check_body_digest(header: Mapping[str, Any], body: bytes, what: str) -> None:
    """A body that is not byte for byte the one that was saved is refused before any parser sees
    it: LightGBM's model loader aborts the whole process (and with it the PostgreSQL server's
    backends) on truncated or altered model text instead of raising."""
    if header.get("sha256") != body_digest(body):
        raise ModelFormatError(f"The {what} is damaged: its body does not match the checksum saved with it",
                               hint=_HINT)


class GLMModel:
    """A fitted generalized linear model: ``z = X @ coef + intercept``."""

    kind = "glm"

    def __init__(self, family: str, coef, intercept: float, params: Mapping[str, Any]):
        self.family = str(family)
        self.coef = np.ascontiguousarray(coef, dtype=np.float64).reshape(-1)
        self.intercept = float(intercept)
        self.params = dict(params)

    @property
    def n_features(self) -> int:
        return int(self.coef.shape[0])

    def __repr__(self) -> str:
        return f"GLMModel(family={self.family!r}, n_features={self.n_features})"

    @property
    def regression(self) -> bool:
        return self.family == "linear"

    def memory_bytes(self) -> int:
        return int(self.coef.nbytes)

    def _as_matrix(self, X) -> np.ndarray:
        return check_matrix(X, self.n_features)

    def decision_function(self, X) -> np.ndarray:
        """Margins ``X @ coef + intercept``; a 1-D ``X`` is one row."""
        z = self._as_matrix(X) @ self.coef
        z += self.intercept
        return z

    def predict(self, X) -> np.ndarray:
        """0/1 labels for logistic/svm (int64), values for linear (float64)."""
        z = self.decision_function(X)
        if self.family == "linear":
            return z
        return (z > 0).astype(np.int64)

    def predict_proba(self, X) -> np.ndarray:
        """Probability of class 1 (logistic only)."""
        return self.proba_of(self.decision_function(X))

    def proba_of(self, z: np.ndarray) -> np.ndarray:
        """Probability of class 1 for margins ``z`` of :meth:`decision_function` (logistic only)."""
        if self.family != "logistic":
            raise FeatureNotSupportedError(
                f"predict_proba is not available for model '{self.family}'",
                hint="Classifiers with probabilities are logistic, mlp and lightgbm; for "
                     f"'{self.family}' use predict instead.")
        from scipy.special import expit
        return expit(z)

    # ------------------------------------------------------------ serialization
    def to_bytes(self) -> bytes:
        header = {"family": self.family, "params": self.params, "n_features": self.n_features}
        hbytes = np.frombuffer(json.dumps(header, sort_keys=True).encode("utf-8"), dtype=np.uint8)
        buf = io.BytesIO()
        np.savez(buf, coef=self.coef, intercept=np.array(self.intercept, dtype=np.float64),
                 header=hbytes)
        return pack_model(self.kind, buf.getvalue())

    @classmethod
    def from_payload(cls, payload: bytes) -> "GLMModel":
        from ._families import FAMILIES

        with np.load(io.BytesIO(payload), allow_pickle=False) as npz:
            names = set(npz.files)
            if names != {"coef", "intercept", "header"}:
                raise ModelFormatError(f"The glm model has arrays {sorted(names)}; expected "
                                       "coef, header, intercept", hint=_HINT)
            # a deflated archive may expand a thousandfold: size it before reading it
            unpacked = sum(npz.zip.getinfo(name + ".npy").file_size for name in names)
            if unpacked > MAX_GLM_BYTES:
                raise ModelFormatError(f"The glm model would unpack to {unpacked:,} bytes; at most "
                                       f"{MAX_GLM_BYTES:,} (2^24 weights) are read", hint=_HINT)
            coef, intercept, hbytes = npz["coef"], npz["intercept"], npz["header"]
        if (coef.dtype != np.float64 or coef.ndim != 1 or intercept.dtype != np.float64
                or intercept.shape != () or hbytes.dtype != np.uint8 or hbytes.ndim != 1):
            raise ModelFormatError("The glm model's arrays have unexpected types or shapes",
                                   hint=_HINT)
        header = json.loads(hbytes.tobytes().decode("utf-8"))
        if (not isinstance(header, dict) or header.get("family") not in FAMILIES
                or not isinstance(header.get("params"), dict)
                or header.get("n_features") != coef.shape[0]):
            raise ModelFormatError("The glm model's header is invalid", hint=_HINT)
        if not (np.all(np.isfinite(coef)) and math.isfinite(float(intercept))):
            raise ModelFormatError("The glm model holds non-finite weights", hint=_HINT)
        return cls(header["family"], coef, float(intercept), header["params"])


register_loader(GLMModel.kind, GLMModel.from_payload)
