/* attn nn: modules with PyTorch semantics, forward and backward, parameters named as PyTorch's
 * state_dict and loaded from / saved to safetensors: linear layers, positional encodings
 * (sinusoidal, learned, RoPE, ALiBi slopes), nn.MultiheadAttention (packed or separate
 * projections), local + global attention, TransformerEncoderLayer /
 * TransformerDecoderLayer, their stacks and nn.Transformer; key/value caches for incremental
 * decoding; a decoder-only (GPT-style) language model; an encoder-decoder model; a Vision
 * Transformer (torchvision's); attention capture.
 *
 * An umbrella: each concern has its own header, which can be included alone.
 *   params.h     parameter lists (state_dict names), name maps, loading and saving; the memory,
 *                dropout and determinism contract every module follows
 *   capture.h    attention capture: chosen modules' weights recorded during a forward
 *   positions.h  positional encodings (sinusoidal, learned, RoPE, ALiBi slopes), embeddings
 *   mha.h        nn.MultiheadAttention, local + global attention, key/value caches
 *   layers.h     linear; encoder / decoder layers, their stacks (and the decoder's step-by-step
 *                cache), nn.Transformer
 *   precision.h  a model's compute precision (fp32, bf16)
 *   gpt.h        the decoder-only (GPT-style) language model
 *   seq2seq.h    the encoder-decoder model; the token encoder
 *   vit.h        the Vision Transformer */
#ifndef ATTN_NN_H
#define ATTN_NN_H

#include "params.h"
#include "capture.h"
#include "positions.h"
#include "mha.h"
#include "layers.h"
#include "precision.h"
#include "gpt.h"
#include "seq2seq.h"
#include "vit.h"

#endif
