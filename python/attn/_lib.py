"""ctypes binding of libattn.so: loading, the C structs, signatures and error handling.

The library is looked up, in order: next to this package (a copy bundled when the package was
built from the source tree), the path in the ``ATTN_LIBRARY`` environment variable, then the
system's loader path (``libattn.so.0`` / ``libattn.so``). ctypes releases the GIL around every
call into a ``CDLL``, so kernels run while other Python threads proceed.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from ctypes import POINTER, c_char_p, c_float, c_int, c_int32, c_int64, c_size_t, c_uint64, c_void_p
from typing import Optional

import numpy as np

MAX_RANK = 4


class AttnError(RuntimeError):
    """An error reported by libattn: ``status`` is the C status code, ``message`` the C message
    (``attn_last_error()``), which names the function, the argument and the shapes involved."""

    def __init__(self, status: int, message: str, status_name: str = ""):
        self.status = status
        self.message = message
        self.status_name = status_name
        super().__init__(f"{message} [{status_name or status}]")


# data is declared void * (the same ABI as float * / const uint8_t *): views are built from integer
# addresses without a ctypes cast, which halves the binding's per-call cost.
class attn_tensor(ctypes.Structure):
    # dtype: attn_type (0 = f32), the last member of the C struct: the library reads it
    _fields_ = [("data", c_void_p), ("rank", c_int),
                ("shape", c_int64 * MAX_RANK), ("stride", c_int64 * MAX_RANK), ("dtype", c_int)]


class attn_btensor(ctypes.Structure):
    _fields_ = [("data", c_void_p), ("rank", c_int),
                ("shape", c_int64 * MAX_RANK), ("stride", c_int64 * MAX_RANK)]


class attn_sdpa_params(ctypes.Structure):
    _fields_ = [("scale", c_float), ("causal", c_int),
                ("bool_mask", POINTER(attn_btensor)), ("add_mask", POINTER(attn_tensor)),
                ("key_mask", POINTER(attn_btensor)),
                ("window_left", c_int64), ("window_right", c_int64),
                ("alibi_slopes", POINTER(c_float)), ("softcap", c_float), ("dropout_p", c_float),
                ("dropout_seed", c_uint64), ("dropout_offset", c_uint64)]


class attn_param(ctypes.Structure):
    _fields_ = [("name", c_char_p), ("rank", c_int), ("shape", c_int64 * MAX_RANK),
                ("numel", c_size_t), ("data", POINTER(c_float)), ("grad", POINTER(c_float))]


class attn_capture_record(ctypes.Structure):
    _fields_ = [("module", c_char_p), ("batch", c_int64), ("heads", c_int64), ("rows", c_int64),
                ("nk", c_int64), ("head0", c_int64), ("row0", c_int64), ("num_heads", c_int64),
                ("nq", c_int64), ("weights", POINTER(c_float))]


class attn_generate_options(ctypes.Structure):
    _fields_ = [("max_new_tokens", c_int64), ("temperature", ctypes.c_double), ("top_k", c_int64),
                ("top_p", ctypes.c_double), ("seed", c_uint64), ("eos_id", c_int32)]


GENERATE_CALLBACK = ctypes.CFUNCTYPE(c_int, c_int32, c_void_p)

# safetensors dtypes (attn_dtype)
DTYPE_BOOL, DTYPE_U8, DTYPE_F16, DTYPE_BF16, DTYPE_F32, DTYPE_F64 = 0, 1, 5, 6, 9, 12

_T = POINTER(attn_tensor)
_BT = POINTER(attn_btensor)
_P = POINTER(attn_sdpa_params)
_SIGNATURES = {
    "attn_status_str": (c_char_p, [c_int]),
    "attn_last_error": (c_char_p, []),
    "attn_clear_error": (None, []),
    "attn_set_num_threads": (c_int, [c_int]),
    "attn_get_num_threads": (c_int, []),
    "attn_isa_name": (c_char_p, [c_int]),
    "attn_active_isa": (c_int, []),
    "attn_sdpa_params_default": (attn_sdpa_params, []),
    "attn_sdpa_workspace_size": (c_size_t, [_T, _T, _T]),
    "attn_sdpa_forward": (c_int, [_T, _T, _T, _P, _T, _T, _T, c_void_p, c_size_t]),
    "attn_sdpa_backward": (c_int, [_T, _T, _T, _P, _T, _T, _T, _T, c_void_p, c_size_t]),
    "attn_flash_workspace_size": (c_size_t, [_T, _T, _T]),
    "attn_flash_forward": (c_int, [_T, _T, _T, _P, _T, _T, c_void_p, c_size_t]),
    "attn_flash_backward": (c_int, [_T, _T, _T, _P, _T, _T, _T, _T, _T, _T, c_void_p, c_size_t]),
    "attn_flash_varlen_workspace_size": (c_size_t, [_T, _T, _T, c_void_p, c_void_p, c_int64]),
    "attn_flash_varlen_forward": (c_int, [_T, _T, _T, c_void_p, c_void_p, c_int64, _P, _T, _T, c_void_p,
                                          c_size_t]),
    "attn_flash_varlen_backward": (c_int, [_T, _T, _T, c_void_p, c_void_p, c_int64, _P, _T, _T, _T, _T, _T,
                                           _T, c_void_p, c_size_t]),
    # models (attn/model.h)
    "attn_model_known": (c_char_p, [c_size_t]),
    "attn_model_create_json": (c_int, [c_char_p, c_size_t, POINTER(c_void_p)]),
    "attn_model_free": (None, [c_void_p]),
    "attn_model_name": (c_char_p, [c_void_p]),
    "attn_model_params": (c_void_p, [c_void_p]),
    "attn_model_set_option": (c_int, [c_void_p, c_char_p, c_int]),
    "attn_model_bind_safetensors": (c_int, [c_void_p, c_void_p, c_char_p, c_int]),
    "attn_model_input": (c_int, [c_void_p, c_char_p, c_int, c_int, POINTER(c_int64), c_void_p]),
    "attn_model_bind": (c_int, [c_void_p]),
    "attn_model_forward": (c_int, [c_void_p, c_int, c_int, c_uint64, c_uint64, c_void_p]),
    "attn_model_output": (POINTER(c_float), [c_void_p, POINTER(c_int), POINTER(c_int64)]),
    "attn_model_weights": (POINTER(c_float), [c_void_p, POINTER(c_int), POINTER(c_int64)]),
    "attn_model_backward": (c_int, [c_void_p, POINTER(c_float)]),
    "attn_model_input_grad": (POINTER(c_float), [c_void_p, c_char_p, POINTER(c_size_t)]),
    # parameters, capture, safetensors
    "attn_params_count": (c_size_t, [c_void_p]),
    "attn_params_get": (POINTER(attn_param), [c_void_p, c_size_t]),
    "attn_params_zero_grad": (c_int, [c_void_p]),
    "attn_params_reset": (c_int, [c_void_p, c_uint64]),
    "attn_params_load_file": (c_int, [c_void_p, c_char_p]),
    "attn_params_save_file": (c_int, [c_void_p, c_char_p]),
    "attn_capture_create": (c_int, [POINTER(c_void_p)]),
    "attn_capture_free": (None, [c_void_p]),
    "attn_capture_add": (c_int, [c_void_p, c_char_p, c_int64, c_int64, c_int64, c_int64]),
    "attn_capture_clear": (None, [c_void_p]),
    "attn_capture_count": (c_size_t, [c_void_p]),
    "attn_capture_get": (c_int, [c_void_p, c_size_t, POINTER(attn_capture_record)]),
    "attn_safetensors_open_file": (c_int, [c_char_p, POINTER(c_void_p)]),
    "attn_safetensors_close": (None, [c_void_p]),
    "attn_safetensors_writer_create": (c_int, [POINTER(c_void_p)]),
    "attn_safetensors_writer_free": (None, [c_void_p]),
    "attn_safetensors_writer_add": (c_int, [c_void_p, c_char_p, c_int, c_int, POINTER(c_int64), c_void_p]),
    "attn_safetensors_writer_write_file": (c_int, [c_void_p, c_char_p]),
    # Hugging Face folders (attn/pretrained.h) and tokenizers (attn/tokenizer.h)
    "attn_pretrained_open": (c_int, [c_char_p, POINTER(c_void_p)]),
    "attn_pretrained_free": (None, [c_void_p]),
    "attn_pretrained_family": (c_char_p, [c_void_p]),
    "attn_pretrained_hidden_size": (c_int64, [c_void_p]),
    "attn_pretrained_embedding_size": (c_int64, [c_void_p]),
    "attn_pretrained_max_length": (c_int64, [c_void_p]),
    "attn_pretrained_vocab_size": (c_int64, [c_void_p]),
    "attn_pretrained_pooling": (c_int, [c_void_p]),
    "attn_pretrained_normalize": (c_int, [c_void_p]),
    "attn_pretrained_eos_id": (c_int32, [c_void_p]),
    "attn_pretrained_hidden_states": (c_int, [c_void_p, c_void_p, c_void_p, c_void_p, c_int64, c_int64, c_void_p]),
    "attn_pretrained_embed": (c_int, [c_void_p, c_void_p, c_void_p, c_int64, c_int64, c_void_p]),
    "attn_pretrained_logits": (c_int, [c_void_p, c_void_p, c_void_p, c_int64, c_int64, c_void_p]),
    "attn_pretrained_set_precision": (c_int, [c_void_p, c_int]),
    "attn_pretrained_precision": (c_int, [c_void_p]),
    "attn_generate_options_default": (attn_generate_options, []),
    "attn_pretrained_generate": (c_int, [c_void_p, c_void_p, c_size_t, POINTER(attn_generate_options),
                                         GENERATE_CALLBACK, c_void_p, POINTER(c_size_t)]),
    "attn_tokenizer_open": (c_int, [c_char_p, POINTER(c_void_p)]),
    "attn_tokenizer_free": (None, [c_void_p]),
    "attn_tokenizer_encode": (c_int, [c_void_p, c_char_p, c_size_t, c_int, c_int64, c_void_p, c_size_t,
                                      POINTER(c_size_t)]),
    "attn_tokenizer_decode": (c_int, [c_void_p, c_void_p, c_size_t, c_int, c_void_p, c_size_t, POINTER(c_size_t)]),
    "attn_tokenizer_vocab_size": (c_int64, [c_void_p]),
    "attn_tokenizer_token_to_id": (c_int32, [c_void_p, c_char_p]),
    "attn_tokenizer_id_to_token": (c_char_p, [c_void_p, c_int32]),
    "attn_tokenizer_pad_id": (c_int32, [c_void_p]),
    "attn_tokenizer_max_length": (c_int64, [c_void_p]),
}


def _candidates():
    here = os.path.dirname(os.path.abspath(__file__))
    for name in ("libattn.so", "libattn.so.0"):
        p = os.path.join(here, name)
        if os.path.exists(p):
            yield p
    env = os.environ.get("ATTN_LIBRARY")
    if env:
        yield env
    yield "libattn.so.0"
    yield "libattn.so"
    found = ctypes.util.find_library("attn")
    if found:
        yield found


def _load() -> ctypes.CDLL:
    errors = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            errors.append(f"{path}: {e}")
            continue
        for name, (restype, argtypes) in _SIGNATURES.items():
            try:
                f = getattr(lib, name)
            except AttributeError as e:
                raise ImportError(f"attn: {path} lacks {name} (a libattn older than this package?)") from e
            f.restype = restype
            f.argtypes = argtypes
        lib._attn_path = path
        return lib
    raise ImportError("attn: cannot load libattn.so (looked next to the package, at $ATTN_LIBRARY and on "
                      "the loader path; build it with `make` and set ATTN_LIBRARY=build/libattn.so):\n  "
                      + "\n  ".join(errors))


lib = _load()


def error(status: int) -> AttnError:
    """The AttnError of a failed call: status and the calling thread's attn_last_error()."""
    msg = lib.attn_last_error().decode("utf-8", "replace")
    return AttnError(status, msg, lib.attn_status_str(status).decode("utf-8", "replace"))


