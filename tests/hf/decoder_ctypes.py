"""The ctypes side of attn_pretrained_generate, shared by the decoder parity scripts
(gpt2_parity.py, llama_parity.py, bf16_decoder_parity.py): the options struct, the token
callback's type, their declarations on the library, and one generation collecting the ids."""
import ctypes


class GenOptions(ctypes.Structure):
    _fields_ = [("max_new_tokens", ctypes.c_int64), ("temperature", ctypes.c_double), ("top_k", ctypes.c_int64),
                ("top_p", ctypes.c_double), ("seed", ctypes.c_uint64), ("eos_id", ctypes.c_int32)]


CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int32, ctypes.c_void_p)


def declare_generate(L):
    """Argument and result types of attn_generate_options_default and attn_pretrained_generate."""
    P = ctypes.c_void_p
    L.attn_generate_options_default.argtypes = []
    L.attn_generate_options_default.restype = GenOptions
    L.attn_pretrained_generate.argtypes = [P, P, ctypes.c_size_t, ctypes.POINTER(GenOptions), CALLBACK, P,
                                           ctypes.POINTER(ctypes.c_size_t)]
    L.attn_pretrained_generate.restype = ctypes.c_int


def generate(L, h, prompt, **options):
    """attn_pretrained_generate of model h on the prompt's ids, the default options changed by
    options (max_new_tokens=..., eos_id=...): (status, the ids streamed to the callback)."""
    import numpy as np
    o = L.attn_generate_options_default()
    for k, v in options.items():
        setattr(o, k, v)
    got = []

    def cb(i, user):
        got.append(int(i))
        return 0
    c = CALLBACK(cb)
    ids = np.array(prompt, dtype=np.int32)
    n = ctypes.c_size_t()
    st = L.attn_pretrained_generate(h, ids.ctypes.data, len(prompt), ctypes.byref(o), c, None, ctypes.byref(n))
    return st, got
