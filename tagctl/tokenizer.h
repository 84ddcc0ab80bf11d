/* GPT-2's byte-level BPE tokenizer from a standard file, for `tagctl sample` and
 * `tagctl ckpt export --tokenizer`:
 *   - llm.c's tokenizer.bin (256 uint32 header: magic 20240328, version 1 or 2, the vocabulary
 *     size, version 2: the end-of-text id; then per token one length byte and its bytes):
 *     decodes only, it has no merges;
 *   - Hugging Face's vocab.json (token -> id, each byte written as GPT-2's printable code
 *     point: bytes 33-126, 161-172 and 174-255 as themselves, the others as 256 + n in byte
 *     order) with merges.txt beside it (one merge "A B" a line, in rank order, after an optional
 *     "#version" line): decodes and encodes. Without merges.txt it decodes only.
 * Encoding is GPT-2's: the text is split by its pattern
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * (letters, numbers and white space by ICU's Unicode properties; invalid UTF-8 bytes count as
 * neither), then each piece's bytes are merged pair by pair, the lowest-ranked pair first,
 * every occurrence of it left to right, until no pair of the merges is left. "<|endoftext|>"
 * in the text is text, as in GPT-2's own encoder.
 *
 * A tokenizer is immutable once loaded: any thread may use it. */
#ifndef TAGC_TAGCTL_TOKENIZER_H
#define TAGC_TAGCTL_TOKENIZER_H

#include <stddef.h>

#include "common/status.h"

typedef struct tagctl_tokenizer tagctl_tokenizer;

/* Loads `path`: a tokenizer.bin or a vocab.json file (by content), or a folder holding
 * vocab.json (and merges.txt) or tokenizer.bin. *out is new (free with tagctl_tokenizer_free).
 * Errors: TAGC_ENOTFOUND, TAGC_ECORRUPT (the detail names the file and what is wrong: ids
 * not 0..n-1, a merge naming an unknown token, a bad header), TAGC_EIO, TAGC_ENOMEM. */
tagc_status tagctl_tokenizer_load(const char *path, tagctl_tokenizer **out);

void tagctl_tokenizer_free(tagctl_tokenizer *t); /* NULL is fine */

/* The number of tokens (ids 0..size-1). */
int tagctl_tokenizer_size(const tagctl_tokenizer *t);

/* The id of "<|endoftext|>"; -1 when the vocabulary has none. */
int tagctl_tokenizer_eot(const tagctl_tokenizer *t);

/* The files it came from: vocab.json and merges.txt (NULL for a tokenizer.bin, or merges.txt
 * when there is none). Borrowed from t. */
const char *tagctl_tokenizer_vocab_path(const tagctl_tokenizer *t);
const char *tagctl_tokenizer_merges_path(const tagctl_tokenizer *t);

/* The bytes of token `id` (0 <= id < size) and their count. Borrowed from t. */
const unsigned char *tagctl_tokenizer_bytes(const tagctl_tokenizer *t, int id, size_t *len);

/* Encodes the NUL-terminated UTF-8 `text`: *ids (new, caller frees) gets *n ids.
 * TAGC_EUNSUPPORTED when the tokenizer has no merges; TAGC_ENOMEM. */
tagc_status tagctl_tokenizer_encode(const tagctl_tokenizer *t, const char *text, int **ids, int *n);

#endif
