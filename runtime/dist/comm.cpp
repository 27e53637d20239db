// MPI behind runtime/dist/comm.h. Built with MPI (PEJIT_MPI) it wraps MPI_COMM_WORLD and
// duplicates of it; without, Comm::world() is an error that names the missing build option.
#include "runtime/dist/comm.h"

#include "pejit/error.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <string>

#if PEJIT_MPI
#include <mpi.h>
#endif

namespace pejit::runtime::dist {

namespace {
int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0')
    return -1;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  return (*end == '\0' && x >= 0 && x <= INT_MAX) ? static_cast<int>(x) : -1;
}
} // namespace

Launch detect_launch() {
  Launch l;
  // Open MPI's mpirun, then the PMI of MPICH's hydra and of Slurm's srun.
  if (int n = env_int("OMPI_COMM_WORLD_SIZE"); n > 0) {
    l.size = n;
    l.rank = std::max(0, env_int("OMPI_COMM_WORLD_RANK"));
    l.launcher = "mpirun";
  } else if (int m = env_int("PMI_SIZE"); m > 0) {
    l.size = m;
    l.rank = std::max(0, env_int("PMI_RANK"));
    l.launcher = "pmi";
  }
  return l;
}

#if PEJIT_MPI

bool built_with_mpi() {
  return true;
}

namespace {
void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS)
    return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw Error(std::string("MPI: ") + what + " failed: " + std::string(msg, static_cast<size_t>(len)));
}

void finalize_at_exit() {
  int done = 0;
  MPI_Finalized(&done);
  if (!done)
    MPI_Finalize();
}

int count_of(int64_t n) {
  if (n < 0 || n > INT_MAX)
    throw Error("MPI: a message of " + std::to_string(n) + " elements (at most " +
                std::to_string(INT_MAX) + " per operation)");
  return static_cast<int>(n);
}
} // namespace

struct Comm::Stream::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  std::vector<MPI_Request> reqs;
  std::vector<bool> done;
};

Comm::Comm() {
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) {
    int provided = 0;
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
    std::atexit(finalize_at_exit);
    if (provided < MPI_THREAD_SERIALIZED)
      throw Error("MPI: this MPI library provides thread level " + std::to_string(provided) +
                  ", pejit needs MPI_THREAD_SERIALIZED");
  }
  // Errors come back as codes (thrown as pejit::Error), not as MPI's own abort.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
}

namespace {
Comm* g_world = nullptr;
}

Comm& Comm::world() {
  static Comm* w = g_world = new Comm(); // never destroyed: MPI_Finalize runs at exit
  return *w;
}

Comm* Comm::started() {
  return g_world;
}

std::vector<std::string> Comm::allgather(const std::string& mine) {
  int len = count_of(static_cast<int64_t>(mine.size()));
  std::vector<int> lens(static_cast<size_t>(size_));
  check(MPI_Allgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, MPI_COMM_WORLD), "MPI_Allgather");
  std::vector<int> offs(static_cast<size_t>(size_));
  int64_t total = 0;
  for (int r = 0; r < size_; ++r) {
    offs[static_cast<size_t>(r)] = count_of(total);
    total += lens[static_cast<size_t>(r)];
  }
  std::string all(static_cast<size_t>(count_of(total)), '\0');
  check(MPI_Allgatherv(mine.data(), len, MPI_BYTE, all.data(), lens.data(), offs.data(), MPI_BYTE,
                       MPI_COMM_WORLD),
        "MPI_Allgatherv");
  std::vector<std::string> out;
  for (int r = 0; r < size_; ++r)
    out.push_back(all.substr(static_cast<size_t>(offs[static_cast<size_t>(r)]),
                             static_cast<size_t>(lens[static_cast<size_t>(r)])));
  return out;
}

void Comm::abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code); // MPI_Abort does not return; should it, the process still ends
}