def check(status: int) -> None:
    """Raise AttnError with the C message when status is not ATTN_OK."""
    if status:
        raise error(status)


def library_path() -> str:
    """The path of the libattn.so this package loaded."""
    return lib._attn_path


MAX_THREADS = 4096  # ATTN_MAX_THREADS (attn/core.h); the library refuses more too


def set_num_threads(n: int) -> None:
    """Set the number of threads attn's kernels use, at most ``MAX_THREADS`` (4096; more is a
    ValueError, the count unchanged); n <= 0: the default (OpenMP's, or ATTN_NUM_THREADS). Results
    are bitwise identical for any thread count."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"set_num_threads: n must be an int, got {type(n).__name__}")
    n = int(n)
    if n > MAX_THREADS:
        raise ValueError(f"set_num_threads: n = {n} exceeds the library's bound ATTN_MAX_THREADS ({MAX_THREADS}); "
                         "the thread count is unchanged")
    check(lib.attn_set_num_threads(max(n, 0)))


def get_num_threads() -> int:
    """The number of threads attn's kernels use."""
    return int(lib.attn_get_num_threads())


# ---- arguments every binding converts the same way ----------------------------------------

def c_path(path, what: str) -> bytes:
    """A path argument as the bytes the C library gets. A NUL byte would silently cut the path at
    the C side (writing or reading another file): ValueError, as Python's open() raises."""
    b = os.fsencode(path)
    if b"\0" in b:
        raise ValueError(f"{what}: embedded null byte in path {path!r}")
    return b


