/* tests: safetensors reading — headers built in memory (valid ones, every
 * truncation, every kind of lie a header can tell) and checkpoint folders
 * written to a temporary directory (single file, shards, index.json). */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "model/safetensors.h"

/* ---- building files ---- */

/* A safetensors file: 8-byte length, header, data_size bytes of a pattern. */
static uint8_t *st_build(const char *header, size_t data_size, size_t *len) {
  size_t n = strlen(header);
  *len = 8 + n + data_size;
  uint8_t *buf = malloc(*len);
  for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)n >> (8 * i));
  memcpy(buf + 8, header, n);
  for (size_t i = 0; i < data_size; i++) buf[8 + n + i] = (uint8_t)(i * 7 + 1);
  return buf;
}

static void put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* parse one in-memory file as "mem.safetensors" and finish the set */
static int parse_mem(dsi_st_set *set, const uint8_t *buf, size_t len, dsi_err *err) {
  memset(set, 0, sizeof *set);
  memset(err, 0, sizeof *err);
  int st = dsi_st_parse_header(set, buf, len, 0, "mem.safetensors", err);
  if (st == DSI_OK) st = dsi_st_finish(set, err);
  return st;
}

/* build a file from header + data_size, parse it, close; returns status */
static int parse_header_text(const char *header, size_t data_size, dsi_err *err) {
  size_t len;
  uint8_t *buf = st_build(header, data_size, &len);
  dsi_st_set set;
  int st = parse_mem(&set, buf, len, err);
  dsi_st_close(&set);
  free(buf);
  return st;
}

static char g_tmp[256];

static void make_tmp(void) {
  const char *t = getenv("TMPDIR");
  snprintf(g_tmp, sizeof g_tmp, "%s/dsi_st_XXXXXX", t && *t ? t : "/tmp");
  if (!mkdtemp(g_tmp)) {
    perror("mkdtemp");
    exit(1);
  }
}

/* a fresh, empty sub-folder of the temp dir */
static const char *folder(const char *name) {
  static char dir[512];
  snprintf(dir, sizeof dir, "%s/%s", g_tmp, name);
  mkdir(dir, 0700);
  return dir;
}

static void write_raw(const char *dir, const char *name, const void *data, size_t len) {
  char path[1024];
  dsi_err err;
  snprintf(path, sizeof path, "%s/%s", dir, name);
  if (dsi_write_file(path, data, len, &err) != DSI_OK) {
    fprintf(stderr, "%s\n", err.msg);
    exit(1);
  }
}

static void write_st(const char *dir, const char *name, const char *header, size_t data_size) {
  size_t len;
  uint8_t *buf = st_build(header, data_size, &len);
  write_raw(dir, name, buf, len);
  free(buf);
}

static void remove_tree(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  for (struct dirent *de; (de = readdir(d));) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    if (de->d_type == DT_DIR) remove_tree(path);
    else unlink(path);
  }
  closedir(d);
  rmdir(dir);
}

static int open_fds(void) {
  int n = 0;
  DIR *d = opendir("/proc/self/fd");
  if (!d) return -1;
  while (readdir(d)) n++;
  closedir(d);
  return n;
}

/* A valid file: tensors out of data order, a scalar, an empty tensor,
 * metadata and trailing padding spaces. Data: 24 + 8 + 4 + 8 = 44 bytes. */
static const char *k_valid =
  "{\"__metadata__\":{\"format\":\"pt\"},"
  "\"b.weight\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[24,32]},"
  "\"a.weight\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
  "\"c.scale\":{\"dtype\":\"F8_E4M3\",\"shape\":[2,2],\"data_offsets\":[32,36]},"
  "\"d.count\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[36,44]},"
  "\"e.empty\":{\"dtype\":\"F16\",\"shape\":[0,5],\"data_offsets\":[44,44]}}   ";
enum { K_VALID_DATA = 44 };

/* ---- headers in memory ---- */

