#!/usr/bin/env python3
"""attn_pretrained's ViT family, its image preprocessing, `attn classify` and `attn viz --model`
against transformers on folders built here.

    python vit_parity.py LIBATTN_SO OUTDIR

Builds a random ViTForImageClassification (image 32, patch 8, hidden 32, 2 layers, 4 heads,
initializer_range 0.3, 10 labels in id2label) and ViTModels (with the pooler; qkv_bias false with
gelu_new; the same weights under transformers 4.x's names), each saved with save_pretrained beside
a preprocessor_config.json (ViTImageProcessor's, written by the processor itself when torchvision
is importable, else by hand with the same keys), and checks:
  - logits (attn_pretrained_classify) and last hidden states (attn_pretrained_image_hidden_states)
    against the model in float64: ||out - ref|| / ||ref|| <= 1e-5; attn_pretrained_flops of the
    classification equal to torch's FlopCounterMode's count of it;
  - attn_pretrained_image_input against the processor's pixel_values, bit for bit: ViTImageProcessor
    itself when torchvision is importable, else its torchvision backend's steps written with torch
    (tvF.resize on a uint8 CPU image = F.interpolate(uint8, "bilinear", antialias=True), then the
    fused (x - mean / factor) / (std / factor) in float32), on images that need no resize, a
    downscale and an upscale. The resize is the same integer arithmetic as torch's, so the tolerance
    of the resized cases is the same 1e-5 as the others (the pixels are equal, not close);
  - `attn classify` on PPM, PGM (do_convert_rgb) and PNG images written here (32x32: no resize;
    45x50 and 20x27: resized): the top-5 labels equal to transformers' on the processor's pixels,
    the probabilities within 1e-5 (absolute), --input lists, errors for a ViTModel and a BERT;
    `attn bench model` on it (images/s in both precisions, its GFLOP/s the flop count's);
  - attn_pretrained_capture and `attn viz --model` (BERT and GPT-2 on --text, ViT on --image) against
    output_attentions=True (eager attention): every layer and head within 1e-5 relative (ctypes:
    the floats; the CSV: its 6 significant digits), the SVG / HTML / CSV / overlay written.
The last line is "vit parity: N passed, M failed"; the exit status is 1 on a failure, 0 otherwise
(a notice and 0 when torch or transformers cannot be imported)."""
import csv
import ctypes
import json
import os
import shutil
import struct
import subprocess
import sys
import zlib

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

TOL = 1e-5
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


class Img(ctypes.Structure):
    _fields_ = [("width", ctypes.c_int64), ("height", ctypes.c_int64), ("channels", ctypes.c_int),
                ("pixels", ctypes.POINTER(ctypes.c_uint8))]


def main():
    if len(sys.argv) != 3:
        print("usage: vit_parity.py LIBATTN_SO OUTDIR", file=sys.stderr)
        return 2
    try:
        import numpy as np
        import torch
        import transformers
        import tokenizers
    except Exception as e:  # noqa: BLE001 - any import failure means "skip"
        print(f"vit parity: SKIP (cannot import torch / transformers / tokenizers: {e})")
        return 0
    t = Tester(sys.argv[1], sys.argv[2], np, torch, transformers, tokenizers)
    t.run()
    print("vit parity: measured " + ", ".join(f"{k} {v:.1e}" for k, v in t.worst.items()))
    print(f"vit parity: {t.passed} passed, {t.failed} failed")
    return 1 if t.failed else 0


def write_pnm(path, a):
    """a [h, w] (PGM) or [h, w, 3] (PPM), uint8."""
    with open(path, "wb") as f:
        f.write(b"P%d\n%d %d\n255\n" % (5 if a.ndim == 2 else 6, a.shape[1], a.shape[0]))
        f.write(a.tobytes())


def write_png(path, a):
    """8-bit RGB PNG, no filter, written with zlib (no imaging library needed)."""
    h, w = a.shape[:2]
    raw = b"".join(b"\x00" + a[y].tobytes() for y in range(h))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
                chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


