#!/usr/bin/env python3
"""The decoder families' bf16 (attn_pretrained_set_precision) against float64 and PyTorch's bf16 autocast.

    python bf16_decoder_parity.py LIBATTN_SO OUTDIR

Builds random folders of every causal family attn runs in bf16 (GPT2LMHeadModel; LlamaForCausalLM
with grouped-query attention; Qwen2ForCausalLM with q / k / v biases; MistralForCausalLM with a
sliding window of 8; initializer_range 0.3, head dim 32), and checks through ctypes, per folder:
  - logits of a right-padded batch (lengths 40, 31, 17: the packed path) and of an unpadded one
    (2 x 40: the padded path) at bf16 against the model in float64, over the real positions:
    relative error ||out - ref|| / ||ref|| within 2x that of the model in float32 under
    torch.autocast("cpu", dtype=torch.bfloat16) (PyTorch's bf16: linear layers and attention on
    bf16 operands), finite, and different from attn's fp32 logits (bf16 ran) which stay within 1e-5;
  - greedy generation of 16 tokens at bf16 (its cached steps: bf16 linear layers, float attention
    over the cache): every token picked is the float64 model's best next token or within
    2x PyTorch's bf16 logit error (its largest over the same positions) of it;
  - attn_pretrained_precision reads back bf16, and fp32 again after setting it back.
The last line is "bf16 decoder parity: N passed, M failed"; exit 1 on a failure (a notice and 0
when torch or transformers cannot be imported)."""
import ctypes
import os
import random
import shutil
import sys

from decoder_ctypes import declare_generate, generate

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

passed = failed = 0
FP32, BF16 = 0, 1


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print(f"FAIL: {what}")


def load_lib(path):
    L = ctypes.CDLL(path)
    P, I64 = ctypes.c_void_p, ctypes.c_int64
    L.attn_last_error.restype = ctypes.c_char_p
    L.attn_pretrained_open.argtypes = [ctypes.c_char_p, ctypes.POINTER(P)]
    L.attn_pretrained_free.argtypes = [P]
    L.attn_pretrained_free.restype = None
    L.attn_pretrained_vocab_size.argtypes = [P]
    L.attn_pretrained_vocab_size.restype = I64
    L.attn_pretrained_logits.argtypes = [P, P, P, I64, I64, P]
    L.attn_pretrained_set_precision.argtypes = [P, ctypes.c_int]
    L.attn_pretrained_precision.argtypes = [P]
    declare_generate(L)
    return L


def build(out):
    import torch
    import transformers as tf
    base = dict(vocab_size=300, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=128, initializer_range=0.3, rms_norm_eps=1e-5)
    cfgs = {
        "gpt2": (tf.GPT2LMHeadModel, tf.GPT2Config(vocab_size=300, n_positions=128, n_embd=128, n_layer=2, n_head=4,
                                                   initializer_range=0.3)),
        "llama": (tf.LlamaForCausalLM, tf.LlamaConfig(**base)),
        "qwen2": (tf.Qwen2ForCausalLM, tf.Qwen2Config(**base)),
        "mistral": (tf.MistralForCausalLM, tf.MistralConfig(**base, sliding_window=8)),
    }
    folders = {}
    for i, (name, (cls, cfg)) in enumerate(cfgs.items()):
        torch.manual_seed(1000 + i)
        model = cls(cfg).eval()
        with torch.no_grad():  # the norms' weights and the biases away from 1 and 0, so that each matters
            for pn, p in model.named_parameters():
                if p.dim() == 1:
                    p.add_(0.2 * torch.randn_like(p))
        d = os.path.join(out, name)
        model.save_pretrained(d, safe_serialization=True)
        folders[name] = (d, model)
    return folders


def torch_logits(model, ids, mask, dtype):
    import torch
    with torch.no_grad():
        if dtype == "bf16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = model.float()(input_ids=ids, attention_mask=mask).logits
            return out.float().double().numpy()
        return model.double()(input_ids=ids, attention_mask=mask).logits.numpy()


def rel(a, b):
    import numpy as np
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300))


def attn_logits(L, h, ids, lengths):
    import numpy as np
    B, n = ids.shape
    V = L.attn_pretrained_vocab_size(h)
    out = np.zeros((B, n, V), dtype=np.float32)
    st = L.attn_pretrained_logits(h, ids.ctypes.data, lengths.ctypes.data, B, n, out.ctypes.data)
    check(st == 0, f"attn_pretrained_logits: status {st}: {L.attn_last_error().decode(errors='replace')}")
    return out.astype(np.float64)