static void test_valid(void) {
  size_t len;
  uint8_t *buf = st_build(k_valid, K_VALID_DATA, &len);
  dsi_st_set set;
  dsi_err err;
  CHECK(parse_mem(&set, buf, len, &err) == DSI_OK);
  CHECK(set.n_tensors == 5);
  for (int i = 1; i < set.n_tensors; i++) CHECK(strcmp(set.tensors[i - 1].name, set.tensors[i].name) < 0);
  size_t data0 = 8 + strlen(k_valid);
  const dsi_st_tensor *a = dsi_st_find(&set, "a.weight"), *b = dsi_st_find(&set, "b.weight");
  const dsi_st_tensor *c = dsi_st_find(&set, "c.scale"), *d = dsi_st_find(&set, "d.count");
  const dsi_st_tensor *e = dsi_st_find(&set, "e.empty");
  CHECK(a && b && c && d && e);
  if (a && b && c && d && e) {
    CHECK(a->dtype == DSI_DTYPE_F32 && a->ndim == 2 && a->shape[0] == 2 && a->shape[1] == 3 && a->nbytes == 24);
    CHECK(a->offset == data0 && a->data == buf + data0 && a->file == 0);
    CHECK(b->dtype == DSI_DTYPE_BF16 && b->ndim == 1 && b->shape[0] == 4 && b->nbytes == 8);
    CHECK(b->offset == data0 + 24 && b->data == buf + data0 + 24);
    CHECK(c->dtype == DSI_DTYPE_F8_E4M3 && c->nbytes == 4 && c->offset == data0 + 32);
    CHECK(d->dtype == DSI_DTYPE_I64 && d->ndim == 0 && d->nbytes == 8);
    CHECK(e->dtype == DSI_DTYPE_F16 && e->ndim == 2 && e->shape[0] == 0 && e->nbytes == 0);
  }
  CHECK(dsi_st_find(&set, "z") == NULL && dsi_st_find(&set, "") == NULL && dsi_st_find(&set, "a") == NULL);
  dsi_st_close(&set);
  CHECK(set.n_tensors == 0 && set.tensors == NULL);
  dsi_st_close(&set); /* twice is harmless */

  /* a second file appended to the same set */
  memset(&set, 0, sizeof set);
  CHECK(dsi_st_parse_header(&set, buf, len, 0, "one", &err) == DSI_OK);
  size_t len2;
  uint8_t *buf2 = st_build("{\"x\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, &len2);
  CHECK(dsi_st_parse_header(&set, buf2, len2, 1, "two", &err) == DSI_OK);
  CHECK(dsi_st_finish(&set, &err) == DSI_OK && set.n_tensors == 6);
  const dsi_st_tensor *x = dsi_st_find(&set, "x");
  CHECK(x && x->file == 1 && x->data == buf2 + len2 - 4);
  /* a failed header leaves the set as it was */
  CHECK(dsi_st_parse_header(&set, buf2, len2 - 1, 2, "three", &err) == DSI_E_FORMAT && set.n_tensors == 6);
  dsi_st_close(&set);
  free(buf2);

  /* an empty header (only "{}") holds no tensors */
  CHECK(parse_header_text("{}", 0, &err) == DSI_OK);
  CHECK(parse_header_text("{\"__metadata__\":{}}", 0, &err) == DSI_OK);
  free(buf);
}

/* Every truncation of a valid file fails cleanly: the prefix is copied to a
 * buffer of exactly its length so that a sanitizer sees any read past it. */
static void test_truncated(void) {
  size_t len;
  uint8_t *buf = st_build(k_valid, K_VALID_DATA, &len);
  int all_fail = 1, all_named = 1;
  for (size_t n = 0; n < len; n++) {
    uint8_t *cut = malloc(n ? n : 1);
    memcpy(cut, buf, n);
    dsi_st_set set;
    dsi_err err;
    int st = parse_mem(&set, cut, n, &err);
    all_fail &= st == DSI_E_FORMAT && set.n_tensors == 0;
    all_named &= strstr(err.msg, "mem.safetensors") != NULL;
    dsi_st_close(&set);
    free(cut);
  }
  CHECK(all_fail);
  CHECK(all_named);
  free(buf);
}

static void test_bad_length(void) {
  size_t len;
  uint8_t *buf = st_build(k_valid, K_VALID_DATA, &len);
  dsi_st_set set;
  dsi_err err;
  uint64_t lens[] = {0, 1, len - 8 + 1, len, (uint64_t)1 << 40, UINT64_MAX, (uint64_t)200 << 20};
  const char *needle[] = {"header length 0", "header length 1", "runs past the end", "runs past the end",
                          "header length 1099511627776", "header length 18446744073709551615",
                          "header length 209715200"};
  for (size_t i = 0; i < DSI_ARRAY_LEN(lens); i++) {
    put_u64(buf, lens[i]);
    CHECK_ERR(parse_mem(&set, buf, len, &err), DSI_E_FORMAT, err, needle[i]);
    dsi_st_close(&set);
  }
  /* a shorter length cuts the JSON */
  put_u64(buf, strlen(k_valid) - 10);
  CHECK_ERR(parse_mem(&set, buf, len, &err), DSI_E_FORMAT, err, "mem.safetensors: header is not valid JSON");
  dsi_st_close(&set);
  free(buf);
}

/* one tensor entry `entry` (JSON) named "t" over data_size bytes of data */
static int parse_entry(const char *entry, size_t data_size, dsi_err *err) {
  char header[1024];
  snprintf(header, sizeof header, "{\"t\":%s}", entry);
  return parse_header_text(header, data_size, err);
}

static void test_bad_entries(void) {
  dsi_err err;
  struct { const char *entry; size_t data; const char *needle; } cases[] = {
    /* offsets */
    {"{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}", 12, "run past the data section (12 bytes)"},
    {"{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[100,116]}", 16, "run past the data section"},
    {"{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[17,17]}", 16, "run past the data section"},
    {"{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}", 16, "end before begin"},
    {"{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0]}", 16, "data_offsets is not a list of two"},
    {"{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16,32]}", 32, "data_offsets is not a list of two"},
    {"{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[-16,0]}", 16, "data_offsets is not a list of two"},
    {"{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16.5]}", 17, "data_offsets is not a list of two"},
    {"{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,\"16\"]}", 16, "data_offsets is not a list of two"},
    {"{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":\"0-16\"}", 16, "data_offsets is not a list of two"},
    {"{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,1e300]}", 16, "data_offsets is not a list of two"},
    /* size vs shape */
    {"{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,12]}", 16, "12 bytes in data_offsets but dtype F32"},
    {"{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,16]}", 16, "need 12"},
    {"{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,0]}", 16, "need 4"},
    /* shapes */
    {"{\"dtype\":\"F32\",\"shape\":[-4],\"data_offsets\":[0,16]}", 16, "shape[0] is not a non-negative integer"},
    {"{\"dtype\":\"F32\",\"shape\":[2,1.5],\"data_offsets\":[0,12]}", 16, "shape[1] is not a non-negative integer"},
    {"{\"dtype\":\"F32\",\"shape\":[\"4\"],\"data_offsets\":[0,16]}", 16, "shape[0] is not"},
    {"{\"dtype\":\"F32\",\"shape\":[null],\"data_offsets\":[0,16]}", 16, "shape[0] is not"},
    {"{\"dtype\":\"F32\",\"shape\":4,\"data_offsets\":[0,16]}", 16, "shape is not a list"},
    {"{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,4],\"data_offsets\":[0,16]}", 16, "9 dimensions (at most 8)"},
    {"{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,16]}", 16, "overflows"},
    {"{\"dtype\":\"I64\",\"shape\":[9007199254740992,2048],\"data_offsets\":[0,16]}", 16, "overflows"},
    {"{\"dtype\":\"F32\",\"shape\":[18446744073709551616],\"data_offsets\":[0,16]}", 16, "shape[0] is not"},
    {"{\"dtype\":\"F32\",\"shape\":[1e400],\"data_offsets\":[0,16]}", 16, "shape[0] is not"},
    /* dtype and fields */
    {"{\"dtype\":\"F4\",\"shape\":[4],\"data_offsets\":[0,16]}", 16, "unknown dtype \"F4\""},
    {"{\"dtype\":\"bf16\",\"shape\":[4],\"data_offsets\":[0,8]}", 16, "unknown dtype \"bf16\""},
    {"{\"dtype\":7,\"shape\":[4],\"data_offsets\":[0,16]}", 16, "dtype is not a string"},
    {"{\"shape\":[4],\"data_offsets\":[0,16]}", 16, "missing field \"dtype\""},
    {"{\"dtype\":\"F32\",\"data_offsets\":[0,16]}", 16, "missing field \"shape\""},
    {"{\"dtype\":\"F32\",\"shape\":[4]}", 16, "missing field \"data_offsets\""},
    {"{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16],\"extra\":1}", 16, "unexpected field \"extra\""},
    {"{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}", 16, "field \"dtype\" appears twice"},
    {"[\"F32\",[4],[0,16]]", 16, "expected an object"},
    {"null", 16, "expected an object"},
  };
  for (size_t i = 0; i < DSI_ARRAY_LEN(cases); i++) {
    if (!CHECK_ERR(parse_entry(cases[i].entry, cases[i].data, &err), DSI_E_FORMAT, err, cases[i].needle))
      fprintf(stderr, "    entry %s\n", cases[i].entry);
    CHECK(strstr(err.msg, "mem.safetensors: tensor \"t\""));
  }
  /* an empty tensor is 0 bytes however large its other dims */
  CHECK(parse_entry("{\"dtype\":\"I64\",\"shape\":[9007199254740992,9007199254740992,0],\"data_offsets\":[4,4]}",
                    16, &err) == DSI_OK);
  /* the unknown-dtype message names the tensor, the dtype and the file */
  CHECK_ERR(parse_header_text("{\"model.norm.weight\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]}}", 16,
                              &err),
            DSI_E_FORMAT, err, "mem.safetensors: tensor \"model.norm.weight\": unknown dtype \"F64\"");
}

static void test_bad_headers(void) {
  dsi_err err;
  CHECK_ERR(parse_header_text("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                              "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}",
                              20, &err),
            DSI_E_FORMAT, err, "tensor \"b\" [12, 20) overlaps tensor \"a\" [0, 16)");
  CHECK(strstr(err.msg, "mem.safetensors"));
  CHECK_ERR(parse_header_text("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                              "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}",
                              16, &err),
            DSI_E_FORMAT, err, "overlaps");
  /* contained in another, later in JSON order */
  CHECK_ERR(parse_header_text("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
                              "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}",
                              16, &err),
            DSI_E_FORMAT, err, "overlaps");
  /* an empty tensor inside another occupies nothing; adjacent tensors touch */
  CHECK(parse_header_text("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                          "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,8]},"
                          "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[16,20]}}",
                          20, &err) == DSI_OK);
  /* duplicate names in one file: cJSON keeps both */
  CHECK_ERR(parse_header_text("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                              "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                              8, &err),
            DSI_E_FORMAT, err, "tensor \"w\" appears twice in");
  /* JSON that is not a header */
  CHECK_ERR(parse_header_text("{\"a\":{\"dtype\":\"F32\",", 16, &err), DSI_E_FORMAT, err,
            "mem.safetensors: header is not valid JSON");
  CHECK_ERR(parse_header_text("[1,2,3]", 0, &err), DSI_E_FORMAT, err, "mem.safetensors: header is not a JSON object");
  CHECK_ERR(parse_header_text("\"{}\"", 0, &err), DSI_E_FORMAT, err, "not a JSON object");
  CHECK_ERR(parse_header_text("{} {}", 0, &err), DSI_E_FORMAT, err, "not valid JSON");
  CHECK_ERR(parse_header_text("{\"__metadata__\":[]}", 0, &err), DSI_E_FORMAT, err, "__metadata__ is not an object");
  CHECK_ERR(parse_header_text("{\"__metadata__\":{\"n\":1}}", 0, &err), DSI_E_FORMAT, err,
            "__metadata__ \"n\" is not a string");
  /* a NUL inside the header */
  size_t len;
  uint8_t *buf = st_build("{}  ", 0, &len);
  buf[10] = 0;
  dsi_st_set set;
  CHECK_ERR(parse_mem(&set, buf, len, &err), DSI_E_FORMAT, err, "not valid JSON (NUL at byte 2");
  dsi_st_close(&set);
  free(buf);
}

