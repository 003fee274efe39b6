/* model: writing one safetensors file — tensors are declared first, the
 * header is written as Hugging Face writes it (compact JSON in declaration
 * order, space-padded to 8 bytes), then the data streams in declared order. */
#include "model/safetensors.h"
#include "base/sbuf.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct st_entry {
  char *name;
  dsi_dtype dtype;
  int ndim;
  int64_t shape[DSI_ST_MAX_DIMS];
  size_t nbytes;
} st_entry;

struct dsi_st_writer {
  st_entry *tensors;
  int n, cap;
  char *bad;          /* first invalid declaration, reported by begin */
  int oom;            /* a declaration could not be held: begin fails */
  FILE *f;
  char *path;
  int cur;            /* tensor receiving data */
  size_t cur_written; /* bytes of tensors[cur] written so far */
  int failed;         /* status of the first failure: later calls fail too */

  /* Chunks are gathered into one of two ST_BUF blocks; a full block goes to
   * the flusher thread, which fwrites it while the caller generates and
   * fills the other, so generation and the kernel's copy overlap. */
  uint8_t *buf[2];
  int fill;           /* block being filled by the caller */
  size_t fill_n;
  pthread_t flusher;
  int flusher_on;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int busy;           /* the flusher holds a block */
  size_t busy_n;
  int busy_buf;
  int quit;
  int io_errno;       /* first fwrite failure of the flusher */
};

enum { ST_BUF = 4 << 20 };

dsi_st_writer *dsi_st_writer_new(void) { return calloc(1, sizeof(dsi_st_writer)); }

static void flusher_stop(dsi_st_writer *w);

void dsi_st_writer_free(dsi_st_writer *w) {
  if (!w) return;
  flusher_stop(w);
  if (w->f) fclose(w->f);
  for (int i = 0; i < w->n; i++) free(w->tensors[i].name);
  free(w->tensors);
  free(w->bad);
  free(w->path);
  free(w->buf[0]);
  free(w->buf[1]);
  free(w);
}

/* ---- declaring tensors ---- */

/* A bad declaration (ndim out of range, negative dim, empty name), or one
 * there is no memory for, is kept and reported by dsi_st_writer_begin,
 * since add returns nothing. */
void dsi_st_writer_add(dsi_st_writer *w, const char *name, dsi_dtype dt, int ndim, const int64_t *shape) {
  DSI_ASSERT(w && name && !w->f);
  if (w->oom) return;
  if (!w->bad) {
    char why[160] = "";
    if (!*name) snprintf(why, sizeof why, "empty tensor name");
    else if (ndim < 0 || ndim > DSI_ST_MAX_DIMS) snprintf(why, sizeof why, "%d dimensions (at most %d)", ndim, DSI_ST_MAX_DIMS);
    else if (dsi_dtype_size(dt) == 0) snprintf(why, sizeof why, "unknown dtype %d", (int)dt);
    for (int d = 0; !*why && d < ndim; d++)
      if (shape[d] < 0) snprintf(why, sizeof why, "dimension %d is %lld", d, (long long)shape[d]);
    if (*why) {
      const char *who = *name ? name : "(unnamed)";
      size_t n = strlen(who) + strlen(why) + 3;
      if (!(w->bad = malloc(n))) {
        w->oom = 1;
        return;
      }
      snprintf(w->bad, n, "%s: %s", who, why);
    }
  }
  if (w->n == w->cap) {
    int cap = w->cap ? 2 * w->cap : 64;
    st_entry *grown = realloc(w->tensors, (size_t)cap * sizeof *w->tensors);
    if (!grown) {
      w->oom = 1;
      return;
    }
    w->tensors = grown;
    w->cap = cap;
  }
  st_entry *t = &w->tensors[w->n];
  memset(t, 0, sizeof *t);
  if (!(t->name = strdup(name))) {
    w->oom = 1;
    return;
  }
  w->n++;
  t->dtype = dt;
  t->ndim = (ndim < 0 || ndim > DSI_ST_MAX_DIMS) ? 0 : ndim;
  t->nbytes = dsi_dtype_size(dt);
  for (int d = 0; d < t->ndim; d++) {
    t->shape[d] = shape[d] < 0 ? 0 : shape[d];
    t->nbytes *= (size_t)t->shape[d];
  }
}

