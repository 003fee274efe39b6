/* tests/fuzz: a main() for builds without libFuzzer, so every build runs the
 * fuzz targets: each file of a corpus folder, then deterministic mutations
 * of each (bit flips, byte edits, truncation, insertion, splicing). */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "../unit/xalloc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_MAX_INPUT (256u << 10)

typedef struct buf {
  uint8_t *p;
  size_t n;
} buf;

static int cmp_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Every regular file of dir, sorted by name. */
static int read_corpus(const char *dir, buf **out) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  char **names = NULL;
  int n = 0;
  for (struct dirent *de; (de = readdir(d));) {
    if (de->d_name[0] == '.') continue;
    names = dsi_xrealloc(names, (size_t)(n + 1) * sizeof *names);
    names[n++] = dsi_xstrdup(de->d_name);
  }
  closedir(d);
  if (n > 1) qsort(names, (size_t)n, sizeof *names, cmp_name);
  buf *seeds = dsi_xcalloc((size_t)n + 1, sizeof *seeds);
  int k = 0;
  for (int i = 0; i < n; i++) {
    char path[4096];
    char *text;
    size_t len;
    dsi_err err;
    dsi_path_join(path, sizeof path, dir, names[i]);
    if (dsi_read_file(path, &text, &len, &err) == DSI_OK) seeds[k++] = (buf){(uint8_t *)text, len};
    free(names[i]);
  }
  free(names);
  *out = seeds;
  return k;
}

/* run one input from a buffer of exactly its size, so a sanitizer sees any
 * read past its end */
static void run_one(const uint8_t *p, size_t n) {
  uint8_t *copy = dsi_xmalloc(n);
  if (n) memcpy(copy, p, n);
  LLVMFuzzerTestOneInput(copy, n);
  free(copy);
}

/* ---- mutations ---- */

static size_t pick(dsi_rng *r, size_t n) { return n ? (size_t)(dsi_rng_u64(r) % n) : 0; }

static void insert(buf *b, size_t at, const void *src, size_t n) {
  if (b->n + n > FUZZ_MAX_INPUT) return;
  b->p = dsi_xrealloc(b->p, b->n + n);
  memmove(b->p + at + n, b->p + at, b->n - at);
  memcpy(b->p + at, src, n);
  b->n += n;
}

static const char *k_tokens[] = {
  "null", "true", "false", "-1", "0", "1e400", "-0", "0.5", "128", "7168.0", "18446744073709551616",
  "9007199254740993", "4294967296", "\"", "{", "}", "[", "]", ",", ":", "\\u0000", "\"F8_E4M3\"", "\"BF16\"",
  "\"F64\"", "\"dtype\"", "\"shape\"", "\"data_offsets\"", "\"__metadata__\"", "[]", "{}", "\"yarn\"",
  "\"rope_scaling\"", "\"type\"", "\"n_group\"", "\"topk_group\"", "\"noaux_tc\"", "\"softmax\"",
  "\"quantization_config\"", "\"weight_block_size\"", "[128,128]",
};

static void mutate(buf *b, const buf *seeds, int n_seeds, dsi_rng *r) {
  static const uint8_t interesting[] = {0, 0xff, 0x7f, 0x80, '0', '1', '9', '-', '.', 'e', '"', '{', '}',
                                        '[', ']', ',', ':', ' ', '\\', 'n'};
  size_t at = pick(r, b->n + 1);
  switch (dsi_rng_u64(r) % 9) {
  case 0: /* flip a bit */
    if (b->n) b->p[pick(r, b->n)] ^= (uint8_t)(1u << pick(r, 8));
    break;
  case 1: /* set a byte */
    if (b->n) b->p[pick(r, b->n)] = dsi_rng_u64(r) & 1 ? interesting[pick(r, sizeof interesting)] : (uint8_t)dsi_rng_u64(r);
    break;
  case 2: /* truncate */
    b->n = at;
    break;
  case 3: { /* insert random bytes */
    uint8_t tmp[8];
    size_t n = 1 + pick(r, sizeof tmp);
    for (size_t i = 0; i < n; i++) tmp[i] = (uint8_t)dsi_rng_u64(r);
    insert(b, at, tmp, n);
  } break;
  case 4: { /* delete a range */
    size_t n = pick(r, DSI_MIN(b->n - at, (size_t)64) + 1);
    memmove(b->p + at, b->p + at + n, b->n - at - n);
    b->n -= n;
  } break;
  case 5: { /* splice: our head, another seed's tail */
    const buf *o = &seeds[pick(r, (size_t)n_seeds)];
    size_t from = pick(r, o->n + 1);
    b->n = at;
    insert(b, at, o->p + from, o->n - from);
  } break;
  case 6: { /* insert a token */
    const char *t = k_tokens[pick(r, DSI_ARRAY_LEN(k_tokens))];
    insert(b, at, t, strlen(t));
  } break;
  case 7: { /* copy a chunk of ourselves elsewhere */
    if (!b->n) break;
    size_t from = pick(r, b->n), n = 1 + pick(r, DSI_MIN(b->n - from, (size_t)32));
    uint8_t tmp[32];
    memcpy(tmp, b->p + from, n);
    insert(b, at, tmp, n);
  } break;
  case 8: /* nudge a safetensors header length (the first 8 bytes) */
    if (b->n >= 8) {
      uint64_t v = 0;
      for (int i = 7; i >= 0; i--) v = v << 8 | b->p[i];
      v += (uint64_t)(int64_t)((int)pick(r, 33) - 16);
      for (int i = 0; i < 8; i++) b->p[i] = (uint8_t)(v >> (8 * i));
    }
    break;
  }
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s CORPUS_DIR [MUTATIONS_PER_SEED]\n", argv[0]);
    return 2;
  }
  int iters = argc > 2 ? atoi(argv[2]) : 5000;
  buf *seeds;
  int n_seeds = read_corpus(argv[1], &seeds);
  if (n_seeds <= 0) {
    fprintf(stderr, "%s: no corpus files\n", argv[1]);
    return 1;
  }
  long runs = 0;
  for (int s = 0; s < n_seeds; s++, runs++) run_one(seeds[s].p, seeds[s].n);
  dsi_rng r;
  dsi_rng_seed(&r, 20240611);
  for (int s = 0; s < n_seeds; s++) {
    for (int it = 0; it < iters; it++, runs++) {
      buf b = {dsi_xmalloc(seeds[s].n ? seeds[s].n : 1), seeds[s].n};
      memcpy(b.p, seeds[s].p, b.n);
      for (int m = 1 + (int)pick(&r, 4); m > 0; m--) mutate(&b, seeds, n_seeds, &r);
      run_one(b.p, b.n);
      free(b.p);
    }
  }
  for (int s = 0; s < n_seeds; s++) free(seeds[s].p);
  free(seeds);
  printf("%ld passed, 0 failed\n", runs);
  return 0;
}
