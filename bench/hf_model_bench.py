"""attn against PyTorch and ONNX Runtime on the same Hugging Face folders: embeddings, prefill, decode.

For each folder and thread count it runs `attn bench model --json --rounds 1` (fp32, and bf16 for
an encoder) and, in this process, the same computation through PyTorch 2.x transformers (fp32, and
fp32 weights under torch.autocast("cpu", dtype=torch.bfloat16)) and ONNX Runtime (the model
exported once with torch.onnx.export, fp32, all graph optimisations), alternating: every round runs
every implementation once, in a rotated order, so that a shared machine's drift falls on all of
them alike. One table: per cell the median tokens/s over the rounds, [min, max], GFLOP/s (attn's
count, attn_pretrained_flops, for every implementation), the fraction of attn's measured FMA peak
(`attn bench peak` after each cell, the best of the run; bf16 rows: of the bf16 kernels' peak)
and attn's speed-up over each peer.

  embed    an encoder: B x N tokens (all real) -> last hidden state -> mean pooling, as
           attn_pretrained_embed (no tokenizer in the timing)
  prefill  a causal LM: the logits of a P-token prompt (batch 1), as attn_pretrained_logits
  decode   a causal LM, batch 1: greedy steps after a P-token prompt on the model's KV cache
           (PyTorch: past_key_values; ONNX Runtime: not run, the export has no cache); the time per
           new token between the first and the last of T

Usage (the venv with torch, transformers, onnx, onnxruntime):
  /work/hfvenv/bin/python bench/hf_model_bench.py --make-folders /tmp/hfm
  /work/hfvenv/bin/python bench/hf_model_bench.py --folders /tmp/hfm [--attn build/attn]
      [--models bert-base,minilm,gpt2,llama] [--threads 1,2] [--rounds 5] [--batch 32] [--seq 128]
      [--prompt 128] [--new 64] [--peers torch,torch_bf16,ort] [--no-bf16] [--json]

--make-folders builds random-weight folders (initializer_range 0.02, as trained models' scale) from
configs: bert-base (12 x 768, 12 heads, 3072), minilm (6 x 384, 12 heads, 1536), gpt2 (12 x 768, 12
heads, vocab 50257, 1024 positions), llama (8 x 1024, 16 query / 4 key-value heads, SwiGLU 2816,
vocab 32000, untied), each with model.safetensors and config.json, and model.onnx
(the exported forward) for ONNX Runtime."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SHAPES = {
    "bert-base": ("bert", dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)),
    "minilm": ("bert", dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536)),
    "gpt2": ("gpt2", dict(n_embd=768, n_layer=12, n_head=12)),
    # a Llama-shaped decoder small enough for two cores: GQA 16 / 4 heads, SwiGLU, untied head
    "llama": ("llama", dict(hidden_size=1024, num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=4,
                            intermediate_size=2816, tie_word_embeddings=False)),
}
CAUSAL = ("gpt2", "llama", "mistral", "qwen2")


def forward_module():
    import torch

    class Forward(torch.nn.Module):
        """The model called by keyword (its positional arguments differ between versions), one output."""

        def __init__(self, model, names, out):
            super().__init__()
            self.model, self.names, self.out = model, names, out

        def forward(self, *args):
            return getattr(self.model(**dict(zip(self.names, args))), self.out)

    return Forward


def onnx_error(model, path, names, out):
    """The exported graph's relative error against the model on another shape than the traced one."""
    import numpy as np
    import onnxruntime as ort
    import torch
    ids = torch.randint(0, 1000, (3, 40))
    feed = dict(zip(names, (ids.numpy(), np.ones((3, 40), dtype=np.int64))))
    got = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feed)[0]
    with torch.no_grad():
        ref = getattr(model(**{k: torch.from_numpy(v) for k, v in feed.items()}), out).numpy()
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref))


def make_folders(root, names):
    import torch
    from transformers import BertConfig, BertModel, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
    Forward = forward_module()
    torch.manual_seed(0)
    for name in names:
        if name not in SHAPES:
            raise SystemExit(f"hf_model_bench: unknown model {name!r} (known: {', '.join(SHAPES)})")
        family, kw = SHAPES[name]
        d = os.path.join(root, name)
        os.makedirs(d, exist_ok=True)
        if family == "bert":
            m = BertModel(BertConfig(vocab_size=30522, max_position_embeddings=512, **kw), add_pooling_layer=False)
            ids = torch.zeros(2, 16, dtype=torch.long)
            args, names = (ids, torch.ones_like(ids)), ["input_ids", "attention_mask"]
            outs = ["last_hidden_state"]
        else:
            if family == "gpt2":
                m = GPT2LMHeadModel(GPT2Config(vocab_size=50257, n_positions=1024, **kw))
            else:
                m = LlamaForCausalLM(LlamaConfig(vocab_size=32000, max_position_embeddings=2048, **kw))
            ids = torch.zeros(2, 16, dtype=torch.long)
            args, names, outs = (ids, torch.ones_like(ids)), ["input_ids", "attention_mask"], ["logits"]
        m.eval().save_pretrained(d, safe_serialization=True)
        # the TorchScript exporter (the dynamo one needs onnxscript) traces the eager attention
        # correctly; transformers 5's SDPA mask path comes out wrong at other shapes
        m = type(m).from_pretrained(d, attn_implementation="eager").eval()
        if family in CAUSAL:
            m.config.use_cache = False
        dyn = {n: {0: "batch", 1: "seq"} for n in names + outs}
        path = os.path.join(d, "model.onnx")
        try:
            with torch.no_grad():
                torch.onnx.export(Forward(m, names, outs[0]).eval(), args, path, input_names=names, output_names=outs,
                                  dynamic_axes=dyn, opset_version=17, dynamo=False)
            err = onnx_error(m, path, names, outs[0])
        except Exception as e:  # noqa: BLE001 - any exporter failure only drops ONNX Runtime for this folder
            err = f"{type(e).__name__}: {str(e)[:160]}"
        if not isinstance(err, float) or err > 1e-4:
            if os.path.exists(path):
                os.remove(path)
            print(f"{d}: no model.onnx (ONNX Runtime is not run on it): export {err}")
        print(f"{d}: {family}, {kw}")


