"""PyTorch references for attn_vit_* (Vision Transformer) and attn_vit_resample_pos_embed.

- case0: torchvision.models.VisionTransformer(image_size=16, patch_size=4, num_layers=2,
  num_heads=2, hidden_dim=16, mlp_dim=32, num_classes=10) with random parameters (LayerNorm
  weights around 1), float64, eval: its own forward on x [2, 3, 16, 16]; logits, the gradients of
  the input and of every parameter (autograd, random upstream gradient), and layer 0's / 1's
  attention weights recorded by wrapping self_attention.forward (as gen_capture.py does).
  Parameters under torchvision's state_dict names: case0.p.NAME, gradients case0.g.NAME.
- case1: a DeiT-style distilled ViT on a non-square image (2 channels, 12 x 8, patch 4: a 3 x 2
  grid), written out from torchvision's parts (conv_proj, encoder layers, encoder.ln, heads.head)
  plus a distillation token and head_dist as timm's VisionTransformerDistilled: tokens [cls, dist,
  patches], eval output (head(h0) + head_dist(h1)) / 2; also the two heads' outputs separately.
  Parameters and gradients under timm's names (patch_embed.proj, cls_token, dist_token, pos_embed,
  blocks.N.{norm1, attn.qkv, attn.proj, norm2, mlp.fc1, mlp.fc2}, norm, head, head_dist).
- interp.*: position-embedding grids resampled by F.interpolate(mode="bicubic") with
  align_corners False (timm) and True (torchvision), the class-token row kept: 3 x 4 -> 5 x 7 and
  4 x 4 -> 2 x 3.
Metadata caseN.config holds the configuration as JSON. Writes DIR/vit.safetensors. Runs with
/usr/bin/python3 and Debian's python3-torch / python3-torchvision."""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F
from torchvision.models.vision_transformer import VisionTransformer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402


def randomize(m, gen):
    for name, p in m.named_parameters():
        r = torch.randn(p.shape, generator=gen) * 0.3
        if (".ln" in name or "ln_" in name) and name.endswith("weight"):
            r = 1.0 + r
        p.data = r.float()
    return m.double().eval()


def record_weights(mha, store, key):
    orig = mha.forward

    def forward(*args, **kw):
        kw["need_weights"] = True
        kw["average_attn_weights"] = False
        out, w = orig(*args, **kw)
        store[key] = w.detach().clone()
        return out, None

    mha.forward = forward


