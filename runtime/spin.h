// spin_for: a short busy wait for threads that have a core of their own
// (Team's workers between a step's parts, FiberPool's threads between
// messages), where sleeping and being woken costs as much as the wait.
// Internal to the runtime: generated code does not include it.
#pragma once

#include <chrono>

namespace sharc::rt {

// Spins, with the CPU's pause hint, until pred() holds or `limit` has
// passed; returns pred(). The clock is read every 64 tries.
template <class Pred>
bool spin_for(std::chrono::steady_clock::duration limit, Pred pred) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (int i = 0;; ++i) {
    if (pred()) return true;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    if ((i & 63) == 63 && std::chrono::steady_clock::now() > deadline) return pred();
  }
}

}  // namespace sharc::rt
