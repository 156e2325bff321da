/* attn: attention mechanisms and transformer models in C11. Umbrella header. */
#ifndef ATTN_H
#define ATTN_H

#include "core.h"
#include "kernels.h"
#include "attention.h"
#include "longformer.h"
#include "linear_attention.h"
#include "safetensors.h"
#include "nn.h"
#include "train.h"
#include "viz.h"
#include "model.h"
#include "pretrained.h"
#include "image.h"
#include "dist.h"
#include "introspect.h"
#include "io.h"
#include "tokenizer.h"

#endif