class Peers:
    """The PyTorch and ONNX Runtime sides of one folder; each call returns seconds per unit."""

    def __init__(self, folder, a):
        import numpy as np
        import torch
        from transformers import AutoConfig, AutoModel, AutoModelForCausalLM
        self.a, self.torch, self.np = a, torch, np
        cfg = AutoConfig.from_pretrained(folder)
        self.causal = cfg.model_type in CAUSAL
        # the encoder as attn runs it: no pooler (BertModel's pooler is not part of the embeddings)
        kw = {} if self.causal else {"add_pooling_layer": False}
        self.model = (AutoModelForCausalLM if self.causal else AutoModel).from_pretrained(folder, **kw).eval()
        g = torch.Generator().manual_seed(1)
        # a causal LM's prefill is a prompt's: batch 1 x --prompt tokens
        self.batch, self.seq = (1, a.prompt) if self.causal else (a.batch, a.seq)
        self.ids = torch.randint(0, cfg.vocab_size, (self.batch, self.seq), generator=g)
        self.prompt = torch.randint(0, cfg.vocab_size, (1, a.prompt), generator=g)
        self.mask = torch.ones_like(self.ids)
        self.onnx = os.path.join(folder, "model.onnx")
        self.sessions = {}

    def _embed(self):
        h = self.model(input_ids=self.ids, attention_mask=self.mask).last_hidden_state
        m = self.mask.unsqueeze(-1).to(h.dtype)
        return (h * m).sum(1) / m.sum(1)

    def run(self, impl, threads):
        torch = self.torch
        torch.set_num_threads(threads)
        if impl == "ort":
            return self._ort(threads)
        ctx = torch.autocast("cpu", dtype=torch.bfloat16) if impl == "torch_bf16" else torch.autocast("cpu",
                                                                                                     enabled=False)
        with torch.inference_mode(), ctx:
            t0 = time.perf_counter()
            if not self.causal:
                self._embed()
            elif self.op == "prefill":
                self.model(input_ids=self.ids).logits
            else:
                return self._decode()
            return time.perf_counter() - t0

    def _decode(self):
        out = self.model(input_ids=self.prompt, use_cache=True)
        past, tok = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
        t0 = time.perf_counter()
        for _ in range(self.a.new - 1):
            out = self.model(input_ids=tok, past_key_values=past, use_cache=True)
            past, tok = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
        return (time.perf_counter() - t0) / (self.a.new - 1)

    def _ort(self, threads):
        import onnxruntime as ort
        if self.op == "decode" or not os.path.exists(self.onnx):
            return None
        s = self.sessions.get(threads)
        if s is None:
            o = ort.SessionOptions()
            o.intra_op_num_threads = threads
            o.inter_op_num_threads = 1
            o.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            s = self.sessions[threads] = ort.InferenceSession(self.onnx, o, providers=["CPUExecutionProvider"])
        feed = {"input_ids": self.ids.numpy(), "attention_mask": self.mask.numpy()}
        t0 = time.perf_counter()
        h = s.run(None, feed)[0]
        if not self.causal:
            h.mean(1)  # every token is real: the masked mean is the mean
        return time.perf_counter() - t0


def attn_cmd(a, peers, folder, op, threads, precision):
    cmd = [a.attn, "bench", "model", "--model", folder, "--threads", str(threads), "--rounds", "1", "--json",
           "--batch", str(peers.batch), "--seq", str(peers.seq), "--prompt", str(a.prompt), "--new", str(a.new),
           "--precision", precision]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"hf_model_bench: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr.strip()}")
    rows = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    r = next(r for r in rows if r["op"] == "model_" + op)
    return r["ms"] * 1e-3, r


PEAKS = {}