def c_name(name: str, what: str) -> bytes:
    """A name argument (tensor, input, option, pattern) as UTF-8 bytes, refusing a NUL byte (the C
    side would read 'query\\x00zz' as 'query')."""
    if not isinstance(name, str):
        raise TypeError(f"{what}: a name must be a str, got {type(name).__name__}")
    if "\0" in name:
        raise ValueError(f"{what}: embedded null byte in name {name!r}")
    return name.encode()


def u64(value, what: str) -> int:
    """An integer argument stored as uint64_t (seeds, offsets): refused outside [0, 2**64) rather than
    wrapped modulo 2**64 by ctypes."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{what} must be an int, got {type(value).__name__}")
    v = int(value)
    if not 0 <= v < 2**64:
        raise ValueError(f"{what} must be in [0, 2**64), got {v}")
    return v


class CallLock:
    """Serialises the C calls on one object (a model keeps its workspace, staged inputs and outputs
    in the object: two threads in it at once corrupt the heap). ctypes releases the GIL inside C,
    so this lock is what keeps the calls apart. A call made again by the thread that holds the lock
    (a generate callback that calls its own model) is refused instead of deadlocking."""

    def __init__(self, what: str):
        self._lock = threading.Lock()
        self._owner = None
        self._what = what

    def __enter__(self):
        me = threading.get_ident()
        if self._owner == me:
            raise RuntimeError(f"{self._what}: called again from inside one of its own calls (a callback?)")
        self._lock.acquire()
        self._owner = me
        return self

    def __exit__(self, *exc):
        self._owner = None
        self._lock.release()
        return False


# ---- views of NumPy arrays ----------------------------------------------------------------

def _elem_strides(a: np.ndarray) -> Optional[tuple]:
    """Strides in elements, or None when a byte stride is not a whole number of elements."""
    out = []
    for s in a.strides:
        if s % a.itemsize:
            return None
        out.append(s // a.itemsize)
    return tuple(out)


def as_f32(a: np.ndarray) -> np.ndarray:
    """a itself when it is float32 with element-aligned strides (any strides, no copy), else a
    float32 copy."""
    if a.dtype == np.float32 and _elem_strides(a) is not None and a.ctypes.data % 4 == 0:
        return a
    return np.ascontiguousarray(a, dtype=np.float32)


_PAD = ((), (0,), (0, 0), (0, 0, 0), (0, 0, 0, 0))


def tensor(a: np.ndarray) -> attn_tensor:
    """An attn_tensor view of a float32 array of rank <= 4 (strides carried, no copy). The caller
    keeps a alive while the view is used."""
    pad = _PAD[MAX_RANK - a.ndim]
    return attn_tensor(a.ctypes.data, a.ndim, a.shape + pad, tuple(s // 4 for s in a.strides) + pad)


def btensor(a: np.ndarray) -> attn_btensor:
    """An attn_btensor view of a bool / uint8 array of rank <= 4 (strides carried, no copy)."""
    pad = _PAD[MAX_RANK - a.ndim]
    return attn_btensor(a.ctypes.data, a.ndim, a.shape + pad, a.strides + pad)


_ws = threading.local()


def workspace(nbytes: int):
    """A per-thread scratch buffer of at least nbytes (grown, reused across calls)."""
    buf = getattr(_ws, "buf", None)
    if buf is None or buf.nbytes < nbytes:
        buf = np.empty(max(nbytes, 64), dtype=np.uint8)
        _ws.buf = buf
    return c_void_p(buf.ctypes.data), buf.nbytes