def timm_name(tv):
    """torchvision's parameter names (plus dist_token, head_dist) spelled as timm's."""
    fixed = {"class_token": "cls_token", "dist_token": "dist_token", "encoder.pos_embedding": "pos_embed",
             "conv_proj.weight": "patch_embed.proj.weight", "conv_proj.bias": "patch_embed.proj.bias",
             "encoder.ln.weight": "norm.weight", "encoder.ln.bias": "norm.bias",
             "heads.head.weight": "head.weight", "heads.head.bias": "head.bias",
             "head_dist.weight": "head_dist.weight", "head_dist.bias": "head_dist.bias"}
    if tv in fixed:
        return fixed[tv]
    parts = tv.split(".")  # encoder.layers.encoder_layer_N.<sub>...
    n = parts[2].split("_")[-1]
    rest = ".".join(parts[3:])
    sub = {"ln_1.": "norm1.", "ln_2.": "norm2.", "self_attention.in_proj_weight": "attn.qkv.weight",
           "self_attention.in_proj_bias": "attn.qkv.bias", "self_attention.out_proj.": "attn.proj.",
           "mlp.0.": "mlp.fc1.", "mlp.3.": "mlp.fc2."}
    for k, v in sub.items():
        if rest.startswith(k):
            return "blocks.%s.%s%s" % (n, v, rest[len(k):])
    raise KeyError(tv)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "fixtures"))
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    gen = torch.Generator().manual_seed(a.seed + 7)
    tensors, meta = {}, {"seed": a.seed}

    # ---- case0: torchvision's VisionTransformer, its own forward ----
    c = dict(image_size=16, patch_size=4, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=32, num_classes=10)
    B = 2
    m = randomize(VisionTransformer(**c), gen)
    x = torch.randn(B, 3, 16, 16, generator=gen, dtype=torch.float64).requires_grad_(True)
    store = {}
    for i, lyr in enumerate(m.encoder.layers):
        record_weights(lyr.self_attention, store, "attn.%d" % i)
    y = m(x)
    dy = torch.randn(y.shape, generator=gen, dtype=torch.float64)
    y.backward(dy)
    for k, p in m.named_parameters():
        tensors["case0.p." + k] = p.detach().float()
        tensors["case0.g." + k] = p.grad.float()
    tensors["case0.x"] = x.detach().float()
    tensors["case0.dx"] = x.grad.float()
    tensors["case0.logits"] = y.detach().float()
    tensors["case0.dlogits"] = dy.float()
    for i in range(c["num_layers"]):
        tensors["case0.attn.%d" % i] = store["attn.%d" % i].float()
    meta["case0.config"] = json.dumps(dict(c, batch=B, in_channels=3, image_h=16, image_w=16))

    # ---- case1: distilled, non-square, 2 channels, through torchvision's parts ----
    H, W, C, p, D, K = 12, 8, 2, 4, 12, 5
    L, heads, mlp = 2, 3, 24
    gh, gw = H // p, W // p
    m = VisionTransformer(image_size=12, patch_size=p, num_layers=L, num_heads=heads, hidden_dim=D, mlp_dim=mlp,
                          num_classes=K)
    m.conv_proj = torch.nn.Conv2d(C, D, kernel_size=p, stride=p)
    m.encoder.pos_embedding = torch.nn.Parameter(torch.zeros(1, 2 + gh * gw, D))
    m.dist_token = torch.nn.Parameter(torch.zeros(1, 1, D))
    m.head_dist = torch.nn.Linear(D, K)
    m = randomize(m, gen)

    def forward1(img):
        t = m.conv_proj(img).reshape(img.shape[0], D, gh * gw).permute(0, 2, 1)
        t = torch.cat([m.class_token.expand(img.shape[0], -1, -1), m.dist_token.expand(img.shape[0], -1, -1), t], 1)
        t = t + m.encoder.pos_embedding
        h = m.encoder.ln(m.encoder.layers(t))
        return m.heads.head(h[:, 0]), m.head_dist(h[:, 1])

    B = 3
    x = torch.randn(B, C, H, W, generator=gen, dtype=torch.float64).requires_grad_(True)
    y0, y1 = forward1(x)
    y = (y0 + y1) / 2
    dy = torch.randn(y.shape, generator=gen, dtype=torch.float64)
    y.backward(dy)
    for k, prm in m.named_parameters():
        tensors["case1.p." + timm_name(k)] = prm.detach().float()
        tensors["case1.g." + timm_name(k)] = prm.grad.float()
    tensors["case1.x"] = x.detach().float()
    tensors["case1.dx"] = x.grad.float()
    tensors["case1.logits"] = y.detach().float()
    tensors["case1.logits_sep"] = torch.stack([y0, y1]).detach().float()
    tensors["case1.dlogits"] = dy.float()
    meta["case1.config"] = json.dumps(dict(image_h=H, image_w=W, patch_size=p, in_channels=C, num_layers=L,
                                           num_heads=heads, hidden_dim=D, mlp_dim=mlp, num_classes=K, batch=B,
                                           distilled=True))

    # ---- position-embedding resampling ----
    dim = 5
    for name, (sh, sw, dh, dw) in {"up": (3, 4, 5, 7), "down": (4, 4, 2, 3)}.items():
        pe = torch.randn(1, 1 + sh * sw, dim, generator=gen, dtype=torch.float64)
        tensors["interp.%s.src" % name] = pe.float()
        grid = pe[:, 1:].float().double().reshape(1, sh, sw, dim).permute(0, 3, 1, 2)
        for ac in (0, 1):
            g = F.interpolate(grid, size=(dh, dw), mode="bicubic", align_corners=bool(ac))
            g = g.permute(0, 2, 3, 1).reshape(1, dh * dw, dim)
            tensors["interp.%s.ac%d" % (name, ac)] = torch.cat([pe[:, :1], g], 1).float()
        meta["interp.%s" % name] = json.dumps([sh, sw, dh, dw, dim])
    os.makedirs(a.out, exist_ok=True)
    st.save(os.path.join(a.out, "vit.safetensors"), tensors, meta)


if __name__ == "__main__":
    main()