/* ---- checkpoint folders ---- */

static const char *k_shard1 =
  "{\"model.embed_tokens.weight\":{\"dtype\":\"BF16\",\"shape\":[8,4],\"data_offsets\":[0,64]},"
  "\"model.layers.0.input_layernorm.weight\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[64,80]}}";
static const char *k_shard2 =
  "{\"model.norm.weight\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
  "\"lm_head.weight\":{\"dtype\":\"BF16\",\"shape\":[8,4],\"data_offsets\":[16,80]}}";
static const char *k_index =
  "{\"metadata\":{\"total_size\":160},\"weight_map\":{"
  "\"lm_head.weight\":\"model-00002-of-00002.safetensors\","
  "\"model.embed_tokens.weight\":\"model-00001-of-00002.safetensors\","
  "\"model.layers.0.input_layernorm.weight\":\"model-00001-of-00002.safetensors\","
  "\"model.norm.weight\":\"model-00002-of-00002.safetensors\"}}";

static void write_index(const char *dir, const char *text) {
  write_raw(dir, "model.safetensors.index.json", text, strlen(text));
}

/* the tensor's bytes, read back through the file at its absolute offset */
static int data_matches_file(const dsi_st_set *set, const dsi_st_tensor *t) {
  uint8_t tmp[256];
  if (t->nbytes > sizeof tmp) return 0;
  int fd = open(set->files[t->file].path, O_RDONLY);
  ssize_t r = pread(fd, tmp, t->nbytes, (off_t)t->offset);
  close(fd);
  return r == (ssize_t)t->nbytes && !memcmp(tmp, t->data, t->nbytes);
}

