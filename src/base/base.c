/* base: implementation of errors, logging, memory, arena, time, files, rng. */
#define _GNU_SOURCE
#include "base/base.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- assertions ---- */
void dsi_panic(const char *file, int line, const char *what) {
  fprintf(stderr, "dsinfer: internal error at %s:%d: assertion `%s' failed\n", file, line, what);
  fflush(stderr);
  abort();
}

/* ---- errors ---- */
int dsi_errf(dsi_err *err, int status, const char *fmt, ...) {
  if (err) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    err->status = status;
  }
  return status;
}

int dsi_err_prefix(dsi_err *err, int status, const char *fmt, ...) {
  if (err) {
    char pre[256], old[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    size_t n = strlen(pre);
    if (n > sizeof err->msg - 3) n = sizeof err->msg - 3;
    memcpy(err->msg, pre, n);
    memcpy(err->msg + n, ": ", 2);
    size_t room = sizeof err->msg - n - 3, ol = strnlen(old, sizeof old - 1);
    if (ol > room) ol = room;
    memcpy(err->msg + n + 2, old, ol);
    err->msg[n + 2 + ol] = 0;
    err->status = status;
  }
  return status;
}

const char *dsi_status_str(int status) {
  switch (status) {
  case DSI_OK: return "ok";
  case DSI_E_INVAL: return "invalid argument";
  case DSI_E_IO: return "i/o error";
  case DSI_E_FORMAT: return "bad file format";
  case DSI_E_CONFIG: return "bad model config";
  case DSI_E_NOMEM: return "out of memory";
  case DSI_E_CAPACITY: return "over capacity";
  case DSI_E_UNSUPPORTED: return "unsupported";
  }
  return "unknown error";
}

/* ---- logging ---- */
static int g_log_level = DSI_LOG_INFO; /* process-wide verbosity, set once by the CLI */
void dsi_log_set_level(int level) { g_log_level = level; }
int dsi_log_level(void) { return g_log_level; }
void dsi_log(int level, const char *fmt, ...) {
  if (level > g_log_level) return;
  static const char *tag[] = {"error", "warning", "info", "debug"};
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "dsinfer: %s: ", tag[level]);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

/* ---- memory ---- */
static _Thread_local int t_json_oom;
static void *json_malloc(size_t n) {
  void *p = malloc(n);
  if (!p) t_json_oom = 1;
  return p;
}
static void json_hooks(void) { cJSON_InitHooks(&(cJSON_Hooks){.malloc_fn = json_malloc, .free_fn = free}); }
void dsi_json_put_str(FILE *f, const char *s, size_t n) {
  fputc('"', f);
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    switch (c) {
    case '"': fputs("\\\"", f); break;
    case '\\': fputs("\\\\", f); break;
    case '\n': fputs("\\n", f); break;
    case '\r': fputs("\\r", f); break;
    case '\t': fputs("\\t", f); break;
    default:
      if (c < 0x20) fprintf(f, "\\u%04x", c);
      else fputc(c, f);
    }
  }
  fputc('"', f);
}

void dsi_json_oom_clear(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, json_hooks);
  t_json_oom = 0;
}
int dsi_json_oom(void) { return t_json_oom; }

/* Small blocks: calloc, not posix_memalign + memset. From DSI_HUGE_MIN on
 * (the activation arena, the KV cache, the attention's blocks): a
 * dsi_alloc_big mapping of its own, the block starting 64 bytes past a
 * 2 MiB boundary so that its huge pages start with it. Their rows are read
 * a page or more apart (a query row of V3's 128 heads is 96 KiB), and on
 * 4 KiB pages each was a TLB miss. Both are zeroed and take memory only as
 * far as a step touches them (glibc maps fresh zero pages for large
 * callocs). The two words below the block: where the allocation starts,
 * and the mapping's length (0: calloc's). */
