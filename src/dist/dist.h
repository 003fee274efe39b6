/* dist: the processes of one run — a world of one, or the ranks mpirun
 * started (MPI_COMM_WORLD) — and the collectives the engine uses between
 * them. Without MPI in the build (DSINFER_MPI off) every world is one
 * process and the collectives are no-ops. */
#ifndef DSI_DIST_H
#define DSI_DIST_H

#include "base/base.h"
#include "dsinfer.h"

struct dsi_dist {
  int rank, size;
  int mpi; /* 1: MPI_Init ran here (MPI_Finalize at free) */
};

/* root's bytes to every rank */
int dsi_dist_bcast(dsi_dist *d, void *buf, size_t bytes, int root);
/* buf[0..n) summed over the ranks, in place, on every rank */
int dsi_dist_all_reduce_f32(dsi_dist *d, float *buf, size_t n);
/* every rank's int, gathered on every rank into out[size] */
int dsi_dist_all_gather_int(dsi_dist *d, int v, int *out);
/* end every rank now (after an error one rank cannot recover from) */
void dsi_dist_abort(dsi_dist *d, int code);

#endif
