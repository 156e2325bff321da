"""A safetensors file written from Python, for tests/test_safetensors.c.

Writes DIR/st_mixed.safetensors with tests/parity/st.py: several dtypes and shapes plus metadata.
Every value is a documented deterministic function of the element index i (row-major) and the
seed, which is stored in the metadata ("seed"), so the C test recomputes each value exactly:

  f32.matrix   F32  [3, 5]     ((7*i + seed) % 23 - 11) / 4
  f64.vector   F64  [7]        (i - 3) / 10.0 + (seed % 7)            (computed in float64)
  f16.tensor3  F16  [2, 3, 4]  ((5*i + seed) % 19 - 9) / 8             (exact in float16)
  f16.special  F16  [8]        inf, -inf, nan, -0.0, 65504, 2**-24, 2**-14, 1023 * 2**-24
  bf16.weight  BF16 [4, 4]     float32(i / 3 - 2) rounded to bfloat16 by torch (round to
                               nearest even)
  i64.ids      I64  [6]        (i - 2) * 1000000007 + seed
  i32.counts   I32  [2, 2]     -3*i + seed % 11
  i16.mid      I16  [3]        -20000*i + 10000
  i8.small     I8   [4]        50*i - 100
  u8.bytes     U8   [10]       (37*i + seed) % 256
  bool.mask    BOOL [5]        (i + seed) % 3 == 0
  one          F32  [1]        seed + 0.5   (st.py stores 0-d arrays as [1]: np.ascontiguousarray
                                             returns ndim >= 1, so no rank-0 tensor here)
  empty        F32  [0, 3]     (no data)

Metadata: format=pt, seed=<seed>, generator=tests/parity/gen_safetensors.py, and
note='unicode \u00e9\u2713 and "quotes"' (json.dumps writes it with \\u escapes).
Runs with /usr/bin/python3 (numpy, torch)."""
import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402

# numpy has no bfloat16: a named 2-byte dtype carries the raw bits, registered with st.py's
# dtype table so st.save labels it BF16.
BF16 = np.dtype([("bf16", "<u2")])
st._DTYPES[BF16] = "BF16"

NOTE = 'unicode \u00e9\u2713 and "quotes"'


def build(seed):
    i = lambda n: np.arange(n, dtype=np.int64)  # noqa: E731
    t = {}
    t["f32.matrix"] = (((7 * i(15) + seed) % 23 - 11) / 4).astype(np.float32).reshape(3, 5)
    t["f64.vector"] = np.array([(k - 3) / 10.0 + (seed % 7) for k in range(7)], dtype=np.float64)
    t["f16.tensor3"] = (((5 * i(24) + seed) % 19 - 9) / 8).astype(np.float16).reshape(2, 3, 4)
    t["f16.special"] = np.array([np.inf, -np.inf, np.nan, -0.0, 65504.0, 2.0**-24, 2.0**-14,
                                 1023 * 2.0**-24], dtype=np.float16)
    bf = torch.tensor([k / 3 - 2 for k in range(16)], dtype=torch.float32).to(torch.bfloat16)
    t["bf16.weight"] = bf.view(torch.int16).numpy().view(np.uint16).view(BF16).reshape(4, 4)
    t["i64.ids"] = ((i(6) - 2) * 1000000007 + seed).astype(np.int64)
    t["i32.counts"] = (-3 * i(4) + seed % 11).astype(np.int32).reshape(2, 2)
    t["i16.mid"] = (-20000 * i(3) + 10000).astype(np.int16)
    t["i8.small"] = (50 * i(4) - 100).astype(np.int8)
    t["u8.bytes"] = ((37 * i(10) + seed) % 256).astype(np.uint8)
    t["bool.mask"] = ((i(5) + seed) % 3 == 0)
    t["one"] = np.array([seed + 0.5], dtype=np.float32)
    t["empty"] = np.zeros((0, 3), dtype=np.float32)
    return t


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures"))
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    seed = args.seed % 1000000  # keeps every formula inside its dtype's exact range
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "st_mixed.safetensors")
    meta = {"format": "pt", "seed": str(seed), "generator": "tests/parity/gen_safetensors.py",
            "note": NOTE}
    tensors = build(seed)
    st.save(path, tensors, meta)
    # read back: the layout, and every tensor's bytes (BF16 through its raw bits)
    with open(path, "rb") as f:
        data = f.read()
    n = int.from_bytes(data[:8], "little")
    assert n % 8 == 0 and data[8:9] == b"{", "header layout"
    header = json.loads(data[8:8 + n])
    assert header["__metadata__"] == meta, "metadata"
    for name, a in tensors.items():
        b, e = header[name]["data_offsets"]
        assert data[8 + n + b:8 + n + e] == np.ascontiguousarray(a).tobytes(), name
        assert header[name]["shape"] == list(a.shape), name
    print(f"wrote {path} ({len(data)} bytes, {len(tensors)} tensors, seed {seed})")


if __name__ == "__main__":
    main()
