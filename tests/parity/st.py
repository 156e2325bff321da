"""Tiny safetensors writer/reader for the parity scripts (Debian has no python3-safetensors).

Follows the format: u64 little-endian header length, JSON header padded with spaces to a multiple
of 8, then the tensors' bytes back to back in header order."""
import json
import struct

import numpy as np

_DTYPES = {
    np.dtype("float32"): "F32", np.dtype("float64"): "F64", np.dtype("float16"): "F16",
    np.dtype("int64"): "I64", np.dtype("int32"): "I32", np.dtype("uint8"): "U8",
    np.dtype("bool"): "BOOL", np.dtype("int8"): "I8", np.dtype("int16"): "I16",
}
_NP = {v: k for k, v in _DTYPES.items()}


def _as_numpy(t):
    if hasattr(t, "detach"):
        t = t.detach().cpu().contiguous().numpy()
    return np.ascontiguousarray(t)


def save(path, tensors, metadata=None):
    header = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    blobs, off = [], 0
    for name, t in tensors.items():
        a = _as_numpy(t)
        b = a.tobytes()
        header[name] = {"dtype": _DTYPES[a.dtype], "shape": list(a.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def load(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        out[name] = np.frombuffer(data[base + b:base + e], dtype=_NP[info["dtype"]]).reshape(info["shape"])
    return out
