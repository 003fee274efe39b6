/* model: reading safetensors checkpoints — the header of one file validated
 * field by field, the files of a directory (index.json shards, one file, or
 * every *.safetensors) mapped read-only, and the sorted tensor table. */
#define _GNU_SOURCE
#include "model/safetensors.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* A header longer than this is not a checkpoint (DeepSeek-V3's largest
 * shard header is under 100 KB). */
#define ST_MAX_HEADER ((uint64_t)100 << 20)
/* integers above 2^53 do not survive JSON numbers as doubles */
#define ST_MAX_JSON_INT 9007199254740992.0

/* ---- one file's header ---- */

/* a JSON number that is a whole, non-negative, exactly representable integer */
static int st_json_uint(const cJSON *it, uint64_t *out) {
  if (!cJSON_IsNumber(it)) return 0;
  double v = it->valuedouble;
  if (!(v >= 0 && v <= ST_MAX_JSON_INT) || v != floor(v)) return 0;
  *out = (uint64_t)v;
  return 1;
}

/* the byte extent of one tensor inside the data section, for the overlap check */
typedef struct st_extent {
  uint64_t begin, end;
  int tensor;
} st_extent;

static int cmp_extent(const void *a, const void *b) {
  const st_extent *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return 0;
}

static int st_bad(dsi_err *err, const char *path, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int st_bad(dsi_err *err, const char *path, const char *name, const char *fmt, ...) {
  char what[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  return dsi_errf(err, DSI_E_FORMAT, "%s: tensor \"%.200s\": %s", path, name, what);
}

/* Fill t from one header entry. data/data_size: the data section. */
static int st_parse_entry(dsi_st_tensor *t, st_extent *ext, const cJSON *e, const uint8_t *data,
                          uint64_t data_size, const char *path, dsi_err *err) {
  const char *name = e->string;
#define ST_BAD(...) st_bad(err, path, name, __VA_ARGS__)
  if (!cJSON_IsObject(e)) return ST_BAD("expected an object with dtype, shape and data_offsets");
  const cJSON *dtype = NULL, *shape = NULL, *offs = NULL;
  for (const cJSON *f = e->child; f; f = f->next) {
    const cJSON **slot = !strcmp(f->string, "dtype") ? &dtype
                         : !strcmp(f->string, "shape") ? &shape
                         : !strcmp(f->string, "data_offsets") ? &offs : NULL;
    if (!slot) return ST_BAD("unexpected field \"%.64s\"", f->string);
    if (*slot) return ST_BAD("field \"%s\" appears twice", f->string);
    *slot = f;
  }
  if (!dtype || !shape || !offs)
    return ST_BAD("missing field \"%s\"", !dtype ? "dtype" : !shape ? "shape" : "data_offsets");

  if (!cJSON_IsString(dtype)) return ST_BAD("dtype is not a string");
  int dt = dsi_dtype_from_st_name(dtype->valuestring);
  if (dt < 0) return ST_BAD("unknown dtype \"%.64s\"", dtype->valuestring);
  t->dtype = (dsi_dtype)dt;

  if (!cJSON_IsArray(shape)) return ST_BAD("shape is not a list");
  int ndim = cJSON_GetArraySize(shape);
  if (ndim > DSI_ST_MAX_DIMS) return ST_BAD("shape has %d dimensions (at most %d)", ndim, DSI_ST_MAX_DIMS);
  t->ndim = ndim;
  int zero = 0, i = 0;
  for (const cJSON *d = shape->child; d; d = d->next, i++) {
    uint64_t v;
    if (!st_json_uint(d, &v)) return ST_BAD("shape[%d] is not a non-negative integer", i);
    t->shape[i] = (int64_t)v;
    zero |= v == 0;
  }
  /* bytes = product of dims x element size; an empty tensor is 0 even if
   * the other dims alone would overflow */
  uint64_t nbytes = 0;
  if (!zero) {
    nbytes = dsi_dtype_size(t->dtype);
    for (i = 0; i < ndim; i++)
      if (__builtin_mul_overflow(nbytes, (uint64_t)t->shape[i], &nbytes))
        return ST_BAD("shape's byte size overflows");
  }

  uint64_t begin, end;
  if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 || !st_json_uint(offs->child, &begin) ||
      !st_json_uint(offs->child->next, &end))
    return ST_BAD("data_offsets is not a list of two non-negative integers");
  if (end < begin) return ST_BAD("data_offsets [%llu, %llu] end before begin", (unsigned long long)begin,
                                 (unsigned long long)end);
  if (end > data_size)
    return ST_BAD("data_offsets [%llu, %llu] run past the data section (%llu bytes)",
                  (unsigned long long)begin, (unsigned long long)end, (unsigned long long)data_size);
  if (end - begin != nbytes)
    return ST_BAD("%llu bytes in data_offsets but dtype %s and its shape need %llu",
                  (unsigned long long)(end - begin), dsi_dtype_st_name(t->dtype), (unsigned long long)nbytes);
#undef ST_BAD
  t->nbytes = (size_t)nbytes;
  t->data = data + begin;
  ext->begin = begin;
  ext->end = end;
  return DSI_OK;
}

/* the tensors of one header never share a byte */
static int st_check_overlap(const dsi_st_tensor *ts, st_extent *ext, int n, const char *path, dsi_err *err) {
  if (n > 1) qsort(ext, (size_t)n, sizeof *ext, cmp_extent);
  int prev = -1; /* last non-empty extent */
  for (int i = 0; i < n; i++) {
    if (ext[i].begin == ext[i].end) continue;
    if (prev >= 0 && ext[i].begin < ext[prev].end)
      return dsi_errf(err, DSI_E_FORMAT, "%s: tensor \"%.200s\" [%llu, %llu) overlaps tensor \"%.200s\" [%llu, %llu)",
                      path, ts[ext[i].tensor].name, (unsigned long long)ext[i].begin,
                      (unsigned long long)ext[i].end, ts[ext[prev].tensor].name,
                      (unsigned long long)ext[prev].begin, (unsigned long long)ext[prev].end);
    prev = i;
  }
  return DSI_OK;
}

static int st_check_metadata(const cJSON *m, const char *path, dsi_err *err) {
  if (!cJSON_IsObject(m)) return dsi_errf(err, DSI_E_FORMAT, "%s: __metadata__ is not an object", path);
  for (const cJSON *f = m->child; f; f = f->next)
    if (!cJSON_IsString(f))
      return dsi_errf(err, DSI_E_FORMAT, "%s: __metadata__ \"%.200s\" is not a string", path, f->string);
  return DSI_OK;
}

/* the header's JSON, or NULL with err set */
static cJSON *st_parse_json(const uint8_t *buf, uint64_t n, const char *path, dsi_err *err) {
  /* cJSON skips NULs as whitespace: refuse them, then parse a private
   * NUL-terminated copy in which only padding may follow the object */
  const uint8_t *nul = memchr(buf + 8, 0, (size_t)n);
  if (nul) {
    dsi_errf(err, DSI_E_FORMAT, "%s: header is not valid JSON (NUL at byte %zu of the header)", path,
             (size_t)(nul - (buf + 8)));
    return NULL;
  }
  char *text = malloc((size_t)n + 1);
  if (!text) {
    dsi_errf(err, DSI_E_NOMEM, "%s: out of memory for a %llu-byte header", path, (unsigned long long)n);
    return NULL;
  }
  memcpy(text, buf + 8, (size_t)n);
  text[n] = 0;
  const char *end = NULL;
  dsi_json_oom_clear();
  cJSON *root = cJSON_ParseWithLengthOpts(text, (size_t)n + 1, &end, 1);
  if (!root && dsi_json_oom()) {
    dsi_errf(err, DSI_E_NOMEM, "%s: out of memory reading the header", path);
  } else if (!root) {
    size_t off = end && end >= text && end <= text + n ? (size_t)(end - text) : (size_t)n;
    dsi_errf(err, DSI_E_FORMAT, "%s: header is not valid JSON (at byte %zu of the header)", path, off);
  } else if (!cJSON_IsObject(root)) {
    dsi_errf(err, DSI_E_FORMAT, "%s: header is not a JSON object", path);
    cJSON_Delete(root);
    root = NULL;
  }
  free(text);
  return root;
}

int dsi_st_parse_header(dsi_st_set *set, const uint8_t *buf, size_t len, int file_idx,
                        const char *path, dsi_err *err) {
  if (len < 8)
    return dsi_errf(err, DSI_E_FORMAT, "%s: %zu bytes is too short for a safetensors file", path, len);
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) n = n << 8 | buf[i];
  if (n < 2 || n > ST_MAX_HEADER)
    return dsi_errf(err, DSI_E_FORMAT, "%s: header length %llu is not between 2 and %llu bytes", path,
                    (unsigned long long)n, (unsigned long long)ST_MAX_HEADER);
  if (n > len - 8)
    return dsi_errf(err, DSI_E_FORMAT, "%s: header length %llu runs past the end of the file (%zu bytes)",
                    path, (unsigned long long)n, len);
  cJSON *root = st_parse_json(buf, n, path, err);
  if (!root) return err ? err->status : DSI_E_FORMAT;

  int count = 0, st = DSI_OK;
  for (const cJSON *e = root->child; e; e = e->next) count++;
  if (count > INT_MAX - set->n_tensors) count = INT_MAX - set->n_tensors; /* unreachable under the header cap */
  dsi_st_tensor *grown = realloc(set->tensors, ((size_t)set->n_tensors + (size_t)count + 1) * sizeof *set->tensors);
  st_extent *ext = grown ? malloc(((size_t)count + 1) * sizeof *ext) : NULL;
  if (grown) set->tensors = grown;
  if (!ext) {
    cJSON_Delete(root);
    return dsi_errf(err, DSI_E_NOMEM, "%s: out of memory for a table of %d tensors", path, count);
  }
  dsi_st_tensor *ts = set->tensors + set->n_tensors;
  const uint8_t *data = buf + 8 + n;
  uint64_t data_size = len - 8 - n;
  int k = 0;
  for (const cJSON *e = root->child; e && st == DSI_OK; e = e->next) {
    if (!strcmp(e->string, "__metadata__")) {
      st = st_check_metadata(e, path, err);
      continue;
    }
    dsi_st_tensor *t = &ts[k];
    memset(t, 0, sizeof *t);
    st = st_parse_entry(t, &ext[k], e, data, data_size, path, err);
    if (st != DSI_OK) break;
    if (!(t->name = strdup(e->string))) {
      st = dsi_errf(err, DSI_E_NOMEM, "%s: out of memory", path);
      break;
    }
    t->file = file_idx;
    t->offset = (size_t)(8 + n + ext[k].begin);
    ext[k].tensor = k;
    k++;
  }
  if (st == DSI_OK) st = st_check_overlap(ts, ext, k, path, err);
  free(ext);
  cJSON_Delete(root);
  if (st != DSI_OK) { /* leave the set as it was */
    for (int i = 0; i < k; i++) free(ts[i].name);
    return st;
  }
  set->n_tensors += k;
  return DSI_OK;
}

