// libFuzzer target (clang 14, -fsanitize=fuzzer,address,undefined) for the
// readers of untrusted checkpoint files: the checkpoint index parser and
// the safetensors reader, both the header parser and a whole file opened
// from memory. The first input byte picks the reader; the rest is the
// input. Every input must end in a result or in CheckpointError /
// SafetensorsError: anything else (a crash, a sanitizer report, another
// exception) is a finding. ctest runs it for 60 s from the seeds in
// tests/checkpoint/fuzz_seeds/.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "runtime/checkpoint.h"
#include "runtime/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    switch (data[0] % 3) {
      case 0:
        sharc::rt::parse_checkpoint_index(text, "fuzz/index.json");
        break;
      case 1: {
        std::map<std::string, std::string> metadata;
        const uint64_t start = 8 + text.size();
        sharc::rt::SafetensorsFile::parse_header(text, start, start + (data[0] / 3) * 16u, "fuzz.safetensors",
                                                 &metadata);
        break;
      }
      default: {  // the bytes as a whole file
        const int fd = ::memfd_create("fuzz.safetensors", MFD_CLOEXEC);
        if (fd < 0) return 0;
        if (::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size())) {
          try {
            const sharc::rt::SafetensorsFile f("/proc/self/fd/" + std::to_string(fd));
            for (const sharc::rt::SafetensorsTensor& t : f.tensors())
              if (t.end - t.begin <= (1u << 16)) f.read_tensor(t.name);
          } catch (const sharc::rt::SafetensorsError&) {
          }
        }
        ::close(fd);
        break;
      }
    }
  } catch (const sharc::rt::CheckpointError&) {
  } catch (const sharc::rt::SafetensorsError&) {
  }
  return 0;
}