def one_batch(L, h, name, model, rng, lengths):
    import numpy as np
    import torch
    B, n = len(lengths), max(lengths)
    ids = np.array([[rng.randrange(300) for _ in range(n)] for _ in range(B)], dtype=np.int32)
    lens = np.array(lengths, dtype=np.int64)
    mask = np.array([[1 if t < L_ else 0 for t in range(n)] for L_ in lengths], dtype=np.int64)
    ti, tm = torch.tensor(ids, dtype=torch.long), torch.tensor(mask)
    ref = torch_logits(model, ti, tm, "f64")
    tb = torch_logits(model, ti, tm, "bf16")
    L.attn_pretrained_set_precision(h, BF16)
    got = attn_logits(L, h, ids, lens)
    L.attn_pretrained_set_precision(h, FP32)
    f32 = attn_logits(L, h, ids, lens)
    real = mask.astype(bool)
    a, t, f, r = got[real], tb[real], f32[real], ref[real]
    a_err, t_err, f_err = rel(a, r), rel(t, r), rel(f, r)
    print(f"  {name} lengths {lengths}: vs float64: attn bf16 {a_err:.2e}, torch bf16 autocast {t_err:.2e}, "
          f"attn fp32 {f_err:.2e}")
    check(np.isfinite(a).all(), f"{name} {lengths}: attn bf16 logits not finite")
    check(a_err <= 2 * t_err, f"{name} {lengths}: attn bf16 rel err {a_err:.3g} > 2 x torch's {t_err:.3g}")
    check(f_err <= 1e-5, f"{name} {lengths}: attn fp32 rel err {f_err:.3g} > 1e-5")
    check(rel(a, f) > 1e-6, f"{name} {lengths}: bf16 logits equal fp32's (rel diff {rel(a, f):.3g}): bf16 did not run")


def generation(L, h, name, model, rng):
    import numpy as np
    import torch
    prompt = [rng.randrange(300) for _ in range(12)]
    L.attn_pretrained_set_precision(h, BF16)
    st, got = generate(L, h, prompt, max_new_tokens=16, eos_id=-1)
    check(st == 0 and len(got) == 16, f"{name}: bf16 generate: status {st}, {len(got)} tokens")
    check(L.attn_pretrained_precision(h) == BF16, f"{name}: precision does not read back bf16")
    L.attn_pretrained_set_precision(h, FP32)
    check(L.attn_pretrained_precision(h) == FP32, f"{name}: precision does not read back fp32")
    if st or len(got) != 16:
        return
    seq = torch.tensor([prompt + got[:-1]], dtype=torch.long)
    mask = torch.ones_like(seq)
    ref = torch_logits(model, seq, mask, "f64")[0]
    tb = torch_logits(model, seq, mask, "bf16")[0]
    p0 = len(prompt) - 1
    tol = 2 * float(np.abs(tb[p0:] - ref[p0:]).max())
    worst = max(float(ref[p0 + i].max() - ref[p0 + i][g]) for i, g in enumerate(got))
    same = sum(int(ref[p0 + i].argmax() == g) for i, g in enumerate(got))
    print(f"  {name}: bf16 greedy: {same} of 16 picks the float64 argmax, worst shortfall {worst:.3g} "
          f"(tolerance {tol:.3g}: 2 x torch bf16's largest logit error)")
    check(worst <= tol, f"{name}: a bf16 greedy pick {worst:.3g} below the float64 best (tolerance {tol:.3g})")


def main():
    if len(sys.argv) != 3:
        print("usage: bf16_decoder_parity.py LIBATTN_SO OUTDIR", file=sys.stderr)
        return 2
    try:
        import numpy  # noqa: F401
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        print(f"bf16 decoder parity: SKIP (cannot import {e.name}: needs torch, transformers)")
        return 0
    L = load_lib(os.path.abspath(sys.argv[1]))
    outdir = sys.argv[2]
    shutil.rmtree(outdir, ignore_errors=True)
    os.makedirs(outdir)
    seed = int(os.environ.get("ATTN_TEST_SEED", "20261207"))
    rng = random.Random(seed)
    print(f"bf16 decoder parity: seed {seed}")
    for name, (d, model) in build(outdir).items():
        h = ctypes.c_void_p()
        st = L.attn_pretrained_open(d.encode(), ctypes.byref(h))
        check(st == 0, f"open {name}: status {st}")
        if st:
            continue
        one_batch(L, h, name, model, rng, [40, 31, 17])
        one_batch(L, h, name, model, rng, [40, 40])
        generation(L, h, name, model, rng)
        L.attn_pretrained_free(h)
    print(f"bf16 decoder parity: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
