/* model: safetensors files — one file or shards listed by
 * model.safetensors.index.json — opened read-only through mmap, every
 * header validated before any byte of data is trusted. */
#ifndef DSI_SAFETENSORS_H
#define DSI_SAFETENSORS_H

#include "base/base.h"
#include "tensor/dtype.h"

#define DSI_ST_MAX_DIMS 8

typedef struct dsi_st_tensor {
  char *name;
  dsi_dtype dtype;
  int ndim;
  int64_t shape[DSI_ST_MAX_DIMS];
  size_t nbytes;
  const void *data;   /* inside the file's mapping */
  int file;           /* index into dsi_st_set.files */
  size_t offset;      /* absolute offset of data in that file */
} dsi_st_tensor;

typedef struct dsi_st_file {
  char *path;
  int fd;
  void *map;
  size_t size;
} dsi_st_file;

typedef struct dsi_st_set {
  dsi_st_file *files;
  int n_files;
  dsi_st_tensor *tensors; /* sorted by name */
  int n_tensors;
} dsi_st_set;

/* Validate one safetensors header held in memory: buf is the whole file
 * (or at least its first len bytes, len = the file's real size). Appends
 * the tensors to *set with file index file_idx. Checks: the 8-byte length
 * fits the file, the header is JSON of the right shape, every dtype is
 * known, shapes are non-negative and their byte size matches
 * [begin,end), offsets lie inside the data section, tensors do not
 * overlap. Messages name the tensor and `path`. Used by dsi_st_open and
 * directly by the fuzz target. */
int dsi_st_parse_header(dsi_st_set *set, const uint8_t *buf, size_t len, int file_idx,
                        const char *path, dsi_err *err);

/* Open a checkpoint directory: model.safetensors.index.json if present
 * (every shard it names must exist and every tensor must be in the shard
 * the index says), else every *.safetensors in dir. Duplicate names across
 * files are an error. */
int dsi_st_open(dsi_st_set *set, const char *dir, dsi_err *err);
void dsi_st_close(dsi_st_set *set);

/* NULL if absent */
const dsi_st_tensor *dsi_st_find(const dsi_st_set *set, const char *name);

/* Sort tensors by name and reject duplicates (called by dsi_st_open; public
 * for the fuzz target and tests). */
int dsi_st_finish(dsi_st_set *set, dsi_err *err);

/* ---- writing (mkmodel) ---- */
typedef struct dsi_st_writer dsi_st_writer;
/* Tensors are declared first (name, dtype, shape), then their data is
 * written in the same order. */
dsi_st_writer *dsi_st_writer_new(void); /* NULL when out of memory */
void dsi_st_writer_add(dsi_st_writer *w, const char *name, dsi_dtype dt, int ndim, const int64_t *shape);
/* writes header; data then follows with dsi_st_writer_data in add order */
int dsi_st_writer_begin(dsi_st_writer *w, const char *path, dsi_err *err);
int dsi_st_writer_data(dsi_st_writer *w, const void *data, size_t n, dsi_err *err);
int dsi_st_writer_end(dsi_st_writer *w, dsi_err *err);
void dsi_st_writer_free(dsi_st_writer *w);

#endif
