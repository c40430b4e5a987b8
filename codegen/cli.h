// The command lines of sharc's tools (the generator, sharc-lift, the samples'
// drivers, the benches), on CLI11: every tool prints the same --help layout
// and reports a bad flag the same way,
//
//   TOOL: error: MESSAGE
//   Run with --help for more information.
//
// exiting with status 2. Flags the tools share are spelled once, here.
//
//   CLI::App app{"What the tool does, in one line.", "tool_name"};
//   std::string mesh = "data=8";
//   sharc::cli::add_mesh(app, mesh, "the program's mesh");
//   if (const int code = sharc::cli::parse(app, argc, argv); code >= 0) return code;
//   ...
//   if (bad) return sharc::cli::fail(app, "no program was generated for --mesh " + mesh);
#pragma once

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>

namespace sharc::cli {

inline constexpr int kUsageError = 2;

// What a parse error prints (CLI11's failure_message).
inline std::string failure_message(const CLI::App* app, const CLI::Error& e) {
  return app->get_name() + ": error: " + e.what() + "\nRun with --help for more information.\n";
}

// Parses argv. Returns -1 to go on, or the status main() returns: 0 after
// printing --help, kUsageError after printing a mistake.
inline int parse(CLI::App& app, int argc, char** argv) {
  app.failure_message(failure_message);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kUsageError;
  }
  return -1;
}

// A mistake found after parsing (a combination of flags, a mesh no program
// was generated for): printed as a parse error is; returns kUsageError.
inline int fail(const std::string& tool, const std::string& message) {
  std::fprintf(stderr, "%s: error: %s\nRun with --help for more information.\n", tool.c_str(),
               message.c_str());
  return kUsageError;
}
inline int fail(const CLI::App& app, const std::string& message) { return fail(app.get_name(), message); }

// A whole number in [min, max], checked before CLI11 converts it:
//   --steps: '0' is less than 1
//   --cpp-files: '0' is not between 1 and 1000
inline CLI::Validator whole_number(long long min, long long max) {
  const bool bounded = max < std::numeric_limits<long long>::max();
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        errno = 0;
        char* end = nullptr;
        const long long v = std::strtoll(text.c_str(), &end, 10);
        if (text.empty() || *end != '\0' || errno != 0) return "'" + text + "' is not a whole number";
        if (bounded && (v < min || v > max))
          return "'" + text + "' is not between " + std::to_string(min) + " and " + std::to_string(max);
        if (v < min) return "'" + text + "' is less than " + std::to_string(min);
        return "";
      },
      bounded ? std::to_string(min) + ".." + std::to_string(max) : ">=" + std::to_string(min));
}
inline CLI::Validator at_least(long long min) {
  return whole_number(min, std::numeric_limits<long long>::max());
}

// A number of at least 0 (a rate, a latency), checked before CLI11 converts it.
inline CLI::Validator non_negative() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (text.empty() || *end != '\0' || !std::isfinite(v)) return "'" + text + "' is not a number";
        if (v < 0) return "'" + text + "' is negative";
        return "";
      },
      ">=0");
}

// The benches' --steps and --warmup: timed steps, and untimed ones before.
inline void add_steps(CLI::App& app, int& steps, int& warmup) {
  app.add_option("--steps", steps, "timed steps")->check(at_least(1))->capture_default_str();
  app.add_option("--warmup", warmup, "untimed steps before them")->check(at_least(0))->capture_default_str();
}

// The benches' simulated link between devices (rt::LinkModel): a latency per
// message and a bandwidth; 0 and 0 is an infinitely fast link.
inline void add_link(CLI::App& app, double& latency_us, double& gbps) {
  app.add_option("--link-latency-us", latency_us, "simulated latency per message, in microseconds")
      ->check(non_negative())
      ->capture_default_str();
  app.add_option("--link-gbps", gbps, "simulated link bandwidth in gigabits/s (0: infinite)")
      ->check(non_negative())
      ->capture_default_str();
}

// --mesh AXIS=N[,AXIS=N...]: which generated program runs (or is generated).
inline CLI::Option* add_mesh(CLI::App& app, std::string& mesh, const std::string& what) {
  return app.add_option("--mesh", mesh, what)->type_name("AXIS=N[,AXIS=N...]")->capture_default_str();
}

}  // namespace sharc::cli
