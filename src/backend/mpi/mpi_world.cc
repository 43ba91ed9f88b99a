#include "backend/mpi/mpi_world.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <new>
#include <string>

#include "backend/mpi/host_segment.h"
#include "backend/mpi/mpi_communicator.h"
#include "backend/shm/host_doorbell.h"
#include "common/crash_exit.h"
#include "common/reduce.h"

namespace mxplugin {
namespace {

// Note [Half reductions]: MPI has no float16/bfloat16, so these user ops
// widen to float, combine, and round once per element: common/reduce.h,
// which the shared-memory allreduce and the in-memory world use too.
template <DataType kType, ReduceOp kOp>
void HalfOp(void* in, void* inout, int* len, MPI_Datatype*) {
  ReduceTo(inout, in, inout, *len, kType, kOp);
}

// Set-up calls must succeed: a failure here would otherwise surface later as
// a wrong topology or a collective on an invalid handle.
void CheckSetup(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  std::string reason = MPI_Error_string(rc, text, &len) == MPI_SUCCESS ? std::string(text, len) : "unknown error";
  throw Error(Status::Internal(std::string(call) + " failed during MPI set-up: " + reason));
}

template <DataType kType>
void CreateOps(MPI_Op* ops) {
  // Index by ReduceOp value; Average is reduced as Sum.
  CheckSetup(MPI_Op_create(&HalfOp<kType, ReduceOp::kSum>, 1, &ops[0]), "MPI_Op_create");
  ops[1] = ops[0];
  CheckSetup(MPI_Op_create(&HalfOp<kType, ReduceOp::kMin>, 1, &ops[2]), "MPI_Op_create");
  CheckSetup(MPI_Op_create(&HalfOp<kType, ReduceOp::kMax>, 1, &ops[3]), "MPI_Op_create");
  CheckSetup(MPI_Op_create(&HalfOp<kType, ReduceOp::kProduct>, 1, &ops[4]), "MPI_Op_create");
}

void FreeOps(MPI_Op* ops) {
  for (int i : {0, 2, 3, 4}) {
    if (ops[i] != MPI_OP_NULL) MPI_Op_free(&ops[i]);
  }
}

// Note [MPI ends with the process]: MPI starts and ends once per process,
// and the process may hold other users of it (mpi4py beside mxplugin, as
// Sockeye's --horovod has) that go on calling MPI after this world is gone:
// every rank's core stops when any rank shuts down, a peer that finished
// first included, while this rank's program is still at work. So a world
// that initialised MPI does not finalise it as it ends: MPI_Finalize runs
// once, from a C exit handler, after the interpreter has finalised and
// every other user with it; unless a world of the process found MPI broken
// (a peer failed), where finalising could wait forever, or a world is still
// alive (exit() called under a running core, as MXNet's crash handler does),
// whose thread may be inside MPI.
enum class OwnedMpi { kNotOwned, kOwned, kBroken };
std::atomic<OwnedMpi> g_owned_mpi{OwnedMpi::kNotOwned};
std::atomic<int> g_worlds_alive{0};

void FinalizeOwnedMpiAtExit() {
  if (g_owned_mpi.load() != OwnedMpi::kOwned || g_worlds_alive.load() != 0) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace

MpiWorld::MpiWorld(bool thread_multiple, bool hierarchical, double peer_timeout_seconds, int world_crash_exit_code)
    : hierarchical_(hierarchical), peer_timeout_seconds_(peer_timeout_seconds) {
  int initialized = 0;
  CheckSetup(MPI_Initialized(&initialized), "MPI_Initialized");
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) {
    // Note [MPI thread level]: only this (the background) thread calls MPI,
    // so FUNNELED would do. But MPICH's MULTIPLE mode yields the CPU while it
    // waits, which FUNNELED does not: with more busy threads than cores (2
    // ranks, each with MXNet's and our thread, on 2 cores; or 3 ranks) the
    // FUNNELED busy-wait starved peers: test_ops at 3 ranks took 42 s against
    // 6 s, and a 102 MB allreduce flipped between 26 and 78 ms from run to
    // run (MULTIPLE: 40-45 ms, steady). MULTIPLE is therefore the default;
    // MXPLUGIN_MPI_THREADS=funneled selects FUNNELED for runs with a core to
    // spare per rank.
    const int wanted = thread_multiple ? MPI_THREAD_MULTIPLE : MPI_THREAD_FUNNELED;
    if (MPI_Init_thread(nullptr, nullptr, wanted, &provided) != MPI_SUCCESS) {
      throw Error(Status::Internal("MPI_Init_thread failed"));
    }
    g_owned_mpi.store(OwnedMpi::kOwned);
    std::atexit(FinalizeOwnedMpiAtExit);  // Note [MPI ends with the process]
  } else {
    CheckSetup(MPI_Query_thread(&provided), "MPI_Query_thread");
    if (provided < MPI_THREAD_MULTIPLE) {
      throw Error(Status::InvalidArgument(
          "MPI was initialised by the program with a thread level below MPI_THREAD_MULTIPLE; mxplugin calls "
          "MPI from its own thread, so initialise MPI with MPI_THREAD_MULTIPLE, or let mxplugin initialise it"));
    }
  }
  ++g_worlds_alive;
  CheckSetup(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  static const char kCrashLine[] =
      "mxplugin: elastic: MPI crashed under this rank's core thread (where its MPI calls run), most likely as a "
      "peer of its world ended (MPI is not fault tolerant): leaving; the thread's stack:\n";
  crash_exit_ = std::make_unique<ThreadCrashExit>(world_crash_exit_code, kCrashLine);

  auto ops = std::make_shared<MpiHalfOps>();
  CheckSetup(MPI_Type_contiguous(2, MPI_BYTE, &ops->half_type), "MPI_Type_contiguous");
  CheckSetup(MPI_Type_commit(&ops->half_type), "MPI_Type_commit");
  CreateOps<DataType::kFloat16>(ops->float16);
  CreateOps<DataType::kBFloat16>(ops->bfloat16);
  half_ops_ = ops;

  Topology& t = topology_;
  t.threads_multiple = provided >= MPI_THREAD_MULTIPLE;
  CheckSetup(MPI_Comm_rank(MPI_COMM_WORLD, &t.rank), "MPI_Comm_rank");
  CheckSetup(MPI_Comm_size(MPI_COMM_WORLD, &t.size), "MPI_Comm_size");
  MPI_Comm local;
  CheckSetup(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, t.rank, MPI_INFO_NULL, &local),
             "MPI_Comm_split_type");
  CheckSetup(MPI_Comm_rank(local, &t.local_rank), "MPI_Comm_rank");
  CheckSetup(MPI_Comm_size(local, &t.local_size), "MPI_Comm_size");
  MPI_Comm cross;
  CheckSetup(MPI_Comm_split(MPI_COMM_WORLD, t.local_rank, t.rank, &cross), "MPI_Comm_split");
  CheckSetup(MPI_Comm_rank(cross, &t.cross_rank), "MPI_Comm_rank");
  CheckSetup(MPI_Comm_size(cross, &t.cross_size), "MPI_Comm_size");
  MakeDoorbell(local);
  CheckSetup(MPI_Comm_free(&local), "MPI_Comm_free");
  CheckSetup(MPI_Comm_free(&cross), "MPI_Comm_free");
  probe_ = std::make_shared<PeerProbe>();
  probe_->Exchange(MPI_COMM_WORLD, t.rank);
  control_ = std::make_unique<MpiControlPlane>(std::make_shared<MpiComm>(MPI_COMM_WORLD), probe_, leaving_);
}

// Note [Doorbell]: every rank has one or none does (a rank without one would
// never ring, and its host's peers would notice its work only when polling).
void MpiWorld::MakeDoorbell(MPI_Comm local) {
  static int worlds_made = 0;  // a process may build several worlds (elastic resets)
  const std::string name = "/mxplugin.bell." + std::to_string(topology_.rank) + "." + std::to_string(getpid()) +
                           "." + std::to_string(worlds_made++);
  Status failure;
  const int local_size = topology_.local_size;
  auto segment = ShareHostSegment(local, name, shm::HostDoorbell::SegmentBytes(local_size),
                                  [local_size](char* data) {
                                    for (int r = 0; r < local_size; ++r) new (data + r * sizeof(shm::DoorbellSlot))
                                        shm::DoorbellSlot{};
                                  },
                                  &failure);
  int ok = segment ? 1 : 0;
  CheckSetup(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD), "MPI_Allreduce");
  if (ok) doorbell_ = std::make_shared<shm::HostDoorbell>(std::move(segment), topology_.local_rank, local_size);
}

ReachabilityProbe MpiWorld::reachability() const {
  std::shared_ptr<const PeerProbe> probe = probe_;
  // Both probes within `seconds` (Note [A verdict within the timeout] in
  // core/transfer_watchdog.cc): a rank that ended refuses at once.
  return [probe](const std::vector<int>& ranks, double seconds) {
    const auto start = std::chrono::steady_clock::now();
    PeerVerdict verdict;
    verdict.unreachable = probe->Unreachable(ranks, seconds);
    const double spent = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    verdict.ended = probe->Ended(ranks, std::max(seconds - spent, 0.05));
    return verdict;
  };
}

MpiWorld::~MpiWorld() {
  control_.reset();
  if (!broken_ && half_ops_) {
    FreeOps(half_ops_->float16);
    FreeOps(half_ops_->bfloat16);
    MPI_Type_free(&half_ops_->half_type);
  }
  --g_worlds_alive;
}

void MpiWorld::MarkBroken() {
  broken_ = true;
  OwnedMpi owned = OwnedMpi::kOwned;
  g_owned_mpi.compare_exchange_strong(owned, OwnedMpi::kBroken);
}

Status MpiWorld::CreateGroup(const std::vector<int>& members, Group* out) {
  const int me = topology_.rank;
  int color = MPI_UNDEFINED;
  int key = 0;
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i] == me) {
      color = 1;
      key = static_cast<int>(i);
    }
  }
  MPI_Comm sub = MPI_COMM_NULL;
  Status st = MpiStatus(MPI_Comm_split(MPI_COMM_WORLD, color, key, &sub), "MPI_Comm_split");
  if (!st.ok()) return st;
  *out = Group();
  if (sub == MPI_COMM_NULL) return Status::Ok();
  auto comm = std::make_shared<const MpiComm>(sub);
  std::string why_not;
  out->data = MakeHierarchical(comm, &why_not);
  if (out->data) {
    out->how = "hierarchical allreduce (shared memory within hosts)";
  } else {
    out->data = std::make_unique<MpiCommunicator>(comm, half_ops_, probe_, leaving_);
    out->how = "flat MPI allreduce (" + why_not + ")";
  }
  out->control = std::make_unique<MpiControlPlane>(comm, probe_, leaving_);
  return Status::Ok();
}

std::unique_ptr<World> MakeMpiWorld(const Config& config) {
  return std::make_unique<MpiWorld>(config.mpi_thread_multiple, config.hierarchical_allreduce,
                                    config.peer_timeout_seconds, config.world_crash_exit_code);
}

}  // namespace mxplugin
