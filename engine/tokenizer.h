// The byte-level fallback tokenizer: text <-> token ids without a vocabulary file.
// Byte b becomes id b + TOKENIZER_BYTE_BASE; a BOS id is prepended when the model has one.
// Real tokenizers (tokenizer.json) are out of scope: scenarios give lengths, not text.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "engine/model.h"

#define TOKENIZER_BYTE_BASE 3

// Writes at most cap ids for text into out; returns how many the text needs (so a return
// above cap means truncated). SC-free: no failure modes beyond size.
int tokenizer_encode(const model_config *c, const char *text, int32_t *out, int cap);
// Appends the text of one id to buf (bytes for byte ids, "<id>" otherwise); returns length.
int tokenizer_decode_one(const model_config *c, int32_t id, char *buf, size_t cap);
