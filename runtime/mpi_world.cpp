// MpiWorld: the MPI transport under the ring collectives; see mpi_world.h.
#include "runtime/mpi_world.h"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "runtime/ring_comm.h"

namespace sharc::rt {
namespace detail {

namespace {

using Clock = std::chrono::steady_clock;

// MPI tags: a data message is tagged with its destination's local index; an
// abort message with kAbortTag (MPI guarantees tags up to at least 32767).
constexpr int kAbortTag = 32767;

// What precedes every data message's bytes.
// `epoch` counts runs: processes are not synchronised between runs, so a
// fast device's next-run messages may arrive during this one.
struct Header {
  uint64_t group_key, seq, epoch;
  int32_t src_rank, dst_rank;
};

void check_mpi(int rc, const char* what) {
  if (rc != MPI_SUCCESS) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    throw std::runtime_error(std::string("MPI: ") + what + " failed: " + std::string(text, len));
  }
}

}  // namespace

struct MpiFabric {
  MPI_Comm comm = MPI_COMM_NULL;
  int local = 1, process = 0, processes = 1;
  double recv_timeout_s = 60;
  std::atomic<bool> aborted{false};
  std::mutex mu;
  std::string abort_reason;  // under mu

  // When a wait that starts now gives up (recv_timeout_s; 0 waits forever),
  // and the timeout as messages print it.
  Clock::time_point deadline() const {
    const double s = recv_timeout_s > 0 ? recv_timeout_s : 1e9;
    return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  }
  std::string timeout_text() const {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", recv_timeout_s);
    return buf;
  }
  // Between polls of a wait: yields at first, then sleeps 20 us a turn.
  static void back_off(int& idle) {
    if (++idle > 64) std::this_thread::sleep_for(std::chrono::microseconds(20));
    else std::this_thread::yield();
  }

  void set_aborted(const std::string& why) {
    std::lock_guard<std::mutex> lk(mu);
    if (!aborted.load()) abort_reason = why;
    aborted.store(true);
  }
  std::string reason() {
    std::lock_guard<std::mutex> lk(mu);
    return abort_reason;
  }
  // Takes any abort message addressed to this process.
  void poll_abort() {
    int flag = 0;
    MPI_Message m;
    MPI_Status st;
    check_mpi(MPI_Improbe(MPI_ANY_SOURCE, kAbortTag, comm, &flag, &m, &st), "MPI_Improbe");
    if (!flag) return;
    int n = 0;
    MPI_Get_count(&st, MPI_CHAR, &n);
    std::string text(static_cast<size_t>(n), '\0');
    check_mpi(MPI_Mrecv(text.data(), n, MPI_CHAR, &m, MPI_STATUS_IGNORE), "MPI_Mrecv");
    set_aborted(text);
  }
  // Tells every other process that `why` happened here, without waiting:
  // a process that already finished its run may never receive it. The text
  // stays alive with the fabric, as a send in flight needs its buffer.
  void broadcast_abort(const std::string& why) {
    std::lock_guard<std::mutex> lk(mu);
    abort_texts.push_back(why);
    const std::string& text = abort_texts.back();
    for (int p = 0; p < processes; ++p) {
      if (p == process) continue;
      MPI_Request request;
      if (MPI_Isend(text.data(), static_cast<int>(text.size()), MPI_CHAR, p, kAbortTag, comm, &request) ==
          MPI_SUCCESS)
        MPI_Request_free(&request);
    }
  }
  std::deque<std::string> abort_texts;  // under mu
};

class MpiComm final : public RingComm {
 public:
  MpiComm(MpiFabric& fabric, int rank, int size) : RingComm(rank, size), fabric_(fabric) {}

  // Waits until every message this device posted has left (its buffer is
  // free), polling for aborts; throws on timeout.
  void finish_sends() {
    const Clock::time_point deadline = fabric_.deadline();
    while (!pending_.empty()) {
      reap();
      if (pending_.empty()) break;
      if (fabric_.aborted.load()) return;  // the run failed: the peer may never receive
      fabric_.poll_abort();
      if (Clock::now() > deadline)
        throw std::runtime_error("rank " + std::to_string(rank()) + ": a message to rank " +
                                 std::to_string(pending_.front().dst) + " was not taken within " + fabric_.timeout_text() +
                                 " s");
      std::this_thread::yield();
    }
  }
  // A new run: its messages are told from the last run's by the epoch.
  void next_epoch() {
    restart_sequences();
    ++epoch_;
  }
  // Messages of this run that arrived for this device and were never
  // received; forgets them (later runs' messages stay).
  size_t take_unclaimed() {
    size_t n = 0;
    for (auto it = unexpected_.begin(); it != unexpected_.end();)
      if (it->epoch == epoch_) {
        ++n;
        it = unexpected_.erase(it);
      } else {
        ++it;
      }
    return n;
  }

