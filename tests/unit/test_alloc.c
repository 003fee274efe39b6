/* tests: dsi_alloc_aligned_huge — small blocks from calloc, from 4 MiB on
 * a mapping of their own, huge pages advised or not (base.c) — zeroed,
 * 64-byte aligned, writable to the last byte, and freed through the one
 * dsi_free_aligned whichever way they were made (ASan checks the calloc
 * side; a wrong munmap length or address would fault or leak the map). */
#include "base/base.h"
#include "check.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void one(size_t n, int huge) {
  uint8_t *p = dsi_alloc_aligned_huge(n, huge);
  CHECKF(p != NULL, "%zu bytes: not allocated", n);
  if (!p) return;
  CHECKF(((uintptr_t)p & 63) == 0, "%zu bytes: not 64-byte aligned", n);
  size_t nz = 0;
  for (size_t i = 0; i < n; i += 4093) nz += p[i] != 0;
  nz += p[n - 1] != 0;
  CHECKF(nz == 0, "%zu bytes: not zeroed", n);
  memset(p, 0xa5, n);
  CHECKF(p[0] == 0xa5 && p[n - 1] == 0xa5, "%zu bytes: not writable", n);
  dsi_free_aligned(p);
}

int main(void) {
  static const size_t sizes[] = {1, 63, 64, 4096, (4u << 20) - 1, 4u << 20, (4u << 20) + 1, 9u << 20, 33u << 20};
  for (int round = 0; round < 2; round++) { /* huge pages advised, then not */
    for (size_t i = 0; i < DSI_ARRAY_LEN(sizes); i++)
      for (int k = 0; k < 3; k++) one(sizes[i], !round);
    printf("%s: %zu sizes allocated, checked and freed\n", round ? "no huge pages" : "huge pages advised",
           DSI_ARRAY_LEN(sizes));
  }
  dsi_free_aligned(NULL);
  return check_done();
}
