"""The models of ``attn run`` (attn/model.h): nn.MultiheadAttention, nn.TransformerEncoderLayer /
DecoderLayer, their stacks and nn.Transformer, from a configuration (PyTorch's constructor keyword
arguments plus ``"module"``) and safetensors weights (PyTorch's state_dict names); forward,
backward, input gradients and the attention capture.

Inputs are batch-first ``[batch, length, width]`` arrays named as PyTorch's forward arguments
(``query``, ``src``, ``tgt``, ``memory``, ...); masks follow PyTorch's modules: a bool mask is True
where attending is NOT allowed (the opposite of scaled_dot_product_attention's), a float mask is
added.
"""
from __future__ import annotations

import contextlib
import ctypes
import json
import os
from typing import Dict, Iterable, List, Mapping, NamedTuple, Optional, Tuple, Union

import numpy as np

from . import _lib
from ._lib import check, lib

__all__ = ["Model", "Capture", "IncompatibleKeys", "known_modules", "save_safetensors"]

PathLike = Union[str, "os.PathLike[str]"]


def known_modules() -> Tuple[str, ...]:
    """The module names a configuration's ``"module"`` may take."""
    names, i = [], 0
    while True:
        n = lib.attn_model_known(i)
        if not n:
            return tuple(names)
        names.append(n.decode())
        i += 1


def _to_numpy(x) -> np.ndarray:
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # a torch tensor, without importing torch
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def _c_view(owner, ptr, shape) -> np.ndarray:
    """A float32 array over C memory that keeps owner alive (no copy)."""
    n = int(np.prod(shape)) if len(shape) else 1
    buf = (ctypes.c_float * n).from_address(ctypes.addressof(ptr.contents))
    buf._attn_owner = owner
    return np.frombuffer(buf, dtype=np.float32).reshape(shape)


def save_safetensors(path: PathLike, tensors: Mapping[str, object]) -> None:
    """Write arrays (float32 / float64 / bool / uint8, or CPU torch tensors) to a safetensors file,
    in the given order (float64 is stored as F64). A path or a name with a NUL byte is a ValueError
    (nothing is written)."""
    cpath = _lib.c_path(path, "save_safetensors")
    names = [_lib.c_name(name, "save_safetensors") for name in tensors]
    w = ctypes.c_void_p()
    check(lib.attn_safetensors_writer_create(ctypes.byref(w)))
    keep = []
    try:
        for cname, (name, t) in zip(names, tensors.items()):
            a = _to_numpy(t)
            dt = {np.dtype(np.float32): _lib.DTYPE_F32, np.dtype(np.float64): _lib.DTYPE_F64,
                  np.dtype(np.bool_): _lib.DTYPE_BOOL, np.dtype(np.uint8): _lib.DTYPE_U8}.get(a.dtype)
            if dt is None:
                raise TypeError(f"save_safetensors: tensor '{name}' has dtype {a.dtype} (float32, float64, bool "
                                "or uint8)")
            a = np.ascontiguousarray(a)
            keep.append(a)
            shape = (ctypes.c_int64 * max(a.ndim, 1))(*a.shape)
            check(lib.attn_safetensors_writer_add(w, cname, dt, a.ndim, shape, a.ctypes.data))
        check(lib.attn_safetensors_writer_write_file(w, cpath))
    finally:
        lib.attn_safetensors_writer_free(w)


class IncompatibleKeys(NamedTuple):
    """What :meth:`Model.load_state_dict` did not match, as PyTorch's ``_IncompatibleKeys``."""
    missing_keys: List[str]
    unexpected_keys: List[str]


