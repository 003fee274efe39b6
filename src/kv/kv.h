/* kv: the paged latent KV cache of MLA and its prefix cache. Per token per
 * layer it holds only the normed c_kv (kv_lora_rank) and the rotated k_pe
 * (qk_rope_head_dim). Fixed-size blocks come from one pool; each sequence
 * has a block table; blocks are reference-counted, so sequences share the
 * blocks of a common prefix.
 *
 * The prefix cache: a block whose tokens are known is registered under the
 * chain hash of every token before it (its parent) with its tokens. A full
 * block is registered as soon as it is computed; a sequence's last,
 * partial block when the sequence lets go of it. A new sequence takes the
 * registered full blocks that match its tokens (sharing them), then copies
 * the longest matching start of a registered block into a block of its
 * own: reuse is token-granular. Registered blocks no sequence holds are
 * evicted least recently released first, when the pool runs out.
 *
 * A packed model's cache (by default: DSI_KV_* in dsinfer.h) keeps each
 * layer's rows in bf16 instead, in position pairs (tensor/paged.h) —
 * DeepSeek's own cache dtype, half the memory, what the AMX decode
 * attention reads as tiles and the vector one widens as it reads. Blocks
 * are zeroed when handed out (and past the length after a truncation), so
 * a pair's second position holds a finite value before it is written. */
#ifndef DSI_KV_H
#define DSI_KV_H

#include "base/base.h"
#include "tensor/paged.h"

typedef struct dsi_kv {
  int n_layers, row;      /* row = kv_lora_rank + qk_rope_head_dim floats */
  int block_size, n_blocks;
  float **layer;          /* [n_layers] -> [n_blocks * block_size, row]; entries NULL with pair */
  uint16_t **pair;        /* NULL, or [n_layers] -> [n_blocks * block_size / 2, 2 * row] bf16 */
  int32_t *free_list;     /* stack of blocks holding nothing */
  int n_free;
  int32_t *ref;           /* [n_blocks] sequences holding the block */
  /* the prefix cache */
  int32_t *n_tok;         /* [n_blocks] tokens a registered block holds; 0: not registered */
  int32_t *toks;          /* [n_blocks][block_size] its tokens */
  uint64_t *parent;       /* [n_blocks] chain hash of the tokens before it */
  uint64_t *chain;        /* [n_blocks] chain hash through its last token (full blocks) */
  int32_t *sib;           /* [n_blocks] next registered block of the same bucket, -1 */
  int32_t *bucket;        /* [n_buckets] parent hash -> first registered block, -1 */
  int n_buckets;
  int32_t *lru_prev, *lru_next; /* registered blocks no sequence holds, least recent first */
  int32_t lru_head, lru_tail;
  int n_lru;
  long queries, hits;     /* tokens looked up in the prefix cache, and found */
  int32_t *group;         /* [n_blocks] the group of the sequence that registered it (DP attention:
                             the rank whose cache holds its rows); matches stay within a group */
  /* Between ranks (log_mem set): what the pool itself does to the cache's
   * memory — zeroing a block's rows, copying a prefix into a new block —
   * recorded so that rank 0 can send it with the next step and the other
   * ranks, whose caches are written by the same steps, do the same. */
  int log_mem;
  int32_t *mem_log;       /* DSI_KV_MEM_WORDS words a record */
  int n_mem_log, cap_mem_log;
  int mem_log_lost;       /* a record could not be kept (out of memory): the caches differ */
} dsi_kv;

/* a memory record: {DSI_KV_ZERO, block, first slot, end slot} or
 * {DSI_KV_COPY, dst block, src block, slots} */
enum { DSI_KV_ZERO = 1, DSI_KV_COPY = 2, DSI_KV_MEM_WORDS = 4 };

typedef struct dsi_kv_seq {
  int32_t *blocks;        /* block table */
  int n_blocks, cap;
  int len;                /* tokens stored */
  int n_reg;              /* its first n_reg blocks are registered full blocks */
  uint64_t chain;         /* chain hash through block n_reg - 1 */
  int group;              /* its blocks' group (0 unless DP attention) */
} dsi_kv_seq;

/* pairs: keep bf16 pair rows instead of f32 rows (block_size a multiple of
 * 32); huge: advise huge pages for the layers' blocks */
int dsi_kv_init(dsi_kv *kv, int n_layers, int row, int block_size, int n_blocks, int pairs, int huge, dsi_err *err);
void dsi_kv_free(dsi_kv *kv);
/* blocks a sequence can still get: free ones, and registered ones no
 * sequence holds (evicted when taken) */
int dsi_kv_available(const dsi_kv *kv);
/* blocks some sequence holds */
int dsi_kv_used(const dsi_kv *kv);
/* Make room for seq to hold n_tokens in total; DSI_E_CAPACITY when the pool
 * is out of blocks (nothing is taken then). */
int dsi_kv_reserve(dsi_kv *kv, dsi_kv_seq *s, int n_tokens, dsi_err *err);
/* Let go of all of seq's blocks. toks: the seq->len tokens its cache holds,
 * or NULL: with them its blocks stay in the prefix cache (the last, partial
 * one registered now), else blocks not registered go back to the pool. */
void dsi_kv_release(dsi_kv *kv, dsi_kv_seq *s, const int32_t *toks);
/* Keep seq's first n tokens (n <= s->len) and the blocks they use; the
 * other blocks are let go of (as by release without tokens). The kept
 * last block must be seq's alone. */
void dsi_kv_truncate(dsi_kv *kv, dsi_kv_seq *s, int n);
/* Register seq's blocks that became full: toks are its first seq->len tokens. */
void dsi_kv_commit(dsi_kv *kv, dsi_kv_seq *s, const int32_t *toks);
/* Give the empty seq the longest cached prefix of toks[0..n): matching
 * registered full blocks shared, then the matching start of a registered
 * block copied into a block of its own. Returns the tokens it now holds
 * (counted in the hits; n in the queries). */
int dsi_kv_match(dsi_kv *kv, dsi_kv_seq *s, const int32_t *toks, int n);
/* Do n records of another rank's log (valid ones; DSI_E_FORMAT names a bad one) */
int dsi_kv_apply_mem_log(dsi_kv *kv, const int32_t *log, int n, dsi_err *err);
/* Forget every registered block (blocks sequences hold stay theirs). */
void dsi_kv_reset_cache(dsi_kv *kv);
/* cache row of position pos of seq (must be reserved) */
static inline int32_t dsi_kv_slot(const dsi_kv *kv, const dsi_kv_seq *s, int pos) {
  return dsi_paged_slot(s->blocks, kv->block_size, pos);
}

#endif
