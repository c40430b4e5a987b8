// Timelines: what each device did and when, on one of two clocks, and the
// Chrome trace JSON that Perfetto (ui.perfetto.dev) and chrome://tracing
// open (one track per device; one complete event per compute statement,
// collective, send and recv, named after the DSL line that caused it).
//
// The clocks. A world (ThreadWorld) gives every device a Timeline, off by
// default. Executors (generated code, the interpreter) mark each statement
// of a step with op(name, cost) before running it; communicators record
// their own calls. On
//  - the wall clock (ClockMode::kWall), an event lasts from its mark to the
//    next mark or communication call (steady_clock: real and noisy);
//  - the virtual clock (ClockMode::kVirtual), nothing is timed. A statement
//    takes its modelled cost (MachineModel::seconds of its flops and bytes),
//    a message arrives at send time plus its link time (the world's
//    LinkModel, queued behind earlier messages on the same link), and a
//    receive waits for that arrival. Every device's busy and idle time is
//    then exact and deterministic, so bubbles and overlap are computed, not
//    guessed from noisy clocks. Reductions inside collectives are charged as
//    memory traffic (three element accesses per element folded).
//  - the device clock (ClockMode::kDevice), each mark is a stamp queued on
//    the device's own work queue (a GPU world's CUDA events on the device's
//    current stream: StampSource), read when the run is over: a statement
//    lasts from its stamp to the next, which is what the GPU spent on it,
//    launch gaps included. A communication statement's calls are inside its
//    span; the run is placed on the wall clock at its first mark.
// With the clock off, op() is one branch: generated code keeps its marks.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace sharc::rt {

struct TraceEvent {
  int device = 0;        // the track
  std::string name;      // "dot  model.cpp:31 dot1"
  std::string category;  // "compute", "collective", "send", "recv"
  double start_s = 0, end_s = 0;
  // Sends and receives: the other device and the message tag, by which a
  // viewer (and a test) matches each send with its receive; -1 otherwise.
  int peer = -1;
  int64_t tag = -1;
  uint64_t bytes = 0;  // bytes sent (sends and collectives)
  std::string detail;  // free text shown in the event's arguments ("F3", "stage 1")
};

struct Trace {
  std::string clock = "wall";            // "wall" or "virtual"
  std::vector<std::string> track_names;  // per device: "device 3 (pipe=1, data=1)"
  std::vector<TraceEvent> events;
};

// The trace as Chrome trace JSON ({"traceEvents": [...]}, times in
// microseconds), deterministic for a deterministic trace.
std::string chrome_trace_json(const Trace& trace);

// ---- clocks -------------------------------------------------------------------

enum class ClockMode { kOff, kWall, kVirtual, kDevice };
const char* clock_mode_name(ClockMode mode);  // "off", "wall", "virtual", "device"

// The device clock's source (ClockMode::kDevice): stamps queued behind the
// work a device has been given so far, read once that work is done. A GPU
// world gives each device's timeline one (its KernelSet).
class StampSource {
 public:
  virtual ~StampSource() = default;
  // One more stamp, behind everything queued on the device until now.
  virtual void stamp() = 0;
  // Waits for the device to pass every stamp since the last read, and gives
  // their times, in seconds after the first of them.
  virtual std::vector<double> read_stamps() = 0;
};

// The work of one statement, counted by the generator from local shapes.
struct OpCost {
  double flops = 0;  // arithmetic (a GEMM's 2*M*N*K, an elementwise op per element)
  double bytes = 0;  // memory read and written
};

// The virtual clock's device: a roofline. A statement takes
// max(flops / flops_per_s, bytes / bytes_per_s) + overhead_s.
struct MachineModel {
  double flops_per_s = 1e11;
  double bytes_per_s = 2e10;
  double overhead_s = 0;  // per statement (a kernel launch)
  double seconds(const OpCost& c) const;
};

// One device's time so far. busy_s is time in compute statements (and, on
// the virtual clock, the reductions of collectives); comm_s is time inside
// communication calls, waiting included. now_s - busy_s - comm_s is
// unaccounted (wall: the executor's own overhead; virtual: 0 when the step
// marks every statement).
struct DeviceTime {
  double now_s = 0, busy_s = 0, comm_s = 0;
};

// One device's timeline; only its device's thread touches it.
class Timeline {
 public:
  explicit Timeline(int device = 0) : device_(device) {}

  // Set by the world, between runs: the mode, the machine (virtual clock)
  // and the wall clock's zero, shared by every device.
  void configure(ClockMode mode, const MachineModel& machine,
                 std::chrono::steady_clock::time_point origin);
  // The device clock's stamps (null: none; ClockMode::kDevice then throws at
  // the first mark, saying the world has no device clock).
  void set_stamps(StampSource* stamps) { stamps_ = stamps; }
  ClockMode mode() const { return mode_; }
  bool virtual_clock() const { return mode_ == ClockMode::kVirtual; }

  // A compute statement starts: the previous event ends (wall), and this one
  // is charged cost (virtual). `name` says what and where ("dot  m.cpp:31 l0").
  void op(const char* name, const OpCost& cost) {
    if (mode_ != ClockMode::kOff) mark(name, cost, true);
  }
  void op(const std::string& name, const OpCost& cost) { op(name.c_str(), cost); }
  // A communication statement starts: the previous event ends, and the
  // communicator's calls that follow are named after `name`.
  void comm_op(const char* name) {
    if (mode_ != ClockMode::kOff) mark(name, {}, false);
  }
  void comm_op(const std::string& name) { comm_op(name.c_str()); }

  // ---- for communicators ----
  // The current time (seconds since the origin, or virtual).
  double now() const;
  // A communication call begins: ends any open compute event; returns now().
  double begin_comm();
  // ... and ends: records one event from `start` to now(), named after the
  // statement that made the call, unless the clock is off.
  void end_comm(const char* category, double start, int peer, int64_t tag, uint64_t bytes);
  // Virtual clock: a message that arrives at `t` has been received.
  void arrive(double t) {
    if (t > now_) now_ = t;
  }
  // Virtual clock: computation inside a communication call (a reduction).
  void charge(const OpCost& cost);

  // Ends the open event (a run is over); on the device clock, reads the
  // run's stamps and makes its events.
  void finish();
  // Virtual clock: continue from `t` if it is later (every device starts a
  // run together).
  void start_at(double t) {
    if (t > now_) now_ = t;
  }
  DeviceTime time() const;
  const std::vector<TraceEvent>& events() const { return events_; }
  // Forgets the events and sets the clock back to zero.
  void clear();

 private:
  void mark(const char* name, const OpCost& cost, bool compute);
  void read_stamps();

  int device_;
  ClockMode mode_ = ClockMode::kOff;
  MachineModel machine_;
  std::chrono::steady_clock::time_point origin_{};
  double now_ = 0;   // virtual time
  double busy_ = 0;  // both clocks
  double comm_ = 0;
  std::string label_;  // the current statement
  bool open_ = false;  // wall clock: a compute event is running since open_start_
  double open_start_ = 0;
  std::vector<TraceEvent> events_;
  // Device clock: the stamped statements of the run (name, compute or not),
  // and the wall-clock time of its first mark.
  StampSource* stamps_ = nullptr;
  std::vector<std::pair<std::string, bool>> stamped_;
  double run_start_ = 0;
};

}  // namespace sharc::rt
