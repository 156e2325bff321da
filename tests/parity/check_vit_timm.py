"""Optional check of the timm side of attn_vit (needs `pip install timm`; not run by regen.sh or
CI, which have no timm): gen_vit.py's case 1 stores its parameters under the names
attn_vit_timm_names() produces; this loads them into timm's own VisionTransformerDistilled
(DeiT) with load_state_dict(strict=True), so every name and shape must be timm's, and compares its
eval output ((head + head_dist) / 2) and the two heads with the fixture's. It also runs timm's
resample_abs_pos_embed on the fixture's grids (antialias off: timm's default antialias only
changes shrinking, which attn_vit_resample_pos_embed does not reproduce).
Usage: python check_vit_timm.py [tests/parity/fixtures/vit.safetensors]"""
import json
import os
import struct
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402

try:
    import timm
    from timm.layers import resample_abs_pos_embed
    from timm.models.deit import VisionTransformerDistilled
except ImportError as e:
    print("skipped: timm is not installed (%s)" % e)
    sys.exit(0)


def metadata(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n)).get("__metadata__", {})


def rel(a, b):
    return float((a - b).norm() / max(b.norm(), 1e-30))


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "fixtures", "vit.safetensors")
    meta = metadata(path)
    t = {k: torch.as_tensor(v.copy()) for k, v in st.load(path).items()}
    c = json.loads(meta["case1.config"])
    m = VisionTransformerDistilled(img_size=(c["image_h"], c["image_w"]), patch_size=c["patch_size"],
                                   in_chans=c["in_channels"], num_classes=c["num_classes"], embed_dim=c["hidden_dim"],
                                   depth=c["num_layers"], num_heads=c["num_heads"],
                                   mlp_ratio=c["mlp_dim"] / c["hidden_dim"], qkv_bias=True).double().eval()
    sd = {k[len("case1.p."):]: v.double() for k, v in t.items() if k.startswith("case1.p.")}
    m.load_state_dict(sd, strict=True)
    with torch.no_grad():
        y = m(t["case1.x"].double())
        m.set_distilled_training(True)
        m.train()
        y0, y1 = m(t["case1.x"].double())
    e = rel(y, t["case1.logits"].double())
    e2 = rel(torch.stack([y0, y1]), t["case1.logits_sep"].double())
    print("timm %s VisionTransformerDistilled: strict load of attn's timm names ok; eval logits rel err %.3g, "
          "separate heads %.3g" % (timm.__version__, e, e2))
    ok = e < 1e-5 and e2 < 1e-5
    for name in ("up", "down"):
        sh, sw, dh, dw, dim = json.loads(meta["interp." + name])
        r = resample_abs_pos_embed(t["interp.%s.src" % name].double(), (dh, dw), (sh, sw), num_prefix_tokens=1,
                                   antialias=False)
        e = rel(r, t["interp.%s.ac0" % name].double())
        print("timm resample_abs_pos_embed %dx%d -> %dx%d (antialias off) vs the fixture: rel err %.3g" %
              (sh, sw, dh, dw, e))
        ok = ok and e < 1e-5
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
