/* base: status codes, error messages, assertions, logging, timers and the
 * small allocation and file helpers every other layer uses. Nothing here
 * knows about models. */
#ifndef DSI_BASE_H
#define DSI_BASE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdbool.h>

#include "dsinfer_status.h"

/* ---- assertions: a broken invariant is a bug, not a user error ---- */
#define DSI_ASSERT(c) \
  do { if (!(c)) dsi_panic(__FILE__, __LINE__, #c); } while (0)
_Noreturn void dsi_panic(const char *file, int line, const char *what);

#define DSI_MIN(a, b) ((a) < (b) ? (a) : (b))
#define DSI_MAX(a, b) ((a) > (b) ? (a) : (b))
#define DSI_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define DSI_CEIL_DIV(a, b) (((a) + (b) - 1) / (b))

/* ---- errors a user can cause: a status plus a message naming the cause ---- */
/* dsi_err is defined in dsinfer.h. Set the message (printf-style) and
 * return the status, so call sites read `return dsi_errf(err, DSI_E_..., ...)`.
 * err may be NULL. */
int dsi_errf(dsi_err *err, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Prefix an existing message: "ctx: <old message>". Returns status. */
int dsi_err_prefix(dsi_err *err, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- logging to stderr ---- */
enum { DSI_LOG_ERROR, DSI_LOG_WARN, DSI_LOG_INFO, DSI_LOG_DEBUG };
void dsi_log_set_level(int level);
int dsi_log_level(void);
void dsi_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- memory ---- */
/* Running out is an error the caller reports, everywhere (plain malloc and
 * a check for small things; these for the aligned and the large). */

/* cJSON returns NULL, or leaves a node out, when an allocation fails: a
 * parse then looks like bad JSON, a tree being built loses parts without a
 * word. Its allocations go through these hooks (installed once for the
 * process by the first clear, cJSON_InitHooks: malloc and free, so a
 * program that uses cJSON too keeps working, though hooks of its own would
 * be replaced), which note a failure in a flag of the calling thread:
 * clear it before parsing or building, and look at it when the result is
 * NULL or before using the tree. */
void dsi_json_oom_clear(void);
int dsi_json_oom(void); /* a cJSON allocation of this thread failed since the clear */
/* n bytes at s as a JSON string literal on f, quotes included: '"', '\\'
 * and the control characters escaped, other bytes as they are (a name or
 * a path may hold any of them) */
void dsi_json_put_str(FILE *f, const char *s, size_t n);
/* 64-byte aligned, zeroed; NULL on failure. Free with dsi_free_aligned.
 * From 4 MiB on, a mapping of its own, with huge pages advised when huge
 * is set (dsi_alloc_aligned: always). */
void *dsi_alloc_aligned_huge(size_t n, int huge);
static inline void *dsi_alloc_aligned(size_t n) { return dsi_alloc_aligned_huge(n, 1); }
void dsi_free_aligned(void *p);
/* Large anonymous mapping, huge pages advised when huge is set (and it
 * spans one); NULL on failure. */
void *dsi_alloc_big(size_t n, int huge);
void dsi_free_big(void *p, size_t n);
/* Bytes resident (VmRSS) and peak (VmHWM) of this process; 0 if unknown. */
size_t dsi_rss_bytes(void);
size_t dsi_peak_rss_bytes(void);
/* the kernel's estimate of memory available without swapping (MemAvailable); 0 unknown */
size_t dsi_mem_available(void);
size_t dsi_mem_total(void); /* MemTotal; 0 unknown */
/* start the peak afresh from the current RSS (where the kernel allows) */
void dsi_rss_reset_peak(void);

/* ---- arena: bump allocation, reset as a whole ---- */
typedef struct dsi_arena {
  uint8_t *base;
  size_t cap, used, peak;
} dsi_arena;
int dsi_arena_init(dsi_arena *a, size_t cap);
void *dsi_arena_alloc(dsi_arena *a, size_t n); /* 64-aligned; asserts fit */
void dsi_arena_reset(dsi_arena *a);
void dsi_arena_free(dsi_arena *a);

/* ---- time ---- */
double dsi_now(void); /* seconds, monotonic */
double dsi_median(double *v, int n); /* of n values (sorts v); 0 for none */

/* ---- checked size arithmetic: sizes taken from files and configs ---- */
/* *out = a * b (a + b); 0, or -1 when it does not fit a size_t (then *out is SIZE_MAX) */
int dsi_size_mul(size_t a, size_t b, size_t *out);
int dsi_size_add(size_t a, size_t b, size_t *out);

/* ---- files ---- */
/* JSON inputs (config, tokenizer, index, templates) are read up to this size */
#define DSI_JSON_MAX ((size_t)256 << 20)
/* Open path for reading: a regular file (or a symlink to one), never a
 * FIFO, device or directory (opened without blocking, then checked).
 * Returns the fd (>= 0) and its size, or a negative status with a message
 * naming the path ("is a directory", "not a regular file"). */
int dsi_open_regular(const char *path, size_t *size, dsi_err *err);
/* Read a whole regular file of at most max bytes, NUL-terminated. Returns status. */
int dsi_read_file_max(const char *path, size_t max, char **out, size_t *len, dsi_err *err);
/* dsi_read_file_max with DSI_JSON_MAX */
int dsi_read_file(const char *path, char **out, size_t *len, dsi_err *err);
int dsi_write_file(const char *path, const void *data, size_t len, dsi_err *err);
/* a/b joined into buf; returns buf */
char *dsi_path_join(char *buf, size_t cap, const char *a, const char *b);

/* ---- deterministic random numbers (xoshiro256**) ---- */
typedef struct dsi_rng { uint64_t s[4]; } dsi_rng;
void dsi_rng_seed(dsi_rng *r, uint64_t seed);
uint64_t dsi_rng_u64(dsi_rng *r);
float dsi_rng_uniform(dsi_rng *r);  /* [0,1) */
float dsi_rng_normal(dsi_rng *r);   /* N(0,1) */

#endif
