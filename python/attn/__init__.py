"""attn: attention mechanisms and transformer models in C11 -- the Python layer.

A thin binding (ctypes, no compiled extension) over libattn.so:

* :func:`scaled_dot_product_attention` / :func:`scaled_dot_product_attention_backward` on NumPy
  arrays (attn.functional), with PyTorch's argument names and mask semantics;
* ``attn.torch``: an autograd Function and a drop-in for torch.nn.functional.scaled_dot_product_attention;
* :class:`Model`: the models of ``attn run`` (MultiheadAttention, Transformer layers, stacks,
  nn.Transformer) with safetensors weights, backward and the attention capture (:class:`Capture`);
* :func:`from_pretrained`: a Hugging Face folder (BERT / sentence-transformers, GPT-2) with its
  tokenizer: token ids, sentence embeddings, hidden states, logits, generation.

Errors from the library raise :class:`AttnError` carrying its message; kernels run with the GIL
released; :func:`set_num_threads` sets their thread count. A Model or Pretrained object may be
shared by threads: its calls take turns (a lock per object).
"""
from ._lib import AttnError, get_num_threads, library_path, set_num_threads
from .functional import scaled_dot_product_attention, scaled_dot_product_attention_backward
from .model import Capture, IncompatibleKeys, Model, known_modules, save_safetensors
from .pretrained import Generation, Pretrained, Tokenizer, from_pretrained

__version__ = "0.1.0"

__all__ = [
    "AttnError", "Capture", "Model", "get_num_threads", "known_modules", "library_path", "save_safetensors",
    "scaled_dot_product_attention", "scaled_dot_product_attention_backward", "set_num_threads",
    "IncompatibleKeys", "from_pretrained", "Pretrained", "Tokenizer", "Generation",
]
