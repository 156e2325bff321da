"""attn.torch: the autograd Function and the drop-in SDPA against PyTorch (forward, gradients,
gradcheck in float64 with float32-aware tolerances), patch(), and a small Transformer-like model
trained for a few steps with attn's attention and with PyTorch's: the same losses."""
import math

import numpy as np
import pytest
from conftest import ref_sdpa, rel, torch, torch_sdpa

import attn.torch as at

nn = torch.nn


def test_drop_in_matches_torch_forward_and_grads():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 11, 8, generator=g, requires_grad=True) for _ in range(3))
    mask = torch.rand(11, 11, generator=g) > 0.3
    mask[:, 0] = True
    go = torch.randn(2, 3, 11, 8, generator=g)
    for kw in ({}, {"is_causal": True}, {"attn_mask": mask}):
        grads = []
        for f in (torch_sdpa, at.scaled_dot_product_attention):
            out = f(q, k, v, **kw)
            gq, gk, gv = torch.autograd.grad(out, (q, k, v), go)
            grads.append((out, gq, gk, gv))
        for a, b in zip(*grads):
            assert rel(b, a) < 1e-5, kw


@pytest.mark.parametrize("kw", [
    {"is_causal": True, "scale": 0.7},
    {"is_causal": "bottom_right", "enable_gqa": True},
    {"attn_mask": "float", "softcap": 3.0},
    {"window": (2, 1), "alibi_slopes": [0.5, 0.25]},
])
def test_gradients_against_float64_autograd(kw):
    g = torch.Generator().manual_seed(1)
    hk = 1 if kw.get("enable_gqa") else 2
    q = torch.randn(2, 2, 5, 4, dtype=torch.float64, generator=g, requires_grad=True)
    k = torch.randn(2, hk, 7, 4, dtype=torch.float64, generator=g, requires_grad=True)
    v = torch.randn(2, hk, 7, 3, dtype=torch.float64, generator=g, requires_grad=True)
    kw = dict(kw)
    if kw.get("attn_mask") == "float":
        kw["attn_mask"] = torch.randn(5, 7, dtype=torch.float64, generator=g)
    out = at.scaled_dot_product_attention(q, k, v, **kw)
    assert out.dtype == torch.float64
    go = torch.randn(out.shape, dtype=torch.float64, generator=g)
    got = torch.autograd.grad(out, (q, k, v), go)
    want_out = ref_sdpa(q, k, v, **kw)
    want = torch.autograd.grad(want_out, (q, k, v), go)
    assert rel(out, want_out) < 1e-5
    for a, b in zip(got, want):
        assert rel(a, b) < 1e-4, kw
    # finite differences (float64 perturbations of a float32 computation: eps and tolerances sized
    # for float32 rounding)
    f = lambda q, k, v: at.scaled_dot_product_attention(q, k, v, **kw)  # noqa: E731
    assert torch.autograd.gradcheck(f, (q, k, v), eps=1e-3, atol=2e-3, rtol=2e-2)


def test_zero_copy_and_strides():
    x = torch.randn(2, 9, 3, 8)  # [B, L, H, E] storage
    q = x.transpose(1, 2)        # [B, H, L, E] view, not contiguous
    assert q.detach().numpy().base is not None
    out = at.scaled_dot_product_attention(q, q, q)
    assert rel(out, ref_sdpa(q.double(), q.double(), q.double())) < 2e-5


def test_dropout_reproducible_with_manual_seed():
    q = torch.randn(1, 2, 16, 8, requires_grad=True)
    torch.manual_seed(3)
    a = at.scaled_dot_product_attention(q, q, q, dropout_p=0.3)
    torch.manual_seed(3)
    b = at.scaled_dot_product_attention(q, q, q, dropout_p=0.3)
    assert torch.equal(a, b)
    assert not torch.equal(a, at.scaled_dot_product_attention(q, q, q))
    a.sum().backward()
    assert torch.isfinite(q.grad).all()


def test_bad_arguments():
    q = torch.randn(2, 2, 4, 8)
    with pytest.raises(TypeError, match="torch.Tensor"):
        at.scaled_dot_product_attention(q.numpy(), q, q)
    with pytest.raises(ValueError, match="enable_gqa"):
        at.scaled_dot_product_attention(q, q[:, :1], q[:, :1])
    with pytest.raises(ValueError, match="broadcast"):
        at.scaled_dot_product_attention(q, q, q, attn_mask=torch.ones(3, 4, dtype=torch.bool))


def test_patch():
    import torch.nn.functional as F
    before = getattr(F, "scaled_dot_product_attention", None)
    with at.patch():
        assert F.scaled_dot_product_attention is at.scaled_dot_product_attention
    assert getattr(F, "scaled_dot_product_attention", None) is before


# ---- a small Transformer-like model trained with either attention ----

class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x, sdpa, mask):
        B, N, D = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(B, N, 3, self.h, D // self.h).permute(2, 0, 3, 1, 4)
        a = sdpa(q, k, v, attn_mask=mask)  # q, k, v strided views of the projection
        x = x + self.proj(a.transpose(1, 2).reshape(B, N, D))
        return x + self.ff(self.norm2(x))


class TinyLM(nn.Module):
    def __init__(self, vocab=13, d=32, h=4, layers=2, n=12):
        super().__init__()
        self.emb, self.pos = nn.Embedding(vocab, d), nn.Parameter(0.1 * torch.randn(n, d))
        self.blocks = nn.ModuleList(Block(d, h) for _ in range(layers))
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens, sdpa):
        n = tokens.shape[1]
        mask = torch.ones(n, n, dtype=torch.bool).tril()  # causal, as a boolean mask (1.13 and 2.x agree)
        x = self.emb(tokens) + self.pos[:n]
        for b in self.blocks:
            x = b(x, sdpa, mask)
        return self.head(x)


def _train(sdpa, steps=6):
    torch.manual_seed(0)
    model = TinyLM()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        tokens = torch.randint(0, 13, (4, 12), generator=g)
        logits = model(tokens[:, :-1], sdpa)
        loss = nn.functional.cross_entropy(logits.reshape(-1, 13), tokens[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_training_matches_pytorch():
    theirs = _train(lambda q, k, v, attn_mask: torch_sdpa(q, k, v, attn_mask=attn_mask))
    ours = _train(lambda q, k, v, attn_mask: at.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask))
    assert theirs[-1] < theirs[0]
    np.testing.assert_allclose(ours, theirs, rtol=1e-4)
    assert all(math.isfinite(x) for x in ours)