def peak(a, threads, bf16):
    """The FMA and bf16 peaks with this many threads: the best measured so far in this run (a
    neighbour only lowers a peak loop's speed, so the best sitting is the capability)."""
    cmd = [a.attn, "bench", "peak", "--threads", str(threads), "--json"] + (["--dtype", "f32,bf16"] if bf16 else [])
    rows = [json.loads(line) for line in subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            .splitlines() if line.startswith("{")]
    f32 = next(r["gflops"] for r in rows if r["op"] == "fma_peak")
    b16 = [r["gflops"] for r in rows if r["op"] in ("amx_peak", "bf16_peak")]
    old = PEAKS.get(threads, (0.0, 0.0))
    PEAKS[threads] = (max(old[0], f32), max(old[1], b16[-1] if b16 else f32))
    return PEAKS[threads]


def bench_folder(a, name, folder, results):
    peers = Peers(folder, a)
    ops = ["prefill", "decode"] if peers.causal else ["embed"]
    impls = ["attn"] + (["attn_bf16"] if a.bf16 and not peers.causal else []) + a.peers
    for op in ops:
        peers.op = op
        for t in a.threads:
            cells = {i: [] for i in impls}
            flops, tokens = None, None
            for impl in impls:  # warm-up: weights paged in, workspaces grown, ORT session built
                if not impl.startswith("attn"):
                    peers.run(impl, t)
            for rnd in range(a.rounds):
                order = impls[rnd % len(impls):] + impls[:rnd % len(impls)]
                for impl in order:
                    if impl.startswith("attn"):
                        s, row = attn_cmd(a, peers, folder, op, t, "bf16" if impl == "attn_bf16" else "fp32")
                        flops = row["gflops"] * 1e9 * s
                        tokens = row["tokens_per_s"] * s
                    else:
                        s = peers.run(impl, t)
                    if s is not None:
                        cells[impl].append(s)
            f32_peak, bf16_peak = peak(a, t, a.bf16 or "torch_bf16" in a.peers)
            for impl in impls:
                if not cells[impl]:
                    continue
                med = statistics.median(cells[impl])
                bf = impl.endswith("bf16")
                results.append(dict(model=name, op=op, impl=impl, threads=t, rounds=len(cells[impl]),
                                    tokens_per_s=tokens / med, tokens_per_s_min=tokens / max(cells[impl]),
                                    tokens_per_s_max=tokens / min(cells[impl]), gflops=flops / med * 1e-9,
                                    peak_fraction=flops / med * 1e-9 / (bf16_peak if bf else f32_peak)))
                if a.json:
                    print(json.dumps(results[-1]), flush=True)


def print_table(results):
    for r in results:  # every row against the best peak of the whole run
        r["peak_fraction"] = r["gflops"] / PEAKS[r["threads"]][1 if r["impl"].endswith("bf16") else 0]
    print(f"{'model':<10} {'op':<8} {'impl':<11} {'thr':>3} {'tokens/s':>10} {'[min':>10} {'max]':>9} "
          f"{'GFLOP/s':>8} {'peak':>6} {'attn fp32 /':>11}")
    for r in results:
        base = next(x for x in results if (x["model"], x["op"], x["threads"]) == (r["model"], r["op"], r["threads"])
                    and x["impl"] == "attn")
        ratio = base["tokens_per_s"] / r["tokens_per_s"]
        print(f"{r['model']:<10} {r['op']:<8} {r['impl']:<11} {r['threads']:>3} {r['tokens_per_s']:>10.1f} "
              f"{r['tokens_per_s_min']:>10.1f} {r['tokens_per_s_max']:>9.1f} {r['gflops']:>8.1f} "
              f"{100 * r['peak_fraction']:>5.1f}% {ratio:>10.2f}x")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--make-folders", metavar="DIR", help="build the random-weight folders in DIR and exit")
    ap.add_argument("--folders", metavar="DIR", help="the folders --make-folders built")
    ap.add_argument("--attn", default=os.path.join(HERE, "..", "build", "attn"))
    ap.add_argument("--models", default="bert-base,minilm,gpt2,llama")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--peers", default="torch,torch_bf16,ort")
    ap.add_argument("--no-bf16", dest="bf16", action="store_false", help="no attn bf16 rows")
    ap.add_argument("--json", action="store_true", help="one JSON object per cell as it is measured")
    a = ap.parse_args()
    if a.make_folders:
        make_folders(a.make_folders, a.models.split(","))
        return 0
    if not a.folders:
        raise SystemExit("hf_model_bench: --folders DIR (or --make-folders DIR) is required")
    a.threads = [int(t) for t in a.threads.split(",")]
    a.peers = [p for p in a.peers.split(",") if p]
    unknown = set(a.peers) - {"torch", "torch_bf16", "ort"}
    if unknown or not 1 <= a.rounds <= 1000 or a.new < 2:
        raise SystemExit(f"hf_model_bench: bad --peers {sorted(unknown)}, --rounds or --new")
    results = []
    for name in a.models.split(","):
        bench_folder(a, name, os.path.join(a.folders, name), results)
    if not a.json:
        print(f"{a.rounds} rounds alternated; batch {a.batch} x seq {a.seq}; decode: prompt {a.prompt}, "
              f"{a.new} new tokens, batch 1")
        print_table(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
