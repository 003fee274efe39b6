/* dist: a world of one, or MPI_COMM_WORLD (see dist.h). */
#include "dist/dist.h"

#include <stdlib.h>
#include <string.h>

#ifdef DSINFER_MPI
#include <mpi.h>
#endif

int dsi_dist_has_mpi(void) {
#ifdef DSINFER_MPI
  return 1;
#else
  return 0;
#endif
}

int dsi_dist_init(int *argc, char ***argv, dsi_dist **out, dsi_err *err) {
  dsi_dist *d = calloc(1, sizeof *d);
  if (!d) return dsi_errf(err, DSI_E_NOMEM, "out of memory");
  d->size = 1;
#ifdef DSINFER_MPI
  /* only under a launcher: a plain run never touches MPI (no daemons, no
   * network probing) */
  if (getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK")) {
    /* the engine calls MPI from its loop thread and from whichever worker
     * runs a collective, one call at a time */
    int ok = 0, got = 0;
    MPI_Initialized(&ok);
    if (!ok && MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &got) != MPI_SUCCESS) {
      free(d);
      return dsi_errf(err, DSI_E_IO, "MPI_Init_thread failed");
    }
    if (!ok && got < MPI_THREAD_SERIALIZED) {
      MPI_Finalize();
      free(d);
      return dsi_errf(err, DSI_E_UNSUPPORTED, "this MPI does not allow calls from several threads (MPI_THREAD_SERIALIZED)");
    }
    d->mpi = !ok;
    /* errors come back as codes, so a rank can say what failed */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &d->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &d->size);
  }
#else
  (void)argc;
  (void)argv;
#endif
  *out = d;
  return DSI_OK;
}

int dsi_dist_rank(const dsi_dist *d) { return d ? d->rank : 0; }
int dsi_dist_size(const dsi_dist *d) { return d ? d->size : 1; }

void dsi_dist_free(dsi_dist *d) {
  if (!d) return;
#ifdef DSINFER_MPI
  if (d->mpi) MPI_Finalize();
#endif
  free(d);
}

#ifdef DSINFER_MPI
static int mpi_status(int rc, const char *what) {
  if (rc == MPI_SUCCESS) return DSI_OK;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  dsi_log(DSI_LOG_ERROR, "%s: %s", what, msg);
  return DSI_E_IO;
}

static void count(dsi_dist *d, int kind, double bytes) {
  d->calls[kind]++;
  d->bytes[kind] += bytes;
}

static double ring(const dsi_dist *d, double bytes) { return bytes * (d->size - 1) / d->size; }
#endif

int dsi_dist_bcast(dsi_dist *d, void *buf, size_t bytes, int root) {
  if (!d || d->size == 1 || !bytes) return DSI_OK;
#ifdef DSINFER_MPI
  /* in pieces an int counts */
  for (size_t off = 0; off < bytes; off += (size_t)1 << 30) {
    size_t n = DSI_MIN(bytes - off, (size_t)1 << 30);
    int rc = mpi_status(MPI_Bcast((uint8_t *)buf + off, (int)n, MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
    if (rc) return rc;
  }
  return DSI_OK;
#else
  (void)buf;
  (void)root;
  return DSI_E_UNSUPPORTED;
#endif
}

int dsi_dist_all_reduce_f32(dsi_dist *d, float *buf, size_t n) {
  if (!d || d->size == 1 || !n) return DSI_OK;
#ifdef DSINFER_MPI
  count(d, DSI_COLL_ALL_REDUCE, 2 * ring(d, 4.0 * n));
  for (size_t off = 0; off < n; off += (size_t)1 << 28) {
    size_t k = DSI_MIN(n - off, (size_t)1 << 28);
    int rc = mpi_status(MPI_Allreduce(MPI_IN_PLACE, buf + off, (int)k, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
                        "MPI_Allreduce");
    if (rc) return rc;
  }
  return DSI_OK;
#else
  (void)buf;
  return DSI_E_UNSUPPORTED;
#endif
}

const char *const dsi_coll_names[DSI_COLL_N] = {"all_reduce", "reduce_scatter", "all_gather", "all_to_all"};


int dsi_dist_reduce_scatter_f32(dsi_dist *d, const float *in, float *out, const int *counts) {
  if (!d || d->size == 1) {
    memmove(out, in, (size_t)counts[0] * sizeof(float));
    return DSI_OK;
  }
#ifdef DSINFER_MPI
  double n = 0;
  for (int r = 0; r < d->size; r++) n += counts[r];
  count(d, DSI_COLL_REDUCE_SCATTER, ring(d, 4 * n));
  return mpi_status(MPI_Reduce_scatter(in, out, counts, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), "MPI_Reduce_scatter");
#else
  return DSI_E_UNSUPPORTED;
#endif
}

int dsi_dist_all_gather_f32(dsi_dist *d, float *buf, const int *counts, const int *displs) {
  if (!d || d->size == 1) return DSI_OK;
#ifdef DSINFER_MPI
  double n = 0;
  for (int r = 0; r < d->size; r++) n += counts[r];
  count(d, DSI_COLL_ALL_GATHER, ring(d, 4 * n));
  return mpi_status(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts, displs, MPI_FLOAT, MPI_COMM_WORLD),
                    "MPI_Allgatherv");
#else
  (void)buf;
  (void)counts;
  (void)displs;
  return DSI_E_UNSUPPORTED;
#endif
}

int dsi_dist_all_to_all_int(dsi_dist *d, const int *send, int *recv) {
  if (!d || d->size == 1) {
    recv[0] = send[0];
    return DSI_OK;
  }
#ifdef DSINFER_MPI
  return mpi_status(MPI_Alltoall(send, 1, MPI_INT, recv, 1, MPI_INT, MPI_COMM_WORLD), "MPI_Alltoall");
#else
  return DSI_E_UNSUPPORTED;
#endif
}

int dsi_dist_all_to_all_v(dsi_dist *d, const void *send, const int *scounts, const int *sdispls, void *recv,
                          const int *rcounts, const int *rdispls) {
  if (!d || d->size == 1) {
    memmove(recv, send, (size_t)scounts[0]);
    return DSI_OK;
  }
#ifdef DSINFER_MPI
  double out = 0;
  for (int r = 0; r < d->size; r++) out += r == d->rank ? 0 : scounts[r];
  count(d, DSI_COLL_ALL_TO_ALL, out);
  return mpi_status(MPI_Alltoallv(send, scounts, sdispls, MPI_BYTE, recv, rcounts, rdispls, MPI_BYTE, MPI_COMM_WORLD),
                    "MPI_Alltoallv");
#else
  (void)sdispls;
  (void)rcounts;
  (void)rdispls;
  return DSI_E_UNSUPPORTED;
#endif
}

int dsi_dist_all_gather_int(dsi_dist *d, int v, int *out) {
  if (!d || d->size == 1) {
    out[0] = v;
    return DSI_OK;
  }
#ifdef DSINFER_MPI
  return mpi_status(MPI_Allgather(&v, 1, MPI_INT, out, 1, MPI_INT, MPI_COMM_WORLD), "MPI_Allgather");
#else
  return DSI_E_UNSUPPORTED;
#endif
}

void dsi_dist_abort(dsi_dist *d, int code) {
#ifdef DSINFER_MPI
  if (d && d->size > 1) MPI_Abort(MPI_COMM_WORLD, code);
#endif
  (void)d;
  exit(code);
}
