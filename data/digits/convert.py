"""Convert scikit-learn's copy of the UCI optical-recognition handwritten digits (the 1797 8x8
images Debian's python3-sklearn ships as sklearn/datasets/data/digits.csv.gz, BSD-3-Clause, see
LICENSE) into the raw files `attn train vit` reads:
  images.u8  1797 x 64 bytes, one 8x8 image per 64 bytes, row-major, values 0..16
  labels.u8  1797 bytes, the digit of each image
Run once: /usr/bin/python3 data/digits/convert.py [digits.csv.gz]; the output is committed."""
import gzip
import os
import sys

src = sys.argv[1] if len(sys.argv) > 1 else "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz"
here = os.path.dirname(os.path.abspath(__file__))
images, labels = bytearray(), bytearray()
with gzip.open(src, "rt") as f:
    for line in f:
        v = [int(float(t)) for t in line.strip().split(",") if t != ""]
        if not v:
            continue
        assert len(v) == 65 and all(0 <= x <= 16 for x in v[:64]) and 0 <= v[64] <= 9, line
        images += bytes(v[:64])
        labels.append(v[64])
assert len(labels) == 1797, len(labels)
with open(os.path.join(here, "images.u8"), "wb") as f:
    f.write(images)
with open(os.path.join(here, "labels.u8"), "wb") as f:
    f.write(labels)
print("%d images" % len(labels))