static void test_open_dirs(void) {
  dsi_st_set set;
  dsi_err err = {0};
  int fds = open_fds();

  /* one model.safetensors (and a stray other file that is then ignored) */
  const char *dir = folder("single");
  write_st(dir, "model.safetensors", k_valid, K_VALID_DATA);
  write_st(dir, "other.safetensors", k_valid, K_VALID_DATA);
  CHECK(dsi_st_open(&set, dir, &err) == DSI_OK);
  CHECK(set.n_files == 1 && set.n_tensors == 5 && strstr(set.files[0].path, "single/model.safetensors"));
  for (int i = 1; i < set.n_tensors; i++) CHECK(strcmp(set.tensors[i - 1].name, set.tensors[i].name) < 0);
  for (int i = 0; i < set.n_tensors; i++) CHECK(dsi_st_find(&set, set.tensors[i].name) == &set.tensors[i]);
  const dsi_st_tensor *t = dsi_st_find(&set, "b.weight");
  CHECK(t && t->nbytes == 8 && data_matches_file(&set, t));
  dsi_st_close(&set);

  /* shards without an index: every *.safetensors, sorted */
  dir = folder("shards");
  write_st(dir, "model-00002-of-00002.safetensors", k_shard2, 80);
  write_st(dir, "model-00001-of-00002.safetensors", k_shard1, 80);
  write_raw(dir, "notes.txt", "hello", 5);
  CHECK(dsi_st_open(&set, dir, &err) == DSI_OK);
  CHECK(set.n_files == 2 && set.n_tensors == 4);
  CHECK(set.n_files == 2 && strstr(set.files[0].path, "00001") && strstr(set.files[1].path, "00002"));
  t = dsi_st_find(&set, "lm_head.weight");
  CHECK(t && t->file == 1 && t->shape[0] == 8 && data_matches_file(&set, t));
  t = dsi_st_find(&set, "model.layers.0.input_layernorm.weight");
  CHECK(t && t->file == 0 && data_matches_file(&set, t));
  dsi_st_close(&set);

  /* the same folder with an index */
  write_index(dir, k_index);
  CHECK(dsi_st_open(&set, dir, &err) == DSI_OK);
  CHECK(set.n_files == 2 && set.n_tensors == 4 && dsi_st_find(&set, "model.norm.weight"));
  dsi_st_close(&set);

  /* a tensor in two shards */
  dir = folder("dup");
  write_st(dir, "a.safetensors", k_shard1, 80);
  write_st(dir, "b.safetensors",
           "{\"model.embed_tokens.weight\":{\"dtype\":\"BF16\",\"shape\":[8,4],\"data_offsets\":[0,64]}}", 64);
  CHECK_ERR(dsi_st_open(&set, dir, &err), DSI_E_FORMAT, err, "tensor \"model.embed_tokens.weight\" appears in both");
  CHECK(strstr(err.msg, "dup/a.safetensors") && strstr(err.msg, "dup/b.safetensors"));
  CHECK(set.n_files == 0 && set.n_tensors == 0 && set.files == NULL);
  dsi_st_close(&set); /* a caller may close after a failure too */

  /* index problems */
  dir = folder("index");
  write_st(dir, "model-00001-of-00002.safetensors", k_shard1, 80);
  write_index(dir, k_index);
  CHECK_ERR(dsi_st_open(&set, dir, &err), DSI_E_IO, err, "model-00002-of-00002.safetensors");
  CHECK(strstr(err.msg, "shard"));
  write_st(dir, "model-00002-of-00002.safetensors", k_shard2, 80);
  write_index(dir, "{\"weight_map\":{\"model.norm.weight\":\"model-00001-of-00002.safetensors\","
                   "\"lm_head.weight\":\"model-00002-of-00002.safetensors\"}}");
  CHECK_ERR(dsi_st_open(&set, dir, &err), DSI_E_FORMAT, err,
            "tensor \"model.norm.weight\" is listed in shard model-00001-of-00002.safetensors but is in");
  write_index(dir, "{\"weight_map\":{\"model.missing.weight\":\"model-00001-of-00002.safetensors\"}}");
  CHECK_ERR(dsi_st_open(&set, dir, &err), DSI_E_FORMAT, err,
            "tensor \"model.missing.weight\" is not in shard model-00001-of-00002.safetensors");
  const char *bad_names[] = {"../model-00001-of-00002.safetensors", "sub/x.safetensors", "", "..", "."};
  for (size_t i = 0; i < DSI_ARRAY_LEN(bad_names); i++) {
    char text[256];
    snprintf(text, sizeof text, "{\"weight_map\":{\"w\":\"%s\"}}", bad_names[i]);
    write_index(dir, text);
    CHECK_ERR(dsi_st_open(&set, dir, &err), DSI_E_FORMAT, err, "tensor \"w\": shard is not a plain file name");
  }
  write_index(dir, "{\"weight_map\":{\"w\":7}}");
  CHECK_ERR(dsi_st_open(&set, dir, &err), DSI_E_FORMAT, err, "tensor \"w\": shard is not a plain file name");
  write_index(dir, "{\"weight_map\": [");
  CHECK_ERR(dsi_st_open(&set, dir, &err), DSI_E_FORMAT, err, "model.safetensors.index.json: bad JSON");
  write_index(dir, "{\"metadata\": {}}");
  CHECK_ERR(dsi_st_open(&set, dir, &err), DSI_E_FORMAT, err, "\"weight_map\" is missing");
  write_index(dir, "{\"weight_map\": {}}");
  CHECK_ERR(dsi_st_open(&set, dir, &err), DSI_E_FORMAT, err, "weight_map is empty");
  /* a bad shard header names the shard */
  write_st(dir, "model-00002-of-00002.safetensors",
           "{\"lm_head.weight\":{\"dtype\":\"Q4\",\"shape\":[8,4],\"data_offsets\":[0,64]}}", 64);
  write_index(dir, k_index);
  CHECK_ERR(dsi_st_open(&set, dir, &err), DSI_E_FORMAT, err,
            "model-00002-of-00002.safetensors: tensor \"lm_head.weight\": unknown dtype \"Q4\"");

  /* no weights at all, no folder, a folder as a shard */
  CHECK_ERR(dsi_st_open(&set, folder("empty"), &err), DSI_E_IO, err, "no safetensors weights");
  CHECK_ERR(dsi_st_open(&set, "/nonexistent/dsinfer/model", &err), DSI_E_IO, err, "/nonexistent/dsinfer/model");
  dir = folder("dirshard");
  char sub[600];
  snprintf(sub, sizeof sub, "%s/model.safetensors", dir);
  mkdir(sub, 0700);
  CHECK_ERR(dsi_st_open(&set, dir, &err), DSI_E_IO, err, "not a regular file");

  /* an empty file and a file of a few bytes */
  dir = folder("tiny");
  write_raw(dir, "model.safetensors", "", 0);
  CHECK_ERR(dsi_st_open(&set, dir, &err), DSI_E_FORMAT, err, "0 bytes is too short");
  CHECK(open_fds() == fds); /* every failure closed what it opened */
}