 protected:
  void post(int dst, Tag tag, Bytes&& block) override {
    Pending p;
    p.dst = dst;
    p.bytes.resize(sizeof(Header) + block.size());
    const Header h{tag.group_key, tag.seq, epoch_, rank(), dst};
    std::memcpy(p.bytes.data(), &h, sizeof h);
    if (!block.empty()) std::memcpy(p.bytes.data() + sizeof h, block.data(), block.size());
    pending_.push_back(std::move(p));
    Pending& q = pending_.back();
    check_mpi(MPI_Isend(q.bytes.data(), static_cast<int>(q.bytes.size()), MPI_BYTE, dst / fabric_.local,
                        dst % fabric_.local, fabric_.comm, &q.request),
              "MPI_Isend");
    reap();
  }

  Bytes receive(int src, Tag tag) override {
    for (auto it = unexpected_.begin(); it != unexpected_.end(); ++it)
      if (it->src == src && it->tag == tag && it->epoch == epoch_) {
        Bytes b = std::move(it->data);
        unexpected_.erase(it);
        return b;
      }
    const Clock::time_point deadline = fabric_.deadline();
    const int my_tag = rank() % fabric_.local;
    for (int idle = 0;;) {
      int flag = 0;
      MPI_Message m;
      MPI_Status st;
      check_mpi(MPI_Improbe(MPI_ANY_SOURCE, my_tag, fabric_.comm, &flag, &m, &st), "MPI_Improbe");
      if (flag) {
        idle = 0;
        int n = 0;
        MPI_Get_count(&st, MPI_BYTE, &n);
        Bytes msg(static_cast<size_t>(n));
        check_mpi(MPI_Mrecv(msg.data(), n, MPI_BYTE, &m, MPI_STATUS_IGNORE), "MPI_Mrecv");
        Header h;
        std::memcpy(&h, msg.data(), sizeof h);
        Bytes data(msg.begin() + sizeof h, msg.end());
        const Tag got{h.group_key, h.seq};
        if (h.src_rank == src && got == tag && h.epoch == epoch_) return data;
        unexpected_.push_back(Unexpected{h.src_rank, got, h.epoch, std::move(data)});
        continue;
      }
      fabric_.poll_abort();
      if (fabric_.aborted.load())
        throw WorldAborted("rank " + std::to_string(rank()) + " stopped while waiting for rank " +
                           std::to_string(src) + ": " + fabric_.reason());
      if (Clock::now() > deadline)
        throw std::runtime_error("rank " + std::to_string(rank()) + " waited " + fabric_.timeout_text() +
                                 " s for a message from rank " +
                                 std::to_string(src) + " (process " + std::to_string(src / fabric_.local) +
                                 "); it failed, or the devices issued collectives in different orders");
      reap();
      MpiFabric::back_off(idle);
    }
  }

 private:
  struct Pending {
    int dst = -1;
    Bytes bytes;
    MPI_Request request = MPI_REQUEST_NULL;
  };
  struct Unexpected {
    int src;
    Tag tag;
    uint64_t epoch;
    Bytes data;
  };

  // Frees the buffers of sends that completed.
  void reap() {
    while (!pending_.empty()) {
      int done = 0;
      check_mpi(MPI_Test(&pending_.front().request, &done, MPI_STATUS_IGNORE), "MPI_Test");
      if (!done) break;
      pending_.pop_front();
    }
  }

  MpiFabric& fabric_;
  std::deque<Pending> pending_;
  std::deque<Unexpected> unexpected_;
  uint64_t epoch_ = 0;
};

}  // namespace detail

MpiWorld::MpiWorld(MeshShape mesh, int local_devices) : mesh_(std::move(mesh)), local_(local_devices) {
  int initialised = 0;
  MPI_Initialized(&initialised);
  int provided = 0;
  if (!initialised) {
    detail::check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    finalize_ = true;
  } else {
    MPI_Query_thread(&provided);
  }
  if (provided < MPI_THREAD_MULTIPLE)
    throw std::runtime_error("MpiWorld: this MPI gives thread support level " + std::to_string(provided) +
                             ", but the devices' threads need MPI_THREAD_MULTIPLE");
  MPI_Comm_rank(MPI_COMM_WORLD, &process_);
  MPI_Comm_size(MPI_COMM_WORLD, &processes_);
  if (local_ < 1 || static_cast<long>(processes_) * local_ != mesh_.num_devices()) {
    if (finalize_) MPI_Finalize();  // no destructor runs: leave MPI as it was found
    throw std::invalid_argument("MpiWorld: " + std::to_string(processes_) + " processes x " + std::to_string(local_) +
                                " local devices is not the " + std::to_string(mesh_.num_devices()) +
                                " devices of mesh " + mesh_.to_string() +
                                "; run mpirun -np " + (local_ > 0 && mesh_.num_devices() % local_ == 0
                                                           ? std::to_string(mesh_.num_devices() / local_)
                                                           : std::string("<devices / local devices>")));
  }
  fabric_ = std::make_unique<detail::MpiFabric>();
  MPI_Comm_dup(MPI_COMM_WORLD, &fabric_->comm);
  fabric_->local = local_;
  fabric_->process = process_;
  fabric_->processes = processes_;
  for (int r : local_ranks()) {
    comms_.push_back(std::make_unique<detail::MpiComm>(*fabric_, r, mesh_.num_devices()));
    memories_.push_back(std::make_unique<DeviceMemory>());
    timelines_.push_back(std::make_unique<Timeline>(r));
    comms_.back()->set_timeline(timelines_.back().get());
  }
}

