/* dist: a world of one, or MPI_COMM_WORLD (see dist.h). */
#include "dist/dist.h"
#include "base/pool.h"

#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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
    MPI_Comm local;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local) == MPI_SUCCESS) {
      MPI_Comm_size(local, &d->local_size);
      MPI_Comm_free(&local);
    }
  }
#else
  (void)argc;
  (void)argv;
#endif
  *out = d;
  return DSI_OK;
}

void dsi_dist_set_threads(dsi_dist *d, int threads) {
  if (d) d->crowded = d->size > 1 && (long)DSI_MAX(d->local_size, 1) * threads > dsi_ncpu();
}

int dsi_dist_rank(const dsi_dist *d) { return d ? d->rank : 0; }
int dsi_dist_size(const dsi_dist *d) { return d ? d->size : 1; }

#ifdef DSINFER_MPI
static void drain_notes(dsi_dist *d);
#endif

void dsi_dist_free(dsi_dist *d) {
  if (!d) return;
#ifdef DSINFER_MPI
  if (d->reqs)
    for (int r = 0; r < d->size; r++) {
      MPI_Request *q = (MPI_Request *)d->reqs + r;
      if (*q != MPI_REQUEST_NULL) MPI_Wait(q, MPI_STATUS_IGNORE);
    }
  if (d->mpi && d->seen && d->size > 1) {
    /* the others' last arrival notes: received before finalizing (MPICH
     * warns of messages left unmatched), once every rank is here; a rank
     * that never comes is not waited for past a few seconds */
    MPI_Request all;
    if (MPI_Ibarrier(MPI_COMM_WORLD, &all) == MPI_SUCCESS) {
      double t0 = dsi_now();
      for (int done = 0; !done && dsi_now() - t0 < 5;) {
        drain_notes(d);
        if (MPI_Test(&all, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) break;
        if (!done) {
          struct timespec nap = {0, 100000};
          nanosleep(&nap, NULL);
        }
      }
      drain_notes(d);
    }
  }
  if (d->mpi) MPI_Finalize();
#endif
  free(d->seen);
  free(d->note);
  free(d->reqs);
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

/* ---- the watch ----
 * Entering a forward's collective, a rank tells every other rank the
 * collective's number (a small message beside it), and waits for the
 * collective by polling. Past the timeout it knows which ranks have not
 * said they reached it: they are hung or dead. It names them and ends
 * every rank (MPI_Abort) instead of waiting forever. */
enum { TAG_NOTE = 7301 };

/* the notes that arrived: what each rank last entered */
static void drain_notes(dsi_dist *d) {
  for (;;) {
    int flag = 0;
    MPI_Status st;
    if (MPI_Iprobe(MPI_ANY_SOURCE, TAG_NOTE, MPI_COMM_WORLD, &flag, &st) != MPI_SUCCESS || !flag) return;
    unsigned long v = 0;
    MPI_Recv(&v, 1, MPI_UNSIGNED_LONG, st.MPI_SOURCE, TAG_NOTE, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (v > d->seen[st.MPI_SOURCE]) d->seen[st.MPI_SOURCE] = v;
  }
}

static void enter(dsi_dist *d, const char *what) {
  d->entered++;
  if (d->fault_kind && d->rank == d->fault_rank && d->entered == d->fault_call) {
    dsi_log(DSI_LOG_WARN, "rank %d: %s at %s (collective %lu), as DSINFER_FAULT asked", d->rank,
            d->fault_kind == DSI_FAULT_DIE ? "dying" : "hanging", what, d->entered);
    if (d->fault_kind == DSI_FAULT_DIE) raise(SIGKILL);
    for (;;) pause();
  }
  if (d->timeout_s <= 0 || !d->seen) return;
  drain_notes(d);
  MPI_Request *reqs = d->reqs;
  for (int r = 0; r < d->size; r++) {
    if (r == d->rank) continue;
    if (reqs[r] != MPI_REQUEST_NULL) MPI_Wait(&reqs[r], MPI_STATUS_IGNORE); /* the last note went long ago */
    d->note[r] = d->entered;
    MPI_Isend(&d->note[r], 1, MPI_UNSIGNED_LONG, r, TAG_NOTE, MPI_COMM_WORLD, &reqs[r]);
  }
}

/* Wait for req, polling (MPI progresses inside MPI_Test): spinning at
 * first, then yielding the core between polls (another rank or a thread
 * on it may be the one we wait for), and past 10 ms napping, so a long
 * wait (a follower waiting for rank 0's next step) costs no CPU. watch:
 * bounded by the timeout (a forward's collective), else forever. */
static int finish(dsi_dist *d, MPI_Request *req, const char *what, int watch) {
  double t0 = 0, t = 0;
  for (long i = 0;; i++) {
    int done = 0, rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return mpi_status(rc, what);
    if (done) return DSI_OK;
    if (i < 64) continue;
    if (i == 64) t0 = dsi_now();
    if ((i & 15) == 0 || d->crowded) t = dsi_now() - t0;
    if (d->crowded && t < 0.01) { /* the cores are the others': short naps */
      struct timespec nap = {0, 20000};
      nanosleep(&nap, NULL);
      continue;
    }
    if (t < 0.01) {
      sched_yield();
      continue;
    }
    struct timespec nap = {0, 200000};
    nanosleep(&nap, NULL);
    if (!watch || d->timeout_s <= 0 || t < d->timeout_s) continue;
    drain_notes(d);
    char who[256] = "";
    size_t at = 0;
    for (int r = 0; r < d->size && at < sizeof who - 16; r++)
      if (r != d->rank && d->seen && d->seen[r] < d->entered)
        at += (size_t)snprintf(who + at, sizeof who - at, "%s%d", at ? ", " : "", r);
    dsi_log(DSI_LOG_ERROR, "rank %d: %s (collective %lu) has waited %.0f s: rank%s %s did not reach it (hung or dead); "
            "ending every rank", d->rank, what, d->entered, t, strchr(who, ',') ? "s" : "",
            at ? who : "(unknown)");
    MPI_Abort(MPI_COMM_WORLD, 3);
    return DSI_E_IO;
  }
}
#endif

int dsi_dist_watch(dsi_dist *d, double timeout_s) {
  if (!d || d->size == 1) return DSI_OK;
  d->timeout_s = timeout_s;
#ifdef DSINFER_MPI
  if (timeout_s > 0 && !d->seen) {
    d->seen = calloc(d->size, sizeof *d->seen);
    d->note = calloc(d->size, sizeof *d->note);
    MPI_Request *reqs = malloc((size_t)d->size * sizeof *reqs);
    d->reqs = reqs;
    if (!d->seen || !d->note || !reqs) return DSI_E_NOMEM;
    for (int r = 0; r < d->size; r++) reqs[r] = MPI_REQUEST_NULL;
  }
#endif
  return DSI_OK;
}

int dsi_dist_bcast(dsi_dist *d, void *buf, size_t bytes, int root) {
  if (!d || d->size == 1 || !bytes) return DSI_OK;
#ifdef DSINFER_MPI
  /* in pieces an int counts; unwatched: a follower waits as long as rank 0 has no work */
  for (size_t off = 0; off < bytes; off += (size_t)1 << 30) {
    size_t n = DSI_MIN(bytes - off, (size_t)1 << 30);
    MPI_Request req;
    int rc = mpi_status(MPI_Ibcast((uint8_t *)buf + off, (int)n, MPI_BYTE, root, MPI_COMM_WORLD, &req), "MPI_Ibcast");
    if (rc || (rc = finish(d, &req, "the step's broadcast", 0))) return rc;
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
  enter(d, "all_reduce");
  for (size_t off = 0; off < n; off += (size_t)1 << 28) {
    size_t k = DSI_MIN(n - off, (size_t)1 << 28);
    MPI_Request req;
    int rc = mpi_status(MPI_Iallreduce(MPI_IN_PLACE, buf + off, (int)k, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req),
                        "MPI_Iallreduce");
    if (rc || (rc = finish(d, &req, "all_reduce", 1))) return rc;
  }
  return DSI_OK;
#else
  (void)buf;
  return DSI_E_UNSUPPORTED;
#endif
}

const char *const dsi_coll_names[DSI_COLL_N] = {"all_reduce", "reduce_scatter", "all_gather", "all_to_all", "gather"};

int dsi_dist_reduce_scatter_f32(dsi_dist *d, const float *in, float *out, const int *counts) {
  if (!d || d->size == 1) {
    memmove(out, in, (size_t)counts[0] * sizeof(float));
    return DSI_OK;
  }
#ifdef DSINFER_MPI
  double n = 0;
  for (int r = 0; r < d->size; r++) n += counts[r];
  count(d, DSI_COLL_REDUCE_SCATTER, ring(d, 4 * n));
  enter(d, "reduce_scatter");
  MPI_Request req;
  int rc = mpi_status(MPI_Ireduce_scatter(in, out, counts, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req),
                      "MPI_Ireduce_scatter");
  return rc ? rc : finish(d, &req, "reduce_scatter", 1);
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
  enter(d, "all_gather");
  MPI_Request req;
  int rc = mpi_status(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts, displs, MPI_FLOAT,
                                      MPI_COMM_WORLD, &req), "MPI_Iallgatherv");
  return rc ? rc : finish(d, &req, "all_gather", 1);
#else
  (void)buf;
  (void)counts;
  (void)displs;
  return DSI_E_UNSUPPORTED;
#endif
}

int dsi_dist_gather_f32(dsi_dist *d, const float *send, int n, float *recv, const int *counts, const int *displs, int root) {
  if (!d || d->size == 1) {
    memmove(recv, send, (size_t)n * sizeof(float));
    return DSI_OK;
  }
#ifdef DSINFER_MPI
  if (d->rank != root) count(d, DSI_COLL_GATHER, 4.0 * n);
  enter(d, "gather");
  MPI_Request req;
  int rc = mpi_status(MPI_Igatherv(send, n, MPI_FLOAT, recv, counts, displs, MPI_FLOAT, root, MPI_COMM_WORLD, &req),
                      "MPI_Igatherv");
  return rc ? rc : finish(d, &req, "gather", 1);
#else
  (void)counts;
  (void)displs;
  (void)root;
  return DSI_E_UNSUPPORTED;
#endif
}

int dsi_dist_all_to_all_int(dsi_dist *d, const int *send, int *recv) {
  if (!d || d->size == 1) {
    recv[0] = send[0];
    return DSI_OK;
  }
#ifdef DSINFER_MPI
  enter(d, "all_to_all (counts)");
  MPI_Request req;
  int rc = mpi_status(MPI_Ialltoall(send, 1, MPI_INT, recv, 1, MPI_INT, MPI_COMM_WORLD, &req), "MPI_Ialltoall");
  return rc ? rc : finish(d, &req, "all_to_all (counts)", 1);
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
  enter(d, "all_to_all_v");
  MPI_Request req;
  int rc = mpi_status(MPI_Ialltoallv(send, scounts, sdispls, MPI_BYTE, recv, rcounts, rdispls, MPI_BYTE,
                                     MPI_COMM_WORLD, &req), "MPI_Ialltoallv");
  return rc ? rc : finish(d, &req, "all_to_all_v", 1);
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
