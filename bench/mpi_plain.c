/* The standalone reference of the allreduce benchmarks: a plain,
 * single-threaded MPI program (MPI_Init, no mxplugin, no MXNet, no Python)
 * timing in-place MPI_Allreduce (float32 sum) of one buffer per size.
 *
 *   mpiexec -n 2 mpi_plain ITERS WARMUP BYTES [BYTES ...]
 *
 *   mpiexec -n 2 mpi_plain --pass ITERS WARMUP BYTES [BYTES ...]
 *
 * For each size, every measured call starts after a barrier and is timed
 * around the MPI call alone; a call's time is the slowest rank's. Rank 0
 * prints one line per size: "bytes <n> reps <r> seconds <t1> <t2> ...",
 * each t the mean of r back-to-back calls (r > 1 only for small messages,
 * to rise above the timer's resolution).
 *
 *   mpiexec -n 2 mpi_plain --op bcast|allgather|alltoall|reducescatter ITERS WARMUP BYTES [BYTES ...]
 *
 * --op times MPI_Bcast from rank 0 (in place), MPI_Allgather (BYTES from
 * every rank), MPI_Alltoall (BYTES from every rank, an equal block to each)
 * or MPI_Reduce_scatter_block (a float32 sum of BYTES, an equal block left
 * on each rank) instead, the references of bench/latency.py.
 *
 * With --pass, each size also gets a line "pass <n> seconds <t1> ...": every
 * rank at once making one pass over its own buffer (read and write, in
 * place), timed the same way: the least memory traffic of any in-place
 * allreduce, which on one host bounds it from below when memory bandwidth is
 * the limit. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum op { ALLREDUCE, BCAST, ALLGATHER, ALLTOALL, REDUCESCATTER };

/* `gathered`: room for every rank's `count` values (ALLGATHER), or for
 * `count` values (ALLTOALL, REDUCESCATTER). */
static double time_calls(enum op op, float* buf, float* gathered, int count, int reps) {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Barrier(MPI_COMM_WORLD);
  double start = MPI_Wtime();
  for (int r = 0; r < reps; ++r) {
    if (op == ALLREDUCE) MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    if (op == BCAST) MPI_Bcast(buf, count, MPI_FLOAT, 0, MPI_COMM_WORLD);
    if (op == ALLGATHER) MPI_Allgather(buf, count, MPI_FLOAT, gathered, count, MPI_FLOAT, MPI_COMM_WORLD);
    if (op == ALLTOALL) MPI_Alltoall(buf, count / size, MPI_FLOAT, gathered, count / size, MPI_FLOAT, MPI_COMM_WORLD);
    if (op == REDUCESCATTER) MPI_Reduce_scatter_block(buf, gathered, count / size, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  }
  double mine = (MPI_Wtime() - start) / reps, slowest = 0.0;
  MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

/* One read-and-write pass over buf on every rank at once; the slowest rank's
 * time. `factor` is 1 at run time but unknown to the compiler, so the pass
 * is not optimised away. */
static double time_pass(float* buf, int count, float factor) {
  MPI_Barrier(MPI_COMM_WORLD);
  double start = MPI_Wtime();
  for (int i = 0; i < count; ++i) buf[i] *= factor;
  double mine = MPI_Wtime() - start, slowest = 0.0;
  MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  enum op op = ALLREDUCE;
  if (argc > 2 && strcmp(argv[1], "--op") == 0) {
    op = strcmp(argv[2], "bcast") == 0           ? BCAST
         : strcmp(argv[2], "allgather") == 0     ? ALLGATHER
         : strcmp(argv[2], "alltoall") == 0      ? ALLTOALL
         : strcmp(argv[2], "reducescatter") == 0 ? REDUCESCATTER
                                                 : ALLREDUCE;
    argc -= 2;
    argv += 2;
  }
  int with_pass = argc > 1 && strcmp(argv[1], "--pass") == 0;
  if (with_pass) {
    --argc;
    ++argv;
  }
  if (argc < 4) {
    if (rank == 0) fprintf(stderr, "usage: mpi_plain [--op allreduce|bcast|allgather|alltoall|reducescatter] [--pass] ITERS WARMUP BYTES ...\n");
    MPI_Finalize();
    return 2;
  }
  const float factor = argc > 1000000 ? 2.0f : 1.0f;
  int iters = atoi(argv[1]), warmup = atoi(argv[2]);
  for (int a = 3; a < argc; ++a) {
    long long bytes = atoll(argv[a]);
    int count = (int)(bytes / 4);
    /* Enough calls per sample to time small messages (8 MB a sample, at most 50). */
    long long per = (8LL << 20) / (bytes > 0 ? bytes : 1);
    int reps = per < 1 ? 1 : (per > 50 ? 50 : (int)per);
    float* buf = malloc((size_t)count * sizeof(float));
    const int two_buffers = op == ALLGATHER || op == ALLTOALL || op == REDUCESCATTER;
    float* gathered = two_buffers ? malloc((size_t)count * sizeof(float) * (size_t)(op == ALLGATHER ? size : 1)) : NULL;
    if (buf == NULL || (two_buffers && gathered == NULL)) MPI_Abort(MPI_COMM_WORLD, 3);
    for (int i = 0; i < count; ++i) buf[i] = 1.0f;
    if (rank == 0) printf("bytes %lld reps %d seconds", bytes, reps);
    for (int it = 0; it < warmup + iters; ++it) {
      double t = time_calls(op, buf, gathered, count, reps);
      /* Ones summed again and again grow; keep them small and finite. */
      for (int i = 0; i < count; ++i) buf[i] = 1.0f;
      if (rank == 0 && it >= warmup) printf(" %.9f", t);
    }
    if (rank == 0) printf("\n");
    if (with_pass) {
      if (rank == 0) printf("pass %lld seconds", bytes);
      for (int it = 0; it < warmup + iters; ++it) {
        double t = time_pass(buf, count, factor);
        if (rank == 0 && it >= warmup) printf(" %.9f", t);
      }
      if (rank == 0) printf("\n");
    }
    fflush(stdout);
    free(buf);
    free(gathered);
  }
  MPI_Finalize();
  return 0;
}
