//===- checkpoint-manifest-fuzzer.cpp - libFuzzer target for MANIFEST.json ===//
//
// A checkpoint's MANIFEST.json ends with its own XXH3 checksum, which random
// bytes never match, so the input is taken as a manifest *without* that
// line and the fuzzer appends the right one (as the writer does); an input
// that already holds a "manifest_xxh3" line is used as it is, so the checksum
// check is fuzzed too. The text goes to spw::storage::check_checkpoint_manifest
// (what load_checkpoint parses). When it is accepted and its data file is
// small, the manifest and a data file of that many bytes (cut from the input
// where it is long enough, else zeros) are written to a checkpoint dir and
// loaded with load_checkpoint, so the chunk loop and its bounds checks run on
// whatever the manifest says. A spw::Error is the expected answer; a crash,
// a sanitizer report or a hang is a bug. A reproducer: write the text (with
// its checksum line, see run-fuzzer.sh's log) to DIR/step-N/MANIFEST.json.
//
//===----------------------------------------------------------------------===//

#include "storage/checkpoint.h"
#include "support.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <unistd.h>
#include <xxhash.h>

namespace fs = std::filesystem;
using namespace spw::storage;

namespace {

constexpr const char *kChecksumLine = "  \"manifest_xxh3\": \"";

struct Scratch {
  std::string root;
  IoEngine *engine = nullptr;
  Scratch() {
    const char *tmp = std::getenv("TMPDIR");
    std::string base = tmp && *tmp ? tmp : "/tmp";
    std::string tmpl = base + "/spillway-manifest-fuzz.XXXXXX";
    if (!::mkdtemp(tmpl.data()))
      std::abort();
    root = tmpl;
    EngineConfig cfg;
    cfg.backend = Backend::Threads; // no ring per process under ASan
    cfg.direct = false;
    cfg.notice = [](const std::string &) {};
    engine = new IoEngine(cfg);
  }
  ~Scratch() {
    delete engine;
    std::error_code ec;
    fs::remove_all(root, ec);
  }
};

Scratch &scratch() {
  static Scratch s;
  return s;
}

std::string with_checksum(std::string text) {
  if (text.find(std::string("\n") + kChecksumLine) != std::string::npos)
    return text;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx",
                (unsigned long long)XXH3_64bits(text.data(), text.size()));
  return text + kChecksumLine + hex + "\"\n}\n";
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string input(reinterpret_cast<const char *>(data), size);
  const std::string text = with_checksum(input);
  int64_t step = -1;
  try {
    step = check_checkpoint_manifest(text);
  } catch (const spw::Error &) {
    return 0;
  }
  // Accepted: load it for real when its files stay small.
  const size_t at = text.find("\"data_bytes\": ");
  const long long data_bytes = at == std::string::npos
                                   ? -1
                                   : std::atoll(text.c_str() + at + 14);
  const size_t rat = text.find("\"raw_bytes\": ");
  const long long raw_bytes =
      rat == std::string::npos ? -1 : std::atoll(text.c_str() + rat + 13);
  if (step < 0 || step > 99999999 || data_bytes < 0 ||
      data_bytes > (1 << 20) || raw_bytes < 0 || raw_bytes > (64 << 20))
    return 0;
  Scratch &s = scratch();
  const fs::path dir = fs::path(s.root) / checkpoint_dir_name(step);
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir, ec);
  std::string bytes(size_t(data_bytes), '\0');
  if (size >= bytes.size())
    bytes.assign(input.data() + (size - bytes.size()), bytes.size());
  spw::write_file_atomic((dir / kCheckpointManifest).string(), text);
  spw::write_file_atomic((dir / kCheckpointDataFile).string(), bytes);
  try {
    LoadedCheckpoint c = load_checkpoint(*s.engine, dir.string());
    for (const CheckpointTensor &t : c.tensors)
      if (t.offset > uint64_t(raw_bytes) ||
          t.bytes > uint64_t(raw_bytes) - t.offset)
        std::abort();
  } catch (const spw::Error &) {
  }
  fs::remove_all(dir, ec);
  return 0;
}
