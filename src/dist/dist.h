/* dist: the processes of one run — a world of one, or the ranks mpirun
 * started (MPI_COMM_WORLD) — and the collectives the engine uses between
 * them. Without MPI in the build (DSINFER_MPI off) every world is one
 * process and the collectives are no-ops. */
#ifndef DSI_DIST_H
#define DSI_DIST_H

#include "base/base.h"
#include "dsinfer.h"

/* the collectives, for the counts below */
enum { DSI_COLL_ALL_REDUCE, DSI_COLL_REDUCE_SCATTER, DSI_COLL_ALL_GATHER, DSI_COLL_ALL_TO_ALL, DSI_COLL_GATHER, DSI_COLL_N };
extern const char *const dsi_coll_names[DSI_COLL_N];

struct dsi_dist {
  int rank, size;
  int mpi; /* 1: MPI_Init ran here (MPI_Finalize at free) */
  int local_size; /* ranks on this machine */
  int crowded;    /* they and their threads outnumber its cores: a waiting rank naps at once */
  /* per collective of the forward: calls, and the bytes this rank sent to
   * the others — counted from the buffers handed to MPI, under ring
   * algorithms for the reductions and gathers (all_reduce sends 2 (N-1)/N
   * of its buffer, reduce_scatter and all_gather (N-1)/N), exactly for the
   * all-to-all */
  unsigned long calls[DSI_COLL_N];
  double bytes[DSI_COLL_N];
  /* the watch (dsi_dist_watch): the forward's collectives entered so far,
   * the latest each rank said it entered, and the notes saying so */
  double timeout_s;
  unsigned long entered, *seen, *note;
  void *reqs;
  /* testing (DSINFER_FAULT): this rank dies or hangs at that collective */
  int fault_kind, fault_rank;
  unsigned long fault_call;
};

enum { DSI_FAULT_NONE, DSI_FAULT_DIE, DSI_FAULT_HANG };

/* Bound every forward collective's wait by timeout_s (<= 0: forever):
 * past it, the waiting rank names the ranks that did not reach the
 * collective and ends every rank. DSI_OK or DSI_E_NOMEM. */
int dsi_dist_watch(dsi_dist *d, double timeout_s);

/* This rank runs `threads` threads: when the ranks on this machine run more
 * threads than it has cores, a rank waiting in a collective sleeps between
 * polls instead of yielding (a yielding rank still takes turns on a core
 * that a rank with work needs). */
void dsi_dist_set_threads(dsi_dist *d, int threads);

/* root's bytes to every rank */
int dsi_dist_bcast(dsi_dist *d, void *buf, size_t bytes, int root);
/* buf[0..n) summed over the ranks, in place, on every rank */
int dsi_dist_all_reduce_f32(dsi_dist *d, float *buf, size_t n);
/* rank r gets counts[r] floats: its part of in (all parts in rank order)
 * summed over the ranks */
int dsi_dist_reduce_scatter_f32(dsi_dist *d, const float *in, float *out, const int *counts);
/* rank r's counts[r] floats at displs[r] of buf, to every rank, in place */
int dsi_dist_all_gather_f32(dsi_dist *d, float *buf, const int *counts, const int *displs);
/* rank r's counts[r] floats (send: n of them there) into recv + displs[r] on root */
int dsi_dist_gather_f32(dsi_dist *d, const float *send, int n, float *recv, const int *counts, const int *displs, int root);
/* send[r] to rank r, recv[r] from it */
int dsi_dist_all_to_all_int(dsi_dist *d, const int *send, int *recv);
/* bytes: send + sdispls[r] (scounts[r] bytes) to rank r; recv likewise */
int dsi_dist_all_to_all_v(dsi_dist *d, const void *send, const int *scounts, const int *sdispls, void *recv,
                          const int *rcounts, const int *rdispls);
/* every rank's int, gathered on every rank into out[size] */
int dsi_dist_all_gather_int(dsi_dist *d, int v, int *out);
/* end every rank now (after an error one rank cannot recover from) */
void dsi_dist_abort(dsi_dist *d, int code);

#endif