class Capture:
    """Attention weights recorded during a :meth:`Model.forward` (attn_capture): each request
    names modules by pattern (``"self_attn"``, ``"layers.*.self_attn"``,
    ``"decoder.layers.0.multihead_attn"``, ``""`` for a bare multihead_attention, ``"*"`` for
    all), optionally a range of heads ``[head0, head0 + heads)`` and query rows (0 = to the last).
    After a forward, ``capture[name]`` is the module's weights ``[batch, heads, rows, Nk]`` (those
    applied to V, as MultiheadAttention(need_weights=True, average_attn_weights=False) returns).
    """

    def __init__(self, *patterns: str):
        self._lock = _lib.CallLock("Capture")
        self._c = ctypes.c_void_p()
        check(lib.attn_capture_create(ctypes.byref(self._c)))
        for p in patterns:
            self.add(p)

    def add(self, pattern: str, head0: int = 0, heads: int = 0, row0: int = 0, rows: int = 0) -> "Capture":
        """Ask for heads [head0, head0 + heads) and rows [row0, row0 + rows) of every module matching
        pattern (heads / rows 0 = to the last)."""
        p = _lib.c_name(pattern, "Capture.add")
        with self._lock:
            check(lib.attn_capture_add(self._c, p, head0, heads, row0, rows))
        return self

    def records(self) -> Dict[str, np.ndarray]:
        """Module name -> weights [batch, heads, rows, Nk] (copies), in the order the modules ran."""
        out = {}
        rec = _lib.attn_capture_record()
        with self._lock:
            for i in range(lib.attn_capture_count(self._c)):
                check(lib.attn_capture_get(self._c, i, ctypes.byref(rec)))
                shape = (rec.batch, rec.heads, rec.rows, rec.nk)
                out[rec.module.decode()] = np.ctypeslib.as_array(rec.weights, shape=shape).copy()
        return out

    def __getitem__(self, module: str) -> np.ndarray:
        r = self.records()
        if module not in r:
            raise KeyError(f"no capture record of module '{module}' (recorded: {', '.join(map(repr, r)) or 'none'})")
        return r[module]

    def __del__(self):
        c = getattr(self, "_c", None)
        if c:
            lib.attn_capture_free(c)
            self._c = None