/* ---- the tensor table ---- */

static int cmp_tensor(const void *a, const void *b) {
  const dsi_st_tensor *x = a, *y = b;
  int c = strcmp(x->name, y->name);
  if (c) return c;
  if (x->file != y->file) return x->file < y->file ? -1 : 1;
  return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static const char *st_file_name(const dsi_st_set *set, int file) {
  return file >= 0 && file < set->n_files && set->files[file].path ? set->files[file].path : "(unnamed file)";
}

int dsi_st_finish(dsi_st_set *set, dsi_err *err) {
  if (set->n_tensors > 1) qsort(set->tensors, (size_t)set->n_tensors, sizeof *set->tensors, cmp_tensor);
  for (int i = 1; i < set->n_tensors; i++) {
    const dsi_st_tensor *a = &set->tensors[i - 1], *b = &set->tensors[i];
    if (strcmp(a->name, b->name)) continue;
    if (a->file == b->file)
      return dsi_errf(err, DSI_E_FORMAT, "tensor \"%.200s\" appears twice in %s", a->name,
                      st_file_name(set, a->file));
    return dsi_errf(err, DSI_E_FORMAT, "tensor \"%.200s\" appears in both %s and %s", a->name,
                    st_file_name(set, a->file), st_file_name(set, b->file));
  }
  return DSI_OK;
}

const dsi_st_tensor *dsi_st_find(const dsi_st_set *set, const char *name) {
  int lo = 0, hi = set->n_tensors - 1;
  while (lo <= hi) {
    int mid = lo + (hi - lo) / 2, c = strcmp(set->tensors[mid].name, name);
    if (c == 0) return &set->tensors[mid];
    if (c < 0) lo = mid + 1; else hi = mid - 1;
  }
  return NULL;
}

/* ---- files of a directory ---- */

/* Map dir/name read-only and add its tensors to the set. */
static int st_open_file(dsi_st_set *set, const char *dir, const char *name, dsi_err *err) {
  char path[PATH_MAX];
  if (strlen(dir) + strlen(name) + 2 > sizeof path)
    return dsi_errf(err, DSI_E_INVAL, "%.200s/%.200s: path too long", dir, name);
  dsi_path_join(path, sizeof path, dir, name);
  size_t size;
  int fd = dsi_open_regular(path, &size, err);
  if (fd < 0) return fd;
  dsi_st_file *files = realloc(set->files, ((size_t)set->n_files + 1) * sizeof *set->files);
  char *copy = files ? strdup(path) : NULL;
  if (files) set->files = files;
  if (!copy) {
    close(fd);
    return dsi_errf(err, DSI_E_NOMEM, "%s: out of memory", path);
  }
  dsi_st_file *f = &set->files[set->n_files++];
  *f = (dsi_st_file){.path = copy, .fd = fd, .map = NULL, .size = 0};
  f->size = size;
  if (f->size > 0) {
    void *map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) return dsi_errf(err, DSI_E_IO, "%s: mmap: %s", path, strerror(errno));
    f->map = map;
    madvise(map, f->size, MADV_SEQUENTIAL);
  }
  return dsi_st_parse_header(set, f->map, f->size, set->n_files - 1, f->path, err);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* a shard named by the index must be a file in dir, not a path */
static int st_plain_name(const char *s) {
  return *s && !strchr(s, '/') && !strstr(s, "..") && strcmp(s, ".");
}

/* model.safetensors.index.json: open each distinct shard of weight_map,
 * then check that every tensor listed is in the shard named. */
static int st_open_index(dsi_st_set *set, const char *dir, const char *index_path, dsi_err *err) {
  char *text;
  size_t len;
  int st = dsi_read_file(index_path, &text, &len, err);
  if (st != DSI_OK) return st;
  const char *end = NULL;
  dsi_json_oom_clear();
  cJSON *root = cJSON_ParseWithLengthOpts(text, len + 1, &end, 1);
  const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
  char **shards = NULL;
  int n_shards = 0;
  if (!root && dsi_json_oom()) {
    st = dsi_errf(err, DSI_E_NOMEM, "%s: out of memory", index_path);
  } else if (!root) {
    st = dsi_errf(err, DSI_E_FORMAT, "%s: bad JSON at byte %zu", index_path,
                  end && end >= text && end <= text + len ? (size_t)(end - text) : len);
  } else if (!cJSON_IsObject(map)) {
    st = dsi_errf(err, DSI_E_FORMAT, "%s: \"weight_map\" is missing or not an object", index_path);
  } else {
    shards = malloc(((size_t)cJSON_GetArraySize(map) + 1) * sizeof *shards);
    if (!shards) st = dsi_errf(err, DSI_E_NOMEM, "%s: out of memory", index_path);
    for (const cJSON *e = map->child; shards && e && st == DSI_OK; e = e->next) {
      if (!cJSON_IsString(e) || !st_plain_name(e->valuestring))
        st = dsi_errf(err, DSI_E_FORMAT, "%s: tensor \"%.200s\": shard is not a plain file name", index_path,
                      e->string);
      else
        shards[n_shards++] = e->valuestring;
    }
    if (st == DSI_OK && n_shards == 0) st = dsi_errf(err, DSI_E_FORMAT, "%s: weight_map is empty", index_path);
  }
  if (st == DSI_OK) {
    if (n_shards > 1) qsort(shards, (size_t)n_shards, sizeof *shards, cmp_str);
    for (int i = 0; i < n_shards && st == DSI_OK; i++)
      if (i == 0 || strcmp(shards[i], shards[i - 1])) {
        st = st_open_file(set, dir, shards[i], err);
        if (st != DSI_OK) dsi_err_prefix(err, st, "shard \"%.200s\" named by %s", shards[i], index_path);
      }
  }
  if (st == DSI_OK) st = dsi_st_finish(set, err);
  for (const cJSON *e = st == DSI_OK ? map->child : NULL; e && st == DSI_OK; e = e->next) {
    const dsi_st_tensor *t = dsi_st_find(set, e->string);
    const char *where = t ? st_file_name(set, t->file) : NULL;
    const char *base = where ? strrchr(where, '/') : NULL;
    base = base ? base + 1 : where;
    if (!t)
      st = dsi_errf(err, DSI_E_FORMAT, "%s: tensor \"%.200s\" is not in shard %s", index_path, e->string,
                    e->valuestring);
    else if (strcmp(base, e->valuestring))
      st = dsi_errf(err, DSI_E_FORMAT, "%s: tensor \"%.200s\" is listed in shard %s but is in %s", index_path,
                    e->string, e->valuestring, where);
  }
  free(shards);
  cJSON_Delete(root);
  free(text);
  return st;
}

/* no index: model.safetensors, else every *.safetensors in dir, sorted */
static int st_open_files(dsi_st_set *set, const char *dir, dsi_err *err) {
  char path[PATH_MAX];
  struct stat sb;
  if (strlen(dir) + sizeof "/model.safetensors" > sizeof path)
    return dsi_errf(err, DSI_E_INVAL, "%.200s...: directory name too long", dir);
  if (stat(dsi_path_join(path, sizeof path, dir, "model.safetensors"), &sb) == 0) {
    int st = st_open_file(set, dir, "model.safetensors", err);
    return st == DSI_OK ? dsi_st_finish(set, err) : st;
  }
  DIR *d = opendir(dir);
  if (!d) return dsi_errf(err, DSI_E_IO, "%s: %s", dir, strerror(errno));
  char **names = NULL;
  int n = 0, st = DSI_OK;
  for (struct dirent *de; (de = readdir(d));) {
    size_t l = strlen(de->d_name), sl = strlen(".safetensors");
    if (l <= sl || strcmp(de->d_name + l - sl, ".safetensors")) continue;
    char **grown = realloc(names, ((size_t)n + 1) * sizeof *names);
    if (grown) names = grown;
    if (!grown || !(names[n] = strdup(de->d_name))) {
      st = dsi_errf(err, DSI_E_NOMEM, "%s: out of memory listing the folder", dir);
      break;
    }
    n++;
  }
  closedir(d);
  if (n == 0 && st == DSI_OK)
    st = dsi_errf(err, DSI_E_IO,
                  "%s: no safetensors weights (no model.safetensors.index.json, model.safetensors or *.safetensors)",
                  dir);
  if (n > 1) qsort(names, (size_t)n, sizeof *names, cmp_str);
  for (int i = 0; i < n && st == DSI_OK; i++) st = st_open_file(set, dir, names[i], err);
  for (int i = 0; i < n; i++) free(names[i]);
  free(names);
  if (st == DSI_OK) st = dsi_st_finish(set, err);
  return st;
}

int dsi_st_open(dsi_st_set *set, const char *dir, dsi_err *err) {
  memset(set, 0, sizeof *set);
  char index_path[PATH_MAX];
  struct stat sb;
  if (strlen(dir) + sizeof "/model.safetensors.index.json" > sizeof index_path)
    return dsi_errf(err, DSI_E_INVAL, "%.200s...: directory name too long", dir);
  dsi_path_join(index_path, sizeof index_path, dir, "model.safetensors.index.json");
  int st = stat(index_path, &sb) == 0 ? st_open_index(set, dir, index_path, err) : st_open_files(set, dir, err);
  if (st != DSI_OK) dsi_st_close(set);
  return st;
}

void dsi_st_close(dsi_st_set *set) {
  if (!set) return;
  for (int i = 0; i < set->n_files; i++) {
    dsi_st_file *f = &set->files[i];
    if (f->map) munmap(f->map, f->size);
    if (f->fd >= 0) close(f->fd);
    free(f->path);
  }
  for (int i = 0; i < set->n_tensors; i++) free(set->tensors[i].name);
  free(set->files);
  free(set->tensors);
  memset(set, 0, sizeof *set);
}
