"""Epoch-level checkpoints of a group's search (pure Python, safe formats only).

After every epoch block of a group, the search state (procedure, trials, driver
counters), the metering and the trainer's state are captured in the group's driver
thread; the coordinator's main thread encodes the latest capture of each group and
writes it to ``groupml.run_checkpoints`` in the same transaction as the block's
``run_epochs`` and ``run_schedule`` rows. A resumed run decodes it and the group's
search continues after its last committed block.

Encoding: a nested tree of dicts (string keys), lists, JSON scalars, numpy arrays and
bytes. Arrays and bytes go into one ``.npz`` body (read back with
``allow_pickle=False``; object arrays are refused), the rest into a JSON header; a
non-finite float becomes ``{"$float": "nan"}``. Never pickle. MLP training states
inside a tree are the bytes of :func:`groupml.learners.mlp.run_to_bytes` (JSON header +
``torch.save`` of tensors, loaded by the workers with ``weights_only=True``) and
LightGBM models are their model text; neither is loaded by this module.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import zipfile
from typing import Any, Dict

import numpy as np

from ..errors import ModelFormatError
from ..learners import pack_container, unpack_container

FORMAT = "groupml-checkpoint"
VERSION = 1
_WHAT = "train_groups checkpoint"
_SPECIAL = ("$npz", "$bytes", "$float")
_HINT = "The checkpoint is damaged or was written by another groupml version; the group restarts."


def encode(tree: Any) -> bytes:
    """``tree`` as bytes: a JSON header and an npz body (see the module doc)."""
    arrays: Dict[str, np.ndarray] = {}

    def walk(v):
        if isinstance(v, np.ndarray):
            if v.dtype.hasobject:
                raise TypeError("a checkpoint cannot hold object arrays")
            name = f"a{len(arrays)}"
            arrays[name] = v
            return {"$npz": name}
        if isinstance(v, (bytes, bytearray, memoryview)):
            name = f"a{len(arrays)}"
            arrays[name] = np.frombuffer(bytes(v), dtype=np.uint8)
            return {"$bytes": name}
        if isinstance(v, dict):
            out = {}
            for k, x in v.items():
                if not isinstance(k, str):
                    raise TypeError(f"checkpoint dict keys must be strings; got {type(k).__name__}")
                out[k] = walk(x)
            if len(out) == 1 and next(iter(out)) in _SPECIAL:
                raise TypeError(f"checkpoint dict key {next(iter(out))!r} is reserved")
            return out
        if isinstance(v, (list, tuple)):
            return [walk(x) for x in v]
        if v is None or isinstance(v, str):
            return v
        if isinstance(v, (bool, np.bool_)):
            return bool(v)
        if isinstance(v, (int, np.integer)):
            return int(v)
        if isinstance(v, (float, np.floating)):
            f = float(v)
            return f if math.isfinite(f) else {"$float": repr(f)}
        raise TypeError(f"a checkpoint cannot hold a {type(v).__name__}")

    header = {"format": FORMAT, "version": VERSION, "tree": walk(tree)}
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return pack_container(header, buf.getvalue())


def decode(blob: bytes) -> Any:
    """The tree :func:`encode` wrote; ModelFormatError for anything else."""
    header, body = unpack_container(blob, _WHAT)
    if header.get("format") != FORMAT or header.get("version") != VERSION or "tree" not in header:
        raise ModelFormatError(f"The {_WHAT} has an unknown format", hint=_HINT)
    try:
        with np.load(io.BytesIO(body), allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
    except (ValueError, OSError, EOFError, KeyError, zipfile.BadZipFile, MemoryError) as exc:
        # MemoryError: an array header that claims more than the machine has (numpy allocates
        # the whole array before it finds the data short)
        raise ModelFormatError(f"The {_WHAT} has a corrupt array body: {exc}", hint=_HINT) from None

    def walk(v):
        if isinstance(v, dict):
            if len(v) == 1:
                (k, x), = v.items()
                try:
                    if k == "$npz":
                        return arrays[x]
                    if k == "$bytes":
                        return arrays[x].tobytes()
                except KeyError:
                    raise ModelFormatError(f"The {_WHAT} names a missing array {x!r}", hint=_HINT) from None
                if k == "$float":
                    return float(x)
            return {k: walk(x) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        return v

    return walk(header["tree"])


def fingerprint(*, model: str, search: Any, fit_options: Any, pattern: str, mode: str, shards) -> str:
    """What a group's checkpoint is only valid for: model, search spec, fit options, the task
    mode (``shards``, or a baseline's ``configs`` / ``steps``: the executed schedule of a group
    is checked under one mode) and, for the sequential and sampling patterns, the group's shard
    row ranges. A GLM state does not depend on how a pass is split (a pass is a sum over
    whatever shards there are), so a GLM group resumes under another worker count too."""
    what = {"model": model, "search": search, "fit_options": fit_options, "pattern": pattern, "mode": mode}
    if pattern != "algebraic":
        what["layout"] = [[int(s[1]), int(s[2])] for s in shards]
    text = json.dumps(what, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]