/* a checkpoint cut at every length: never a crash, always an error */
static void test_truncated_files(void) {
  size_t len;
  uint8_t *buf = st_build(k_valid, K_VALID_DATA, &len);
  const char *dir = folder("cut");
  int all_fail = 1;
  for (size_t n = 0; n < len; n++) {
    write_raw(dir, "model.safetensors", buf, n);
    dsi_st_set set;
    dsi_err err = {0};
    all_fail &= dsi_st_open(&set, dir, &err) == DSI_E_FORMAT && strstr(err.msg, "cut/model.safetensors") != NULL;
    dsi_st_close(&set);
  }
  CHECK(all_fail);
  write_raw(dir, "model.safetensors", buf, len);
  dsi_st_set set;
  dsi_err err;
  CHECK(dsi_st_open(&set, dir, &err) == DSI_OK && set.n_tensors == 5);
  dsi_st_close(&set);
  free(buf);
}

/* The golden checkpoints, when present (tests/golden, or the shared folder
 * the project grew up beside): every tensor of a real file, its dtypes and
 * DeepSeek-V3's names. Skipped when neither is there. */
static void test_golden(void) {
  const char *roots[] = {"golden", "../../shared/golden"};
  const char *cases[] = {"tiny-f32", "tiny-bf16", "tiny-fp8", "tiny-noqlora-bf16", "tiny-yarn-bf16"};
  const char *root = NULL;
  struct stat sb;
  for (size_t i = 0; i < DSI_ARRAY_LEN(roots) && !root; i++) {
    char p[256];
    snprintf(p, sizeof p, "%s/tiny-fp8/model/model.safetensors", roots[i]);
    if (stat(p, &sb) == 0) root = roots[i];
  }
  if (!root) {
    printf("golden checkpoints not found: skipped\n");
    return;
  }
  for (size_t i = 0; i < DSI_ARRAY_LEN(cases); i++) {
    char dir[256];
    snprintf(dir, sizeof dir, "%s/%s/model", root, cases[i]);
    dsi_st_set set;
    dsi_err err = {0};
    if (!CHECK(dsi_st_open(&set, dir, &err) == DSI_OK)) {
      fprintf(stderr, "    %s\n", err.msg);
      continue;
    }
    const dsi_st_tensor *emb = dsi_st_find(&set, "model.embed_tokens.weight");
    CHECK(emb && emb->ndim == 2 && emb->shape[1] == (strstr(cases[i], "noqlora") ? 96 : 128));
    CHECK(dsi_st_find(&set, "lm_head.weight") && dsi_st_find(&set, "model.norm.weight"));
    CHECK(dsi_st_find(&set, "model.layers.1.mlp.gate.e_score_correction_bias"));
    const dsi_st_tensor *q = dsi_st_find(&set, "model.layers.0.self_attn.q_a_proj.weight");
    const dsi_st_tensor *s = dsi_st_find(&set, "model.layers.0.self_attn.q_a_proj.weight_scale_inv");
    if (!strcmp(cases[i], "tiny-fp8")) {
      CHECK(q && q->dtype == DSI_DTYPE_F8_E4M3 && q->shape[0] == 96 && q->shape[1] == 128);
      CHECK(s && s->dtype == DSI_DTYPE_F32 && s->shape[0] == 1 && s->shape[1] == 1);
    } else if (!strcmp(cases[i], "tiny-noqlora-bf16")) {
      CHECK(!q && dsi_st_find(&set, "model.layers.0.self_attn.q_proj.weight"));
    } else {
      CHECK(q && !s && q->dtype == (strcmp(cases[i], "tiny-f32") ? DSI_DTYPE_BF16 : DSI_DTYPE_F32));
    }
    size_t total = 0;
    for (int k = 0; k < set.n_tensors; k++) total += set.tensors[k].nbytes;
    CHECK(set.n_files == 1 && total <= set.files[0].size);
    dsi_st_close(&set);
  }
}

int main(void) {
  make_tmp();
  test_valid();
  test_truncated();
  test_bad_length();
  test_bad_entries();
  test_bad_headers();
  test_open_dirs();
  test_truncated_files();
  test_golden();
  remove_tree(g_tmp);
  return check_done();
}