class Tester:
    def __init__(self, lib, out, np, torch, transformers, tokenizers):
        self.np, self.torch, self.tf, self.tk = np, torch, transformers, tokenizers
        self.out = out
        self.attn = os.path.join(os.path.dirname(os.path.abspath(lib)), "attn")
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        self.passed = self.failed = 0
        self.worst = {}  # measured: the largest error of each kind
        L = ctypes.CDLL(lib)
        P, I64 = ctypes.c_void_p, ctypes.c_int64
        L.attn_pretrained_open.argtypes = [ctypes.c_char_p, ctypes.POINTER(P)]
        L.attn_pretrained_free.argtypes = [P]
        L.attn_last_error.restype = ctypes.c_char_p
        L.attn_pretrained_family.argtypes = [P]
        L.attn_pretrained_family.restype = ctypes.c_char_p
        L.attn_pretrained_num_labels.argtypes = [P]
        L.attn_pretrained_num_labels.restype = I64
        L.attn_pretrained_label.argtypes = [P, I64]
        L.attn_pretrained_label.restype = ctypes.c_char_p
        L.attn_pretrained_image_tokens.argtypes = [P]
        L.attn_pretrained_image_tokens.restype = I64
        L.attn_pretrained_classify.argtypes = [P, P, I64, I64, I64, P]
        L.attn_pretrained_set_precision.argtypes = [P, ctypes.c_int]
        L.attn_pretrained_flops.argtypes = [P, I64, I64, I64]
        L.attn_pretrained_flops.restype = ctypes.c_double
        L.attn_pretrained_image_hidden_states.argtypes = [P, P, I64, I64, I64, P]
        L.attn_pretrained_image_input.argtypes = [P, ctypes.POINTER(Img), P]
        L.attn_pretrained_capture.argtypes = [P, P, I64, P, I64, I64, P]
        L.attn_capture_create.argtypes = [ctypes.POINTER(P)]
        L.attn_capture_free.argtypes = [P]
        L.attn_capture_add.argtypes = [P, ctypes.c_char_p, I64, I64, I64, I64]
        L.attn_capture_find.argtypes = [P, ctypes.c_char_p, P]
        L.attn_image_png_supported.restype = ctypes.c_int
        self.L = L
        try:  # the processor itself, when its torchvision backend can be imported
            self.proc_cls = transformers.ViTImageProcessor
            self.proc_cls(size={"height": 32, "width": 32})
        except Exception:  # noqa: BLE001 - ImportError of the backend
            self.proc_cls = None

    def measure(self, kind, e):
        self.worst[kind] = max(self.worst.get(kind, 0.0), e)
        return e

    def check(self, ok, what):
        if ok:
            self.passed += 1
        else:
            self.failed += 1
            print(f"FAIL: {what}")

    def open(self, d):
        h = ctypes.c_void_p()
        s = self.L.attn_pretrained_open(d.encode(), ctypes.byref(h))
        return s, h, self.L.attn_last_error().decode() if s else ""

    def rel(self, a, b):
        np = self.np
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        if not np.all(np.isfinite(a)):
            return float("inf")
        return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300))

    # ---- folders ----
    def vit_config(self, **kw):
        c = dict(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                 intermediate_size=48, initializer_range=0.3, layer_norm_eps=1e-6,
                 id2label={i: f"label {i} of ten" for i in range(10)}, attn_implementation="eager")
        c.update(kw)
        return self.tf.ViTConfig(**c)

    def perturb(self, model, seed):
        torch = self.torch
        torch.manual_seed(seed)
        with torch.no_grad():  # LayerNorms away from (1, 0), biases, CLS and positions nonzero
            for name, p in model.named_parameters():
                if name.endswith("bias") or "layernorm" in name or "token" in name or "position" in name:
                    p.add_(0.3 * torch.randn_like(p))
        return model.eval()

    def save_processor(self, d, **kw):
        args = dict(do_resize=True, size={"height": 32, "width": 32}, resample=2, do_rescale=True,
                     rescale_factor=1 / 255, do_normalize=True, image_mean=MEAN, image_std=STD, do_convert_rgb=True)
        args.update(kw)
        if self.proc_cls:
            self.proc_cls(**args).save_pretrained(d)
            return
        cfg = dict(args, image_processor_type="ViTImageProcessor")
        with open(os.path.join(d, "preprocessor_config.json"), "w") as f:
            json.dump(cfg, f, indent=2)

    def build(self):
        tf, torch = self.tf, self.torch
        torch.manual_seed(1)
        cls = self.perturb(tf.ViTForImageClassification(self.vit_config()), 2)
        d = os.path.join(self.out, "vit_cls")
        cls.save_pretrained(d, safe_serialization=True)
        self.save_processor(d)
        torch.manual_seed(3)
        body = self.perturb(tf.ViTModel(self.vit_config()), 4)  # with its pooler
        dm = os.path.join(self.out, "vit_model")
        body.save_pretrained(dm, safe_serialization=True)
        self.save_processor(dm)
        torch.manual_seed(5)
        nob = self.perturb(tf.ViTModel(self.vit_config(qkv_bias=False, hidden_act="gelu_new", image_size=[32, 24],
                                                       num_channels=3), add_pooling_layer=False), 6)
        dn = os.path.join(self.out, "vit_nobias")
        nob.save_pretrained(dn, safe_serialization=True)
        self.save_processor(dn, size={"height": 32, "width": 24})
        return {"cls": (d, cls), "model": (dm, body), "nobias": (dn, nob)}

    def legacy(self, d, model):
        """The same weights under transformers 4.x's names (as checkpoints on the hub hold them)."""
        from safetensors.numpy import load_file, save_file
        ren = [("layers.", "encoder.layer."), ("attention.q_proj", "attention.attention.query"),
               ("attention.k_proj", "attention.attention.key"), ("attention.v_proj", "attention.attention.value"),
               ("attention.o_proj", "attention.output.dense"), ("mlp.fc1", "intermediate.dense"),
               ("mlp.fc2", "output.dense")]
        w = load_file(os.path.join(d, "model.safetensors"))
        out = {}
        for k, v in w.items():
            for a, b in ren:
                k = k.replace(a, b)
            out[k] = v
        dl = os.path.join(self.out, "vit_legacy")
        shutil.copytree(d, dl)
        save_file(out, os.path.join(dl, "model.safetensors"), metadata={"format": "pt"})
        return dl

    # ---- the model ----
    def pixels(self, seed, B, h=32, w=32):
        g = self.torch.Generator().manual_seed(seed)
        return self.torch.randn(B, 3, h, w, generator=g)

    def check_model(self, name, d, model):
        np, torch = self.np, self.torch
        s, h, err = self.open(d)
        if s:
            self.check(False, f"{name}: open failed: {err}")
            return
        try:
            hh, ww = model.config.image_size if isinstance(model.config.image_size, list) else [32, 32]
            x = self.pixels(7, 3, hh, ww)
            xn = np.ascontiguousarray(x.numpy(), np.float32)
            m64 = __import__("copy").deepcopy(model).double()
            with torch.no_grad():
                out = m64(x.double())
                ref_h = (m64.vit(x.double()) if hasattr(out, "logits") else out).last_hidden_state.numpy()
            T = self.L.attn_pretrained_image_tokens(h)
            if hasattr(out, "logits"):
                got = np.zeros((3, 10), np.float32)
                st = self.L.attn_pretrained_classify(h, xn.ctypes.data, 3, hh, ww, got.ctypes.data)
                e = self.measure("logits", self.rel(got, out.logits.numpy()) if st == 0 else float("inf"))
                self.check(e <= TOL, f"{name}: logits, rel err {e:.2e} ({self.L.attn_last_error().decode()})")
                labels = [self.L.attn_pretrained_label(h, i).decode() for i in range(10)]
                self.check(labels == [model.config.id2label[i] for i in range(10)], f"{name}: labels {labels}")
                self.check_bf16(name, h, xn, hh, ww, model, x, out.logits.numpy(), got)
                self.check_flops(name, h, model, x, T)
            else:
                got = np.zeros(1, np.float32)
                st = self.L.attn_pretrained_classify(h, xn.ctypes.data, 3, hh, ww, got.ctypes.data)
                self.check(st != 0 and "classifier" in self.L.attn_last_error().decode(),
                           f"{name}: classify refused on a ViTModel: {self.L.attn_last_error().decode()}")
            hid = np.zeros((3, T, 32), np.float32)
            st = self.L.attn_pretrained_image_hidden_states(h, xn.ctypes.data, 3, hh, ww, hid.ctypes.data)
            e = self.measure("hidden states", self.rel(hid, ref_h) if st == 0 else float("inf"))
            self.check(e <= TOL and hid.shape == ref_h.shape, f"{name}: last hidden state, rel err {e:.2e}")
            st = self.L.attn_pretrained_image_hidden_states(h, xn.ctypes.data, 1, hh + 8, ww, hid.ctypes.data)
            msg = self.L.attn_last_error().decode()
            self.check(st != 0 and f"{hh + 8}x{ww}" in msg and f"{hh}x{ww}" in msg, f"{name}: other size refused: {msg}")
        finally:
            self.L.attn_pretrained_free(h)

    def check_flops(self, name, h, model, x, T):
        """attn_pretrained_flops of the classification (seq = the image's tokens) against torch's
        FlopCounterMode on the same forward: the patch embedding, the layers' products and attention
        and the classifier."""
        from torch.utils.flop_counter import FlopCounterMode
        with FlopCounterMode(display=False) as fc, self.torch.no_grad():
            model.float()(x.float())
        got, want = self.L.attn_pretrained_flops(h, x.shape[0], T, 0), fc.get_total_flops()
        print(f"  {name}: flops of {x.shape[0]} images: attn {got:.0f}, FlopCounterMode {want}")
        self.check(got == want and want > 0, f"{name}: attn_pretrained_flops {got:.0f}, FlopCounterMode {want}")

    def check_bf16(self, name, h, xn, hh, ww, model, x, ref, f32):
        """bf16 (attn_pretrained_set_precision): logits within 2x the error of PyTorch's bf16 autocast
        against float64, not fp32's, and fp32's again after going back."""
        np, torch = self.np, self.torch
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            tb = model.float()(x.float()).logits.float().double().numpy()
        got = np.zeros_like(f32)
        st = self.L.attn_pretrained_set_precision(h, 1)
        if not st:
            st = self.L.attn_pretrained_classify(h, xn.ctypes.data, 3, hh, ww, got.ctypes.data)
        a_err, t_err = self.rel(got, ref), self.rel(tb, ref)
        print(f"  {name}: bf16 logits vs float64: attn {a_err:.2e}, torch bf16 autocast {t_err:.2e}")
        self.check(st == 0 and np.isfinite(got).all() and a_err <= 2 * t_err and not np.array_equal(got, f32),
                   f"{name}: bf16 logits, rel err {a_err:.2e} against torch bf16's {t_err:.2e} (status {st})")
        self.L.attn_pretrained_set_precision(h, 0)
        st = self.L.attn_pretrained_classify(h, xn.ctypes.data, 3, hh, ww, got.ctypes.data)
        self.check(st == 0 and np.array_equal(got, f32), f"{name}: fp32 after bf16 gives fp32's logits again")

    # ---- preprocessing ----
    def reference_pixels(self, a, size=(32, 32), mean=MEAN, std=STD, factor=1 / 255):
        """The processor's pixel_values [3, H, W] float32 for the uint8 image a [h, w(, 3)]."""
        np, torch = self.np, self.torch
        if a.ndim == 2:
            a = np.repeat(a[:, :, None], 3, axis=2)  # do_convert_rgb: gray to RGB
        if self.proc_cls:
            p = self.proc_cls(size={"height": size[0], "width": size[1]}, image_mean=mean, image_std=std,
                              rescale_factor=factor, do_convert_rgb=True)
            return p(images=a, return_tensors="pt").pixel_values[0].numpy()
        t = torch.from_numpy(np.ascontiguousarray(a)).permute(2, 0, 1)[None]  # as the backend holds it
        if tuple(t.shape[-2:]) != tuple(size):
            t = torch.nn.functional.interpolate(t, size=size, mode="bilinear", align_corners=False, antialias=True)
        m = torch.tensor(mean) * (1.0 / factor)
        s = torch.tensor(std) * (1.0 / factor)
        return ((t[0].to(torch.float32) - m[:, None, None]) / s[:, None, None]).numpy()

    def image_input(self, h, a):
        np = self.np
        a3 = np.ascontiguousarray(a)
        img = Img(a3.shape[1], a3.shape[0], 1 if a3.ndim == 2 else 3, a3.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)))
        out = np.zeros((3, 32, 32), np.float32)
        st = self.L.attn_pretrained_image_input(h, ctypes.byref(img), out.ctypes.data)
        return st, out

    def images(self):
        np = self.np
        rng = np.random.default_rng(11)
        ims = {}
        for name, (hh, ww) in {"same": (32, 32), "down": (45, 50), "up": (20, 27), "tall": (97, 13)}.items():
            a = rng.integers(0, 256, (hh, ww, 3), dtype=np.uint8)
            a[: hh // 2, : ww // 3] = (250, 20, 90)  # an edge for the resize to cross
            ims[name] = a
        ims["gray"] = rng.integers(0, 256, (40, 36), dtype=np.uint8)
        return ims

    def check_preprocess(self, d, ims):
        np, torch = self.np, self.torch
        s, h, err = self.open(d)
        if s:
            self.check(False, f"preprocess: open failed: {err}")
            return
        try:
            for name, a in ims.items():
                st, got = self.image_input(h, a)
                ref = self.reference_pixels(a)
                same = st == 0 and np.array_equal(got, ref)
                diff = float(np.abs(got - ref).max()) if st == 0 else float("inf")
                self.check(same, f"preprocess {name} {a.shape}: bit for bit with the processor (max diff {diff:.3g})")
            # the backend may hold the image channels-last: torch's uint8 kernels give the same bytes
            a = ims["down"]
            t = torch.from_numpy(a).permute(2, 0, 1)[None].contiguous(memory_format=torch.channels_last)
            r = torch.nn.functional.interpolate(t, size=(32, 32), mode="bilinear", align_corners=False, antialias=True)
            t2 = torch.from_numpy(np.ascontiguousarray(a.transpose(2, 0, 1)))[None]
            r2 = torch.nn.functional.interpolate(t2, size=(32, 32), mode="bilinear", align_corners=False, antialias=True)
            self.check(torch.equal(r, r2), "preprocess: torch's uint8 resize is the same channels-last and planar")
        finally:
            self.L.attn_pretrained_free(h)

    # ---- attn classify ----
    def run_cli(self, *args):
        r = subprocess.run([self.attn, *args], capture_output=True, text=True, timeout=300)
        return r.returncode, r.stdout, r.stderr

    def parse_classify(self, text):
        res, cur = {}, None
        for line in text.splitlines():
            if not line.startswith("  "):
                cur = line
                res[cur] = []
            else:
                p, i, label = line.split(None, 2)
                res[cur].append((float(p), int(i), label))
        return res

    def check_classify(self, d, model, ims):
        np, torch = self.np, self.torch
        files = {}
        for name, a in ims.items():
            path = os.path.join(self.out, f"{name}.{'pgm' if a.ndim == 2 else 'ppm'}")
            write_pnm(path, a)
            files[path] = a
        if self.L.attn_image_png_supported():
            path = os.path.join(self.out, "down.png")
            write_png(path, ims["down"])
            files[path] = ims["down"]
        paths = list(files)
        listing = os.path.join(self.out, "images.txt")
        with open(listing, "w") as f:
            f.write("\n".join(paths[2:]) + "\n")
        rc, out, err = self.run_cli("classify", "--model", d, "--image", paths[0], "--image", paths[1], "--input",
                                    listing, "--top", "5")
        self.check(rc == 0, f"classify: exit {rc}: {err.strip()}")
        got = self.parse_classify(out)
        m64 = __import__("copy").deepcopy(model).double()
        for path, a in files.items():
            x = torch.from_numpy(self.reference_pixels(a))[None].double()
            with torch.no_grad():
                prob = torch.softmax(m64(x).logits[0], -1).numpy()
            order = sorted(range(10), key=lambda i: (-prob[i], i))[:5]
            want = [(float(prob[i]), i, model.config.id2label[i]) for i in order]
            have = got.get(path, [])
            labels_ok = [(i, lab) for _, i, lab in have] == [(i, lab) for _, i, lab in want]
            dp = max((abs(p - q) for (p, _, _), (q, _, _) in zip(have, want)), default=float("inf"))
            self.measure("classify probability (abs)", dp)
            self.check(labels_ok and dp <= TOL, f"classify {os.path.basename(path)} {a.shape}: top-5 {have} vs "
                       f"{want}, max prob diff {dp:.2e}")
        rc, out, err = self.run_cli("classify", "--model", d, "--image", paths[0], "--top", "20")
        self.check(rc == 0 and len(self.parse_classify(out).get(paths[0], [])) == 10, f"classify --top 20: {out}")
        rc, out, err = self.run_cli("classify", "--model", d, "--image", paths[0], "--top", "3", "--precision", "bf16")
        top_b = self.parse_classify(out).get(paths[0], [])
        dp = max((abs(p - q) for (p, _, _), (q, _, _) in zip(top_b, got.get(paths[0], []))), default=float("inf"))
        self.check(rc == 0 and len(top_b) == 3 and dp < 5e-2,
                   f"classify --precision bf16: top-3 probabilities within 5e-2 of fp32's ({dp:.2e}): {err.strip()}")
        rc, out, err = self.run_cli("classify", "--model", d, "--image", paths[0], "--precision", "fp16")
        self.check(rc == 2 and "fp16" in err, f"classify --precision fp16: usage error: {err.strip()}")
        bad = os.path.join(self.out, "bad.ppm")
        with open(bad, "wb") as f:
            f.write(b"P6\n4 4\n255\n\x00")
        rc, out, err = self.run_cli("classify", "--model", d, "--image", bad)
        self.check(rc == 1 and "bad.ppm" in err, f"classify: a truncated image refused: {err.strip()}")
        self.check_bench(d)
        return paths

    def check_bench(self, d):
        """`attn bench model` on a ViT: images/s rows in both precisions whose GFLOP/s x ms is the
        classification's flop count (checked against FlopCounterMode above); the text options refused."""
        rc, out, err = self.run_cli("bench", "model", "--model", d, "--batch", "3", "--rounds", "2", "--threads", "1",
                                    "--precision", "fp32,bf16", "--json")
        rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        h = self.open(d)[1]
        flops = self.L.attn_pretrained_flops(h, 3, self.L.attn_pretrained_image_tokens(h), 0)
        self.L.attn_pretrained_free(h)
        ok = rc == 0 and [(r["op"], r["precision"]) for r in rows] == [("model_image", "fp32"), ("model_image", "bf16")]
        ok = ok and all(r["images_per_s"] > 0 and abs(r["gflops"] * r["ms"] * 1e6 - flops) <= 1e-3 * flops and
                        r["shape"] == {"batch": 3, "height": 32, "width": 32} for r in rows)
        self.check(ok, f"bench model on a ViT: exit {rc}, rows {rows}, flops {flops:.0f}: {err.strip()}")
        rc, out, err = self.run_cli("bench", "model", "--model", d, "--seq", "5")
        self.check(rc == 2 and "--seq" in err and "image" in err, f"bench model --seq on a ViT refused: {err.strip()}")

    # ---- attention capture ----
    def capture_records(self, h, ids=None, pixels=None, layers=2):
        np = self.np
        cap = ctypes.c_void_p()
        self.L.attn_capture_create(ctypes.byref(cap))
        self.L.attn_capture_add(cap, b"*", 0, 0, 0, 0)
        try:
            if ids is not None:
                a = np.ascontiguousarray(ids, np.int32)
                st = self.L.attn_pretrained_capture(h, a.ctypes.data, len(a), None, 0, 0, cap)
            else:
                st = self.L.attn_pretrained_capture(h, None, 0, pixels.ctypes.data, pixels.shape[-2],
                                                    pixels.shape[-1], cap)
            if st:
                return None, self.L.attn_last_error().decode()

            class Rec(ctypes.Structure):
                _fields_ = [("module", ctypes.c_char_p)] + [(k, ctypes.c_int64) for k in
                                                            ("batch", "heads", "rows", "nk", "head0", "row0",
                                                             "num_heads", "nq")] + [("weights", ctypes.POINTER(ctypes.c_float))]
            out = []
            for layer in range(layers):
                r = Rec()
                if self.L.attn_capture_find(cap, f"layers.{layer}.self_attn".encode(), ctypes.byref(r)):
                    return None, self.L.attn_last_error().decode()
                n = r.batch * r.heads * r.rows * r.nk
                out.append(np.ctypeslib.as_array(r.weights, (n,)).reshape(r.heads, r.rows, r.nk).copy())
            return out, ""
        finally:
            self.L.attn_capture_free(cap)

    def compare_attn(self, name, recs, ref):
        errs = [self.measure("attention (capture)", self.rel(a, b)) for a, b in zip(recs, ref)] if recs is not None \
            else [float("inf")]
        ok = recs is not None and len(recs) == len(ref) and all(e <= TOL for e in errs)
        self.check(ok, f"{name}: attention of every layer and head, rel errs {['%.1e' % e for e in errs]}")

    def viz_cli(self, name, d, ref, *inp, overlay=False):
        base = os.path.join(self.out, f"viz_{name}")
        args = ["viz", "--model", d, *inp, "--csv", base + ".csv", "--html", base + ".html", "--svg", base + ".svg"]
        if overlay:
            args += ["--rollout", "--overlay", base + "_overlay.ppm"]
        rc, out, err = self.run_cli(*args)
        self.check(rc == 0, f"viz --model {name}: exit {rc}: {err.strip()}")
        written = [p for p in (base + ".csv", base + ".html", base + "-L0-h0.svg") + ((base + "_overlay.ppm",)
                   if overlay else ()) if os.path.isfile(p) and os.path.getsize(p) > 0]
        self.check(len(written) == (4 if overlay else 3), f"viz --model {name}: outputs written: {written}\n{out}")
        got = [self.np.zeros_like(r) for r in ref]
        seen = [self.np.zeros(r.shape, bool) for r in ref]
        if os.path.isfile(base + ".csv"):
            with open(base + ".csv") as f:
                for row in csv.DictReader(f):
                    if not row["head"].isdigit() or not row["layer"].lstrip("-").isdigit() or int(row["layer"]) < 0:
                        continue
                    L, hd, q, k = int(row["layer"]), int(row["head"]), int(row["query"]), int(row["key"])
                    got[L][hd, q, k] = float(row["weight"])
                    seen[L][hd, q, k] = True
        errs = [self.measure("attention (viz CSV)", self.rel(a, b)) for a, b in zip(got, ref)]
        self.check(all(s.all() for s in seen) and all(e <= TOL for e in errs),
                   f"viz --model {name}: CSV = output_attentions, rel errs {['%.1e' % e for e in errs]}")

    def bert_folder(self):
        tf, torch = self.tf, self.torch
        cfg = tf.BertConfig(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                            intermediate_size=64, max_position_embeddings=64, initializer_range=0.3,
                            attn_implementation="eager")
        torch.manual_seed(21)
        m = self.perturb(tf.BertModel(cfg), 22)
        d = os.path.join(self.out, "bert")
        m.save_pretrained(d, safe_serialization=True)
        vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", "##s", "a", "dog"]
        vocab += [f"w{i}" for i in range(120 - len(vocab))]
        with open(os.path.join(d, "vocab.txt"), "w") as f:
            f.write("\n".join(vocab) + "\n")
        tok = tf.BertTokenizerFast(os.path.join(d, "vocab.txt"))
        tok.save_pretrained(d)
        return d, m, tok

    def gpt2_folder(self):
        tf, torch, tk = self.tf, self.torch, self.tk
        d = os.path.join(self.out, "gpt2")
        os.makedirs(d)
        bpe = tk.ByteLevelBPETokenizer()
        lines = [" ".join(["the cat sat on the mat", "a dog ran", "attention is all"][i % 3] for _ in range(3))
                 for i in range(300)]
        bpe.train_from_iterator(lines, vocab_size=280, min_frequency=2, special_tokens=["<|endoftext|>"])
        tok = tf.GPT2TokenizerFast(tokenizer_object=bpe._tokenizer, eos_token="<|endoftext|>",
                                   bos_token="<|endoftext|>", unk_token="<|endoftext|>")
        tok.save_pretrained(d)
        cfg = tf.GPT2Config(vocab_size=len(tok), n_embd=32, n_layer=2, n_head=4, n_positions=64,
                            initializer_range=0.3, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                            attn_implementation="eager")
        torch.manual_seed(31)
        m = self.perturb(tf.GPT2LMHeadModel(cfg), 32)
        m.save_pretrained(d, safe_serialization=True)
        return d, m, tok

    def check_text_attention(self, name, d, model, tok, text):
        torch = self.torch
        ids = tok(text)["input_ids"]
        m64 = __import__("copy").deepcopy(model).double()
        with torch.no_grad():
            ref = [a[0].numpy() for a in m64(torch.tensor([ids]), output_attentions=True).attentions]
        s, h, err = self.open(d)
        if s:
            self.check(False, f"{name}: open failed: {err}")
            return
        try:
            recs, err = self.capture_records(h, ids=ids)
            if err:
                self.check(False, f"{name}: capture: {err}")
            else:
                self.compare_attn(f"{name} capture ({len(ids)} tokens)", recs, ref)
        finally:
            self.L.attn_pretrained_free(h)
        self.viz_cli(name, d, ref, "--text", text)

    def check_vit_attention(self, d, model, path, a):
        np, torch = self.np, self.torch
        x = self.reference_pixels(a)
        m64 = __import__("copy").deepcopy(model).double()
        with torch.no_grad():
            ref = [t[0].numpy() for t in m64(torch.from_numpy(x)[None].double(), output_attentions=True).attentions]
        s, h, err = self.open(d)
        if s:
            self.check(False, f"vit capture: open failed: {err}")
            return
        try:
            recs, err = self.capture_records(h, pixels=np.ascontiguousarray(x[None], np.float32))
            if err:
                self.check(False, f"vit capture: {err}")
            else:
                self.compare_attn("vit capture", recs, ref)
        finally:
            self.L.attn_pretrained_free(h)
        self.viz_cli("vit", d, ref, "--image", path, overlay=True)

    def check_refusals(self, folders, bert_dir, ppm):
        rc, out, err = self.run_cli("classify", "--model", folders["model"][0], "--image", ppm)
        self.check(rc == 1 and "classifier" in err, f"classify on a ViTModel refused: {err.strip()}")
        rc, out, err = self.run_cli("classify", "--model", bert_dir, "--image", ppm)
        self.check(rc == 1 and "bert" in err, f"classify on a BERT folder refused: {err.strip()}")
        rc, out, err = self.run_cli("viz", "--model", bert_dir, "--image", ppm, "--csv", os.path.join(self.out, "x.csv"))
        self.check(rc == 1 and "bert" in err, f"viz --model BERT --image refused: {err.strip()}")
        rc, out, err = self.run_cli("viz", "--model", bert_dir, "--tokens", "1,2", "--csv", os.path.join(self.out, "x.csv"))
        self.check(rc == 2 and "--tokens" in err, f"viz --model --tokens refused: {err.strip()}")

    def run(self):
        folders = self.build()
        for k, (d, m) in folders.items():
            self.check_model(k, d, m)
        self.check_model("legacy names", self.legacy(*folders["cls"]), folders["cls"][1])
        ims = self.images()
        self.check_preprocess(folders["cls"][0], ims)
        paths = self.check_classify(*folders["cls"], ims)
        bd, bm, btok = self.bert_folder()
        self.check_text_attention("bert", bd, bm, btok, "the cat sat on the mats")
        gd, gm, gtok = self.gpt2_folder()
        self.check_text_attention("gpt2", gd, gm, gtok, "the cat sat on the mat, a dog ran")
        self.check_vit_attention(folders["cls"][0], folders["cls"][1], paths[0], ims["same"])
        self.check_refusals(folders, bd, paths[0])


if __name__ == "__main__":
    sys.exit(main())