#define DSI_HUGE_MIN ((size_t)4 << 20)
#define DSI_HUGE_ALIGN ((size_t)2 << 20)
void *dsi_alloc_aligned_huge(size_t n, int huge) {
  uintptr_t raw, a, len = 0;
  size_t padded;
  if (dsi_size_add(n, 64 + DSI_HUGE_ALIGN, &padded)) return NULL;
  if (n >= DSI_HUGE_MIN) {
    len = padded;
    if (!(raw = (uintptr_t)dsi_alloc_big(len, huge))) return NULL;
    a = ((raw + DSI_HUGE_ALIGN - 1) & ~(uintptr_t)(DSI_HUGE_ALIGN - 1)) + 64;
  } else {
    if (!(raw = (uintptr_t)calloc(1, n + 64 + 2 * sizeof(uintptr_t)))) return NULL;
    a = (raw + 2 * sizeof(uintptr_t) + 63) & ~(uintptr_t)63;
  }
  ((uintptr_t *)a)[-2] = raw;
  ((uintptr_t *)a)[-1] = len;
  return (void *)a;
}
void dsi_free_aligned(void *p) {
  if (!p) return;
  const uintptr_t *h = (const uintptr_t *)p;
  if (h[-1]) dsi_free_big((void *)h[-2], h[-1]);
  else free((void *)h[-2]);
}

void *dsi_alloc_big(size_t n, int huge) {
  if (n == 0) n = 1;
  void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
  if (huge && n >= (2u << 20)) madvise(p, n, MADV_HUGEPAGE);
#else
  (void)huge;
#endif
  return p;
}
void dsi_free_big(void *p, size_t n) {
  if (p) munmap(p, n ? n : 1);
}

/* a "Key:  N kB" line of a /proc file, in bytes; 0 when absent */
static size_t proc_kb(const char *file, const char *key) {
  FILE *f = fopen(file, "r");
  if (!f) return 0;
  char line[256];
  size_t kb = 0, klen = strlen(key);
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, key, klen)) { kb = strtoull(line + klen, NULL, 10); break; }
  fclose(f);
  return kb * 1024;
}
size_t dsi_rss_bytes(void) { return proc_kb("/proc/self/status", "VmRSS:"); }

size_t dsi_mem_available(void) { return proc_kb("/proc/meminfo", "MemAvailable:"); }
size_t dsi_mem_total(void) { return proc_kb("/proc/meminfo", "MemTotal:"); }
size_t dsi_peak_rss_bytes(void) { return proc_kb("/proc/self/status", "VmHWM:"); }
void dsi_rss_reset_peak(void) {
  FILE *f = fopen("/proc/self/clear_refs", "w"); /* "5" resets VmHWM to VmRSS */
  if (f) {
    fputs("5", f);
    fclose(f);
  }
}

/* ---- arena ---- */
int dsi_arena_init(dsi_arena *a, size_t cap) {
  memset(a, 0, sizeof *a);
  a->base = dsi_alloc_aligned(cap);
  if (!a->base && cap) return DSI_E_NOMEM;
  a->cap = cap;
  return DSI_OK;
}
void *dsi_arena_alloc(dsi_arena *a, size_t n) {
  size_t off = (a->used + 63) & ~(size_t)63;
  DSI_ASSERT(off + n <= a->cap);
  a->used = off + n;
  if (a->used > a->peak) a->peak = a->used;
  return a->base + off;
}
void dsi_arena_reset(dsi_arena *a) { a->used = 0; }
void dsi_arena_free(dsi_arena *a) {
  dsi_free_aligned(a->base);
  memset(a, 0, sizeof *a);
}

/* ---- time ---- */
double dsi_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- files ---- */
/* ---- checked size arithmetic ---- */
int dsi_size_mul(size_t a, size_t b, size_t *out) {
  if (__builtin_mul_overflow(a, b, out)) { *out = SIZE_MAX; return -1; }
  return 0;
}
int dsi_size_add(size_t a, size_t b, size_t *out) {
  if (__builtin_add_overflow(a, b, out)) { *out = SIZE_MAX; return -1; }
  return 0;
}