std::unique_ptr<Comm::Stream> Comm::stream() {
  std::unique_ptr<Stream> s(new Stream());
  s->impl_ = std::make_unique<Stream::Impl>();
  check(MPI_Comm_dup(MPI_COMM_WORLD, &s->impl_->comm), "MPI_Comm_dup");
  MPI_Comm_set_errhandler(s->impl_->comm, MPI_ERRORS_RETURN);
  return s;
}

Comm::Stream::~Stream() {
  if (!impl_)
    return;
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin && impl_->comm != MPI_COMM_NULL)
    MPI_Comm_free(&impl_->comm);
}

int Comm::Stream::reduce_scatter(const float* send, float* recv, int64_t n) {
  int size = 0;
  MPI_Comm_size(impl_->comm, &size);
  if (n % size != 0)
    throw Error("MPI: reduce_scatter of " + std::to_string(n) + " floats over " +
                std::to_string(size) + " ranks");
  MPI_Request r;
  check(MPI_Ireduce_scatter_block(send, recv, count_of(n / size), MPI_FLOAT, MPI_SUM, impl_->comm,
                                  &r),
        "MPI_Ireduce_scatter_block");
  impl_->reqs.push_back(r);
  impl_->done.push_back(false);
  return static_cast<int>(impl_->reqs.size() - 1);
}

int Comm::Stream::allgather(const float* send, float* recv, int64_t n) {
  MPI_Request r;
  check(MPI_Iallgather(send, count_of(n), MPI_FLOAT, recv, count_of(n), MPI_FLOAT, impl_->comm, &r),
        "MPI_Iallgather");
  impl_->reqs.push_back(r);
  impl_->done.push_back(false);
  return static_cast<int>(impl_->reqs.size() - 1);
}

bool Comm::Stream::test(int h) {
  auto i = static_cast<size_t>(h);
  if (!impl_->done[i]) {
    int flag = 0;
    check(MPI_Test(&impl_->reqs[i], &flag, MPI_STATUS_IGNORE), "MPI_Test");
    impl_->done[i] = flag != 0;
  }
  return impl_->done[i];
}

void Comm::Stream::wait(int h) {
  auto i = static_cast<size_t>(h);
  if (!impl_->done[i]) {
    check(MPI_Wait(&impl_->reqs[i], MPI_STATUS_IGNORE), "MPI_Wait");
    impl_->done[i] = true;
  }
}

void Comm::Stream::reset() {
  for (size_t i = 0; i < impl_->reqs.size(); ++i)
    if (!impl_->done[i])
      throw Error("MPI: a stream was reset with an operation in flight");
  impl_->reqs.clear();
  impl_->done.clear();
}

#else // no MPI

bool built_with_mpi() {
  return false;
}

struct Comm::Stream::Impl {};

Comm::Comm() = default;
Comm::Stream::~Stream() = default;

namespace {
[[noreturn]] void no_mpi() {
  throw Error("data-parallel training needs MPI, and this pejit was built without it "
              "(configure with libopenmpi-dev installed, or -DPEJIT_MPI=ON)");
}
} // namespace

// No Comm exists without MPI (world() throws), so the members below are never reached.
Comm& Comm::world() {
  no_mpi();
}
Comm* Comm::started() {
  return nullptr;
}
std::vector<std::string> Comm::allgather(const std::string&) {
  no_mpi();
}
void Comm::abort(int code) {
  std::_Exit(code);
}
std::unique_ptr<Comm::Stream> Comm::stream() {
  no_mpi();
}
int Comm::Stream::reduce_scatter(const float*, float*, int64_t) {
  no_mpi();
}
int Comm::Stream::allgather(const float*, float*, int64_t) {
  no_mpi();
}
bool Comm::Stream::test(int) {
  no_mpi();
}
void Comm::Stream::wait(int) {
  no_mpi();
}
void Comm::Stream::reset() {}

#endif

} // namespace pejit::runtime::dist
