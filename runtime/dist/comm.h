// The processes of a data-parallel job (docs/distributed.md): how this process was launched
// (mpirun, or alone), and the MPI communicator the gradient reduction and the trainer's
// reductions run on. MPI is optional (PEJIT_MPI): without it a process launched as one of
// several is an error naming the cause, never N independent runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace pejit::runtime::dist {

/// What the environment says about this process: a rank of a job of `size` processes
/// started by `launcher` ("mpirun" for Open MPI, "pmi" for MPICH/Slurm), or alone (size 1).
struct Launch {
  int rank = 0, size = 1;
  std::string launcher;
};
Launch detect_launch();

/// True when this build has MPI (PEJIT_MPI).
bool built_with_mpi();

/// Process-wide MPI state, initialized on first use (MPI_Init_thread, SERIALIZED: one thread at a
/// time calls MPI: the one stepping a session, or the thread a deep input's step runs on while
/// it waits) and finalized at exit unless the embedder initialized MPI itself. Every collective
/// is issued in the same order on every rank; the operations on `Stream`s are independent of
/// those on the world.
class Comm {
public:
  /// The job's communicator. Throws pejit::Error when this build has no MPI.
  static Comm& world();
  /// The job's communicator if a session has started it, else null.
  static Comm* started();
  int rank() const { return rank_; }
  int size() const { return size_; }

  /// Every rank's `mine` (any length), in rank order. Blocking.
  std::vector<std::string> allgather(const std::string& mine);
  /// Ends the whole job now (MPI_Abort): every rank exits with `code`.
  [[noreturn]] void abort(int code);

  /// A sequence of non-blocking collectives on a communicator of its own, so that what is
  /// issued on it need only be ordered against its own operations.
  class Stream {
  public:
    ~Stream();
    /// Starts the sum over ranks of each rank's `send` (n floats, n a multiple of size()),
    /// block r of which (n / size() floats) ends in `recv` on rank r. Returns a handle.
    int reduce_scatter(const float* send, float* recv, int64_t n);
    /// Starts the gathering of every rank's `send` (n floats) into `recv` (n * size()).
    int allgather(const float* send, float* recv, int64_t n);
    /// Whether operation `h` is done (progresses every operation in flight).
    bool test(int h);
    void wait(int h);
    /// Forgets the finished handles (all must be done).
    void reset();

  private:
    friend class Comm;
    struct Impl;
    std::unique_ptr<Impl> impl_;
  };
  /// A new stream (MPI_Comm_dup of the world: collective, call it on every rank together).
  std::unique_ptr<Stream> stream();

private:
  Comm();
  int rank_ = 0, size_ = 1;
};

} // namespace pejit::runtime::dist