/* ---- the header ---- */

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static int cmp_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The header JSON, padded with spaces so that 8 + its length is a multiple
 * of 8 (data then starts 8-aligned, as Hugging Face's writer does); NULL
 * when out of memory. */
static char *header_json(const dsi_st_writer *w, size_t *len) {
  sbuf b = {0};
  sb_str(&b, "{\"__metadata__\":{\"format\":\"pt\"}");
  size_t off = 0;
  for (int i = 0; i < w->n; i++) {
    const st_entry *t = &w->tensors[i];
    sb_str(&b, ",");
    sb_json(&b, t->name);
    sb_str(&b, ":{\"dtype\":\"");
    sb_str(&b, dsi_dtype_st_name(t->dtype));
    sb_str(&b, "\",\"shape\":[");
    for (int d = 0; d < t->ndim; d++) {
      if (d) sb_str(&b, ",");
      sb_printf(&b, "%llu", (unsigned long long)t->shape[d]);
    }
    sb_str(&b, "],\"data_offsets\":[");
    sb_printf(&b, "%zu,%zu]}", off, off + t->nbytes);
    off += t->nbytes;
  }
  sb_str(&b, "}");
  while (b.n % 8 && !b.oom) sb_str(&b, " ");
  if (b.oom) {
    free(b.p);
    return NULL;
  }
  *len = b.n;
  return b.p;
}

/* ---- the flusher thread ---- */

static void *flusher_main(void *arg) {
  dsi_st_writer *w = arg;
  pthread_mutex_lock(&w->mu);
  for (;;) {
    while (!w->busy && !w->quit) pthread_cond_wait(&w->cv, &w->mu);
    if (!w->busy) break;
    const uint8_t *b = w->buf[w->busy_buf];
    size_t n = w->busy_n;
    int ok = !w->io_errno;
    pthread_mutex_unlock(&w->mu);
    errno = 0;
    int e = ok && fwrite(b, 1, n, w->f) != n ? (errno ? errno : EIO) : 0;
    pthread_mutex_lock(&w->mu);
    if (e && !w->io_errno) w->io_errno = e;
    w->busy = 0;
    pthread_cond_broadcast(&w->cv);
  }
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

/* Wait until the flusher is idle; returns its first error (an errno) or 0. */
static int flusher_wait(dsi_st_writer *w) {
  pthread_mutex_lock(&w->mu);
  while (w->busy) pthread_cond_wait(&w->cv, &w->mu);
  int e = w->io_errno;
  pthread_mutex_unlock(&w->mu);
  return e;
}

/* Hand the filled block to the flusher (written directly when there is no
 * thread); returns an errno of this or an earlier block, or 0. */
static int flusher_push(dsi_st_writer *w) {
  if (w->fill_n == 0) return 0;
  if (!w->flusher_on) {
    errno = 0;
    size_t n = w->fill_n;
    w->fill_n = 0;
    return fwrite(w->buf[w->fill], 1, n, w->f) != n ? (errno ? errno : EIO) : 0;
  }
  int e = flusher_wait(w);
  if (e) return e;
  pthread_mutex_lock(&w->mu);
  w->busy = 1;
  w->busy_buf = w->fill;
  w->busy_n = w->fill_n;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
  w->fill ^= 1;
  w->fill_n = 0;
  return 0;
}

static void flusher_start(dsi_st_writer *w) {
  w->busy = w->quit = w->io_errno = 0;
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->cv, NULL);
  /* without a thread the blocks are simply written in turn */
  w->flusher_on = pthread_create(&w->flusher, NULL, flusher_main, w) == 0;
  if (!w->flusher_on) {
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
  }
}

static void flusher_stop(dsi_st_writer *w) {
  if (!w->flusher_on) return;
  pthread_mutex_lock(&w->mu);
  w->quit = 1;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
  pthread_join(w->flusher, NULL);
  pthread_cond_destroy(&w->cv);
  pthread_mutex_destroy(&w->mu);
  w->flusher_on = 0;
}

static int write_failed(dsi_st_writer *w, dsi_err *err, const char *what, int e) {
  w->failed = DSI_E_IO;
  return dsi_errf(err, DSI_E_IO, "%s: write error (%s): %s", w->path, what, strerror(e ? e : EIO));
}

/* ---- writing ---- */

int dsi_st_writer_begin(dsi_st_writer *w, const char *path, dsi_err *err) {
  DSI_ASSERT(w && path && !w->f);
  if (w->oom) return dsi_errf(err, DSI_E_NOMEM, "%s: out of memory declaring %d tensors", path, w->n + 1);
  if (w->bad) return dsi_errf(err, DSI_E_INVAL, "%s: bad tensor %s", path, w->bad);
  if (w->n > 1) {
    char **names = malloc((size_t)w->n * sizeof *names);
    if (!names) return dsi_errf(err, DSI_E_NOMEM, "%s: out of memory checking %d tensor names", path, w->n);
    for (int i = 0; i < w->n; i++) names[i] = w->tensors[i].name;
    qsort(names, (size_t)w->n, sizeof *names, cmp_name);
    for (int i = 1; i < w->n; i++)
      if (!strcmp(names[i - 1], names[i])) {
        int st = dsi_errf(err, DSI_E_INVAL, "%s: tensor %s declared twice", path, names[i]);
        free(names);
        return st;
      }
    free(names);
  }

  free(w->path);
  if (!(w->path = strdup(path))) return dsi_errf(err, DSI_E_NOMEM, "%s: out of memory", path);
  for (int i = 0; i < 2; i++)
    if (!w->buf[i] && !(w->buf[i] = malloc(ST_BUF)))
      return dsi_errf(err, DSI_E_NOMEM, "%s: out of memory for the write buffers", path);
  size_t hlen;
  char *h = header_json(w, &hlen);
  if (!h) return dsi_errf(err, DSI_E_NOMEM, "%s: out of memory for the header of %d tensors", path, w->n);
  errno = 0;
  w->f = fopen(path, "wb");
  if (!w->f) {
    free(h);
    return dsi_errf(err, DSI_E_IO, "%s: cannot create: %s", path, strerror(errno));
  }
  w->cur = 0;
  w->cur_written = 0;
  w->failed = 0;

  uint8_t len8[8];
  for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
  errno = 0;
  int ok = fwrite(len8, 1, 8, w->f) == 8 && fwrite(h, 1, hlen, w->f) == hlen;
  free(h);
  if (!ok) return write_failed(w, err, "header", errno);

  w->fill = 0;
  w->fill_n = 0;
  flusher_start(w);
  /* zero-byte tensors need no data call */
  while (w->cur < w->n && w->tensors[w->cur].nbytes == 0) w->cur++;
  return DSI_OK;
}

/* A chunk belongs to one tensor: it may not run past the end of the tensor
 * being written, so a generator that writes too little for one tensor and
 * too much for the next is caught here, not hidden by the total. */
int dsi_st_writer_data(dsi_st_writer *w, const void *data, size_t n, dsi_err *err) {
  DSI_ASSERT(w && w->f);
  if (w->failed) return dsi_errf(err, w->failed, "%s: an earlier write failed", w->path);
  if (n == 0) return DSI_OK;
  if (w->cur >= w->n) {
    w->failed = DSI_E_INVAL;
    return dsi_errf(err, DSI_E_INVAL, "%s: %zu bytes of data after the last tensor", w->path, n);
  }
  st_entry *t = &w->tensors[w->cur];
  if (n > t->nbytes - w->cur_written) {
    w->failed = DSI_E_INVAL;
    return dsi_errf(err, DSI_E_INVAL, "%s: tensor %s: chunk of %zu bytes after %zu overruns its %zu bytes",
                    w->path, t->name, n, w->cur_written, t->nbytes);
  }
  for (size_t done = 0; done < n;) {
    size_t k = DSI_MIN(n - done, ST_BUF - w->fill_n);
    memcpy(w->buf[w->fill] + w->fill_n, (const uint8_t *)data + done, k);
    w->fill_n += k;
    done += k;
    int e = w->fill_n == ST_BUF ? flusher_push(w) : 0;
    if (e) return write_failed(w, err, t->name, e);
  }
  w->cur_written += n;
  if (w->cur_written == t->nbytes) {
    w->cur_written = 0;
    do w->cur++; while (w->cur < w->n && w->tensors[w->cur].nbytes == 0);
  }
  return DSI_OK;
}

int dsi_st_writer_end(dsi_st_writer *w, dsi_err *err) {
  DSI_ASSERT(w && w->f);
  int st = DSI_OK, e = 0;
  if (w->failed) {
    st = dsi_errf(err, w->failed, "%s: an earlier write failed", w->path);
  } else if (w->cur < w->n) {
    const st_entry *t = &w->tensors[w->cur];
    st = dsi_errf(err, DSI_E_INVAL, "%s: tensor %s: only %zu of its %zu bytes were written",
                  w->path, t->name, w->cur_written, t->nbytes);
  } else {
    e = flusher_push(w);
    if (!e && w->flusher_on) e = flusher_wait(w);
  }
  flusher_stop(w);
  FILE *f = w->f;
  w->f = NULL;
  if (st != DSI_OK) {
    fclose(f);
    return st;
  }
  errno = 0;
  if (!e && fflush(f) != 0) e = errno ? errno : EIO;
  errno = 0;
  if (fclose(f) != 0 && !e) e = errno ? errno : EIO;
  if (e) return dsi_errf(err, DSI_E_IO, "%s: write error: %s", w->path, strerror(e));
  return DSI_OK;
}