class Model:
    """A module of ``attn run`` from its configuration, e.g.
    ``Model({"module": "transformer_encoder_layer", "d_model": 64, "nhead": 4, "batch_first": True})``
    (a dict, or a JSON string). Parameters start at PyTorch's initialisation (not its random
    numbers): load a state_dict with :meth:`load` / :meth:`load_state_dict`.

    Thread-safe: the model keeps its inputs, workspace and outputs in itself, so calls on one
    Model from several threads take turns (a lock per object); use one Model per thread to run
    in parallel."""

    def __init__(self, config: Union[Mapping, str]):
        text = config if isinstance(config, str) else json.dumps(dict(config))
        raw = text.encode()
        self._lock = _lib.CallLock("Model")
        self._m = ctypes.c_void_p()
        check(lib.attn_model_create_json(raw, len(raw), ctypes.byref(self._m)))
        self._shapes: Dict[str, tuple] = {}
        self._params = lib.attn_model_params(self._m)

    @classmethod
    def from_files(cls, config: PathLike, weights: Optional[PathLike] = None) -> "Model":
        """The model of an ``attn run`` configuration file, with the weights of a safetensors file
        (strict: every parameter present, no extra tensor)."""
        with open(config, encoding="utf-8") as f:
            m = cls(f.read())
        if weights is not None:
            m.load(weights)
        return m

    def __del__(self):
        m = getattr(self, "_m", None)
        if m:
            lib.attn_model_free(m)
            self._m = None

    @property
    def name(self) -> str:
        """The configuration's module name."""
        return lib.attn_model_name(self._m).decode()

    # ---- parameters ----
    def _each_param(self) -> Iterable:
        for i in range(lib.attn_params_count(self._params)):
            yield lib.attn_params_get(self._params, i).contents

    def parameters(self) -> Dict[str, np.ndarray]:
        """state_dict name -> the parameter itself (a float32 view of the model's memory, no copy;
        writing to it changes the model)."""
        return {p.name.decode(): _c_view(self, p.data, tuple(p.shape[:p.rank])) for p in self._each_param()}

    def gradients(self) -> Dict[str, np.ndarray]:
        """state_dict name -> the parameter's accumulated gradient (a view, no copy)."""
        return {p.name.decode(): _c_view(self, p.grad, tuple(p.shape[:p.rank])) for p in self._each_param()}

    def zero_grad(self) -> None:
        with self._lock:
            check(lib.attn_params_zero_grad(self._params))

    def reset_parameters(self, seed: int = 0) -> None:
        """PyTorch's initialisation distributions, drawn from attn's Philox stream ``seed``
        (in [0, 2**64))."""
        seed = _lib.u64(seed, "reset_parameters: seed")
        with self._lock:
            check(lib.attn_params_reset(self._params, seed))

    def load(self, path: PathLike) -> None:
        """Load every parameter from a safetensors file (strict)."""
        p = _lib.c_path(path, "Model.load")
        with self._lock:
            check(lib.attn_params_load_file(self._params, p))

    def save(self, path: PathLike) -> None:
        """Save the parameters to a safetensors file (F32, state_dict names)."""
        p = _lib.c_path(path, "Model.save")
        with self._lock:
            check(lib.attn_params_save_file(self._params, p))

    def load_state_dict(self, state: Mapping[str, object], strict: bool = True) -> "IncompatibleKeys":
        """Copy arrays or torch tensors (e.g. ``torch_module.state_dict()``) into the parameters, as
        torch.nn.Module.load_state_dict: returns ``(missing_keys, unexpected_keys)``. With strict
        (the default) a missing or unexpected name is a KeyError listing them and nothing is
        loaded; without, the names that match are loaded. A shape mismatch is a ValueError (nothing
        loaded)."""
        params = self.parameters()
        keys = IncompatibleKeys(sorted(set(params) - set(state)), sorted(set(state) - set(params)))
        if strict and (keys.missing_keys or keys.unexpected_keys):
            raise KeyError(f"load_state_dict: missing {keys.missing_keys}, unexpected {keys.unexpected_keys}")
        srcs = {}
        for name, dst in params.items():
            if name not in state:
                continue
            src = _to_numpy(state[name])
            if src.shape != dst.shape:
                raise ValueError(f"load_state_dict: '{name}' has shape {src.shape}, the parameter {dst.shape}")
            srcs[name] = src
        with self._lock:
            for name, src in srcs.items():
                params[name][...] = src
        return keys

    # ---- running ----
    def set_option(self, name: str, value: bool) -> None:
        """A forward option: need_weights, average_attn_weights, is_causal, src_is_causal,
        tgt_is_causal, memory_is_causal (the module's)."""
        n = _lib.c_name(name, "set_option")
        with self._lock:
            check(lib.attn_model_set_option(self._m, n, int(bool(value))))

    def forward(self, *, capture: Optional[Capture] = None, keep_for_backward: bool = False,
                training: bool = False, seed: int = 0, offset: int = 0, **inputs) -> np.ndarray:
        """Run on inputs named as PyTorch's forward arguments (arrays or CPU tensors; float inputs
        [batch, length, width], masks as PyTorch's). ``training`` turns dropout on (Philox stream
        ``(seed, offset)``, each in [0, 2**64)); ``keep_for_backward`` keeps what :meth:`backward`
        needs; ``capture`` records attention weights. Returns the output [batch, length, d] (a
        copy)."""
        if not inputs:
            raise ValueError(f"{self.name}: no inputs given")
        seed = _lib.u64(seed, f"{self.name}: seed")
        offset = _lib.u64(offset, f"{self.name}: offset")
        staged = []  # every input checked and converted before the first is staged
        for name, x in inputs.items():
            cname = _lib.c_name(name, f"{self.name}: input")
            a = _to_numpy(x)
            if a.dtype == np.bool_:
                dt = _lib.DTYPE_BOOL
            elif a.dtype.kind == "f":
                a, dt = a.astype(np.float32, copy=False), _lib.DTYPE_F32
            elif a.dtype.kind in "iu" and "mask" in name:
                # an integer mask has no single meaning: Hugging Face's attention_mask is 1 = keep,
                # PyTorch's old byte masks 1 = ignore; PyTorch's SDPA takes bool or float only
                raise TypeError(f"{self.name}: input '{name}' has dtype {a.dtype}: a mask must be bool (True = "
                                "NOT allowed to attend / padding, as PyTorch's modules) or float (added); a Hugging "
                                "Face attention_mask (1 = keep) is passed as attention_mask == 0")
            else:
                raise TypeError(f"{self.name}: input '{name}' has dtype {a.dtype} (floating point, or bool for masks)")
            if a.ndim > 8:
                raise ValueError(f"{self.name}: input '{name}' has rank {a.ndim} (at most 8)")
            staged.append((name, cname, dt, np.ascontiguousarray(a)))
        with self._lock:
            cap = capture._lock if capture is not None else contextlib.nullcontext()
            with cap:
                return self._forward_locked(staged, keep_for_backward, training, seed, offset, capture)

    def _forward_locked(self, staged, keep_for_backward, training, seed, offset, capture) -> np.ndarray:
        for _, cname, dt, a in staged:
            shape = (ctypes.c_int64 * max(a.ndim, 1))(*a.shape)
            st = lib.attn_model_input(self._m, cname, dt, a.ndim, shape, a.ctypes.data)
            if st:
                err = _lib.error(st)
                lib.attn_model_bind(self._m)  # drops what was staged (and fails: err is the one raised)
                raise err
        check(lib.attn_model_bind(self._m))
        self._shapes = {name: a.shape for name, _, _, a in staged}
        check(lib.attn_model_forward(self._m, int(keep_for_backward), int(training), seed, offset,
                                     capture._c if capture is not None else None))
        return self._result(lib.attn_model_output)

    __call__ = forward

    def _result(self, f) -> Optional[np.ndarray]:
        rank = ctypes.c_int()
        shape = (ctypes.c_int64 * 4)()
        p = f(self._m, ctypes.byref(rank), shape)
        if not p:
            return None
        return np.ctypeslib.as_array(p, shape=tuple(shape[:rank.value])).copy()

    @property
    def output(self) -> Optional[np.ndarray]:
        """The last forward's output (a copy), None before one."""
        with self._lock:
            return self._result(lib.attn_model_output)

    @property
    def weights(self) -> Optional[np.ndarray]:
        """multihead_attention with need_weights: the last forward's attention weights (a copy)."""
        with self._lock:
            return self._result(lib.attn_model_weights)

    def backward(self, grad_output) -> Dict[str, np.ndarray]:
        """Backward of the last forward (run with keep_for_backward) for the upstream gradient:
        parameter gradients accumulate (:meth:`gradients`); returns the inputs' gradients by name
        (copies)."""
        g = np.ascontiguousarray(_to_numpy(grad_output), dtype=np.float32)
        with self._lock:
            out = self._result(lib.attn_model_output)
            if out is None or g.shape != out.shape:
                raise ValueError(f"{self.name}: grad_output has shape {g.shape}, the output "
                                 f"{None if out is None else out.shape}")
            check(lib.attn_model_backward(self._m, g.ctypes.data_as(ctypes.POINTER(ctypes.c_float))))
            res = {}
            for name in ("query", "key", "value", "src", "tgt", "memory"):
                n = ctypes.c_size_t()
                p = lib.attn_model_input_grad(self._m, name.encode(), ctypes.byref(n))
                if p:
                    res[name] = np.ctypeslib.as_array(p, shape=(n.value,)).copy().reshape(self._shapes[name])
        return res