MpiWorld::~MpiWorld() {
  comms_.clear();
  if (fabric_ && fabric_->comm != MPI_COMM_NULL) MPI_Comm_free(&fabric_->comm);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalize_ && !finalized) MPI_Finalize();
}

std::vector<int> MpiWorld::local_ranks() const {
  std::vector<int> r;
  for (int l = 0; l < local_; ++l) r.push_back(process_ * local_ + l);
  return r;
}

static int local_index(const MpiWorld& w, int rank) {
  if (!w.is_local(rank))
    throw std::out_of_range("MpiWorld: rank " + std::to_string(rank) + " belongs to process " +
                            std::to_string(rank / w.local_devices()) + ", not to this one (" +
                            std::to_string(w.process()) + ")");
  return rank % w.local_devices();
}

Communicator& MpiWorld::comm(int rank) {
  return *comms_.at(local_index(*this, rank));
}
DeviceMemory& MpiWorld::memory(int rank) {
  return *memories_.at(local_index(*this, rank));
}
Timeline& MpiWorld::timeline(int rank) {
  return *timelines_.at(local_index(*this, rank));
}
void MpiWorld::set_recv_timeout(double seconds) {
  fabric_->recv_timeout_s = seconds;
}

void MpiWorld::run(const std::function<void(int rank)>& fn) {
  for (auto& c : comms_) c->next_epoch();
  std::mutex mu;
  std::exception_ptr first;
  // Keeps the first exception of this process; when that is a device's own
  // failure (not an abort caused by another's), it is announced to every
  // process.
  auto record = [&](const char* failure, int r = -1) {
    {
      std::lock_guard<std::mutex> lk(mu);
      if (first) return;
      first = std::current_exception();
    }
    if (!failure) return;
    const std::string why = "rank " + std::to_string(r) + " (process " + std::to_string(process_) + ") " + failure;
    fabric_->set_aborted(why);
    fabric_->broadcast_abort(why);
  };
  std::vector<std::thread> threads;
  for (int r : local_ranks()) {
    threads.emplace_back([&, r] {
      detail::MpiComm& comm = *comms_[r % local_];
      try {
        fn(r);
        comm.finish_sends();
      } catch (const WorldAborted&) {
        record(nullptr);  // stopped by another rank's failure, already broadcast
      } catch (const std::exception& e) {
        record(("failed: " + std::string(e.what())).c_str(), r);
      } catch (...) {
        record("failed with an exception that is not a std::exception", r);
      }
    });
  }
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
  size_t left = 0;
  for (auto& c : comms_) left += c->take_unclaimed();
  if (left)
    throw std::logic_error("MpiWorld::run: " + std::to_string(left) + " message(s) arrived on process " +
                           std::to_string(process_) + " but were never received");
}

namespace {

// Waits for a nonblocking collective like a device's receive waits: never
// past the timeout, and stopping when another process announced a failure.
void wait_host(detail::MpiFabric& f, MPI_Request& request, const char* what) {
  const auto deadline = f.deadline();
  for (int idle = 0;;) {
    int done = 0;
    detail::check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), what);
    if (done) return;
    f.poll_abort();
    if (f.aborted.load())
      throw WorldAborted("process " + std::to_string(f.process) + " stopped in " + what + ": " + f.reason());
    if (std::chrono::steady_clock::now() > deadline)
      throw std::runtime_error("process " + std::to_string(f.process) + " waited " + f.timeout_text() + " s in " +
                               what + "; another process failed or did not call it");
    detail::MpiFabric::back_off(idle);
  }
}

}  // namespace

std::vector<std::string> MpiWorld::all_gather_host(const std::string& mine) {
  detail::MpiFabric& f = *fabric_;
  const int n = static_cast<int>(mine.size());
  std::vector<int> sizes(static_cast<size_t>(processes_));
  MPI_Request request;
  detail::check_mpi(MPI_Iallgather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, f.comm, &request), "MPI_Iallgather");
  wait_host(f, request, "all_gather_host (sizes)");
  std::vector<int> displs(sizes.size(), 0);
  for (size_t p = 1; p < sizes.size(); ++p) displs[p] = displs[p - 1] + sizes[p - 1];
  std::string all(static_cast<size_t>(displs.back() + sizes.back()), '\0');
  detail::check_mpi(MPI_Iallgatherv(mine.data(), n, MPI_CHAR, all.data(), sizes.data(), displs.data(), MPI_CHAR,
                                    f.comm, &request),
                    "MPI_Iallgatherv");
  wait_host(f, request, "all_gather_host (bytes)");
  std::vector<std::string> out;
  for (size_t p = 0; p < sizes.size(); ++p) out.push_back(all.substr(static_cast<size_t>(displs[p]), static_cast<size_t>(sizes[p])));
  return out;
}

CommStats MpiWorld::local_stats() const {
  CommStats total;
  for (const auto& c : comms_) total += c->stats();
  return total;
}

}  // namespace sharc::rt
