/* tests/fuzz: safetensors headers from untrusted bytes. Parses the input as
 * one file, finishes the set, then checks what it accepted: every tensor
 * lies inside the input, its size is its shape's, lookups find it. */
#include <stdlib.h>

#include "model/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* bytes of a shape, or UINT64_MAX when it would not fit */
static uint64_t shape_bytes(const dsi_st_tensor *t) {
  unsigned __int128 n = dsi_dtype_size(t->dtype);
  for (int i = 0; i < t->ndim; i++) {
    DSI_ASSERT(t->shape[i] >= 0);
    n *= (uint64_t)t->shape[i];
    if (n > UINT64_MAX) n = (unsigned __int128)UINT64_MAX + 1;
  }
  for (int i = 0; i < t->ndim; i++)
    if (t->shape[i] == 0) n = 0;
  return n > UINT64_MAX ? UINT64_MAX : (uint64_t)n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  dsi_st_set set = {0};
  dsi_err err = {0};
  int st = dsi_st_parse_header(&set, data, size, 0, "fuzz.safetensors", &err);
  if (st != DSI_OK) {
    DSI_ASSERT(st < 0 && set.n_tensors == 0 && strstr(err.msg, "fuzz.safetensors"));
    dsi_st_close(&set);
    return 0;
  }
  int fin = dsi_st_finish(&set, &err);
  volatile uint8_t sink = 0;
  for (int i = 0; i < set.n_tensors; i++) {
    const dsi_st_tensor *t = &set.tensors[i];
    const uint8_t *p = t->data;
    DSI_ASSERT(t->ndim >= 0 && t->ndim <= DSI_ST_MAX_DIMS && (unsigned)t->dtype < DSI_DTYPE_COUNT);
    DSI_ASSERT(t->nbytes == shape_bytes(t));
    DSI_ASSERT(t->offset >= 8 && t->offset <= size && t->nbytes <= size - t->offset && p == data + t->offset);
    if (t->nbytes) sink ^= p[0] ^ p[t->nbytes - 1];
    if (fin == DSI_OK) DSI_ASSERT(dsi_st_find(&set, t->name) == t);
  }
  (void)sink;
  /* the same tensors again, as a second file, are all duplicates */
  if (fin == DSI_OK && set.n_tensors > 0) {
    DSI_ASSERT(dsi_st_parse_header(&set, data, size, 1, "copy.safetensors", &err) == DSI_OK);
    DSI_ASSERT(dsi_st_finish(&set, &err) == DSI_E_FORMAT && strstr(err.msg, "appears"));
  }
  dsi_st_close(&set);
  return 0;
}
