// Timelines as Chrome traces: the JSON that Perfetto (ui.perfetto.dev) and
// chrome://tracing open. One track per device; one complete event per
// compute op, collective, send and recv, named after what caused it (the
// DSL line and layer). Executors record the events, on the wall clock
// (steady_clock, so real and noisy) or on a virtual clock (each op charged
// a modelled cost: deterministic, so bubbles and overlap are computed, not
// measured); this file only holds and writes them.
#pragma once

#include <cstdint>
#include <string>
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

}  // namespace sharc::rt