/* ---- files ---- */
int dsi_open_regular(const char *path, size_t *size, dsi_err *err) {
  if (!*path) return dsi_errf(err, DSI_E_IO, "empty file name");
  /* O_NONBLOCK: opening a FIFO with no writer must not hang before the check */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return dsi_errf(err, DSI_E_IO, "%s: %s", path, strerror(errno));
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    int e = errno;
    close(fd);
    return dsi_errf(err, DSI_E_IO, "%s: %s", path, strerror(e));
  }
  if (!S_ISREG(sb.st_mode)) {
    close(fd);
    return dsi_errf(err, DSI_E_IO, "%s: %s", path, S_ISDIR(sb.st_mode) ? "is a directory, not a regular file" : "not a regular file");
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  if (size) *size = (size_t)sb.st_size;
  return fd;
}

int dsi_read_file_max(const char *path, size_t max, char **out, size_t *len, dsi_err *err) {
  size_t size;
  int fd = dsi_open_regular(path, &size, err);
  if (fd < 0) return fd;
  if (size > max) {
    close(fd);
    return dsi_errf(err, DSI_E_IO, "%s: %zu bytes is over the limit of %zu MB for this file", path, size, max >> 20);
  }
  char *buf = malloc(size + 1);
  if (!buf) {
    close(fd);
    return dsi_errf(err, DSI_E_NOMEM, "%s: out of memory reading %zu bytes", path, size);
  }
  size_t n = 0;
  while (n < size) { /* the size stat gave; a file that grows meanwhile is read that far */
    ssize_t r = read(fd, buf + n, size - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int e = errno;
      close(fd);
      free(buf);
      return dsi_errf(err, DSI_E_IO, "%s: read error: %s", path, strerror(e));
    }
    if (r == 0) break;
    n += (size_t)r;
  }
  close(fd);
  buf[n] = 0;
  *out = buf;
  if (len) *len = n;
  return DSI_OK;
}

int dsi_read_file(const char *path, char **out, size_t *len, dsi_err *err) {
  return dsi_read_file_max(path, DSI_JSON_MAX, out, len, err);
}

int dsi_write_file(const char *path, const void *data, size_t len, dsi_err *err) {
  FILE *f = fopen(path, "wb");
  if (!f) return dsi_errf(err, DSI_E_IO, "%s: %s", path, strerror(errno));
  size_t w = fwrite(data, 1, len, f);
  int e = w != len ? errno : 0;
  if (fclose(f) != 0 && !e) e = errno ? errno : EIO;
  if (w != len || e) return dsi_errf(err, DSI_E_IO, "%s: write error: %s", path, strerror(e ? e : EIO));
  return DSI_OK;
}

char *dsi_path_join(char *buf, size_t cap, const char *a, const char *b) {
  size_t la = strlen(a);
  snprintf(buf, cap, "%s%s%s", a, (la && a[la - 1] == '/') ? "" : "/", b);
  return buf;
}

/* ---- rng: xoshiro256** seeded by splitmix64 ---- */
static uint64_t splitmix(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
void dsi_rng_seed(dsi_rng *r, uint64_t seed) {
  for (int i = 0; i < 4; i++) r->s[i] = splitmix(&seed);
}
static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
uint64_t dsi_rng_u64(dsi_rng *r) {
  uint64_t *s = r->s, res = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
  s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3]; s[2] ^= t; s[3] = rotl(s[3], 45);
  return res;
}
float dsi_rng_uniform(dsi_rng *r) { return (dsi_rng_u64(r) >> 40) * (1.0f / 16777216.0f); }
float dsi_rng_normal(dsi_rng *r) {
  float u1 = dsi_rng_uniform(r), u2 = dsi_rng_uniform(r);
  if (u1 < 1e-7f) u1 = 1e-7f;
  return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
}

/* ---- statistics ---- */
static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}
double dsi_median(double *v, int n) {
  qsort(v, n, sizeof(double), cmp_double);
  return n ? (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2])) : 0;
}
