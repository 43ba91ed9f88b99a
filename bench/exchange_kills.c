/* One rank of bench/exchange_kills.py: every rank exchanges blocks with
 * every other, call after call, by one of two patterns, and the last rank
 * SIGKILLs itself before call KILL_AT. A supervisor process (the parent)
 * prints how its rank ended, "END exit N" or "END signal N", and exits with
 * a plain code (Hydra tears a job down when a rank ends by a signal).
 *
 * Usage: exchange_kills alltoallv|pairwise ELEMENTS KILL_AT */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int supervise(void) {
  const pid_t pid = fork();
  if (pid == 0) return 0;
  signal(SIGUSR1, SIG_IGN);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) printf("END signal %d\n", WTERMSIG(status));
  else printf("END exit %d\n", WEXITSTATUS(status));
  fflush(stdout);
  _exit(WIFSIGNALED(status) ? 100 : WEXITSTATUS(status));
}

int main(int argc, char** argv) {
  if (argc != 4) return 2;
  supervise();
  int provided = 0, rank = 0, size = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  const int pairwise = strcmp(argv[1], "pairwise") == 0;
  const int per = atoi(argv[2]) / size, kill_at = atoi(argv[3]);
  float* send = calloc((size_t)per * size, sizeof(float));
  float* recv = calloc((size_t)per * size, sizeof(float));
  int* counts = malloc(size * sizeof(int));
  int* displs = malloc(size * sizeof(int));
  for (int k = 0; k < size; ++k) {
    counts[k] = per;
    displs[k] = k * per;
  }
  for (int call = 0;; ++call) {
    if (rank == size - 1 && call == kill_at) kill(getpid(), SIGKILL);
    int rc = MPI_SUCCESS;
    if (pairwise) {
      for (int s = 1; s < size && rc == MPI_SUCCESS; ++s) {
        const int to = (rank + s) % size, from = (rank - s + size) % size;
        rc = MPI_Sendrecv(send + to * per, per, MPI_FLOAT, to, 1, recv + from * per, per, MPI_FLOAT, from, 1,
                          MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      }
    } else {
      rc = MPI_Alltoallv(send, counts, displs, MPI_FLOAT, recv, counts, displs, MPI_FLOAT, MPI_COMM_WORLD);
    }
    if (rc != MPI_SUCCESS) _exit(3);
  }
}
