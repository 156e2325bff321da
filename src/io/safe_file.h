/* Safe file input and output, shared by the library (checkpoints, safetensors) and the CLI: the
 * public attn/io.h, which says what is guaranteed and why. */
#ifndef ATTN_IO_SAFE_FILE_H
#define ATTN_IO_SAFE_FILE_H

#include "attn/io.h"

#endif
