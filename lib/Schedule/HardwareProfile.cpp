//===- HardwareProfile.cpp - the profile's JSON schema ---------------------===//
//
// Strict on purpose: a misspelt key would otherwise leave a rate at a default
// and silently change every plan, so unknown keys are errors too.
//
//===----------------------------------------------------------------------===//

#include "spillway/Schedule/HardwareProfile.h"

#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <cstdio>
#include <set>

using namespace spillway::schedule;
namespace json = llvm::json;

static constexpr const char *kSchema = "spillway-hw-profile-1";

double HardwareProfile::ssdReadGBps() const {
  double s = 0;
  for (const SSDProfile &d : ssds)
    s += d.readGBps;
  return s;
}
double HardwareProfile::ssdWriteGBps() const {
  double s = 0;
  for (const SSDProfile &d : ssds)
    s += d.writeGBps;
  return s;
}
double HardwareProfile::ssdCombinedGBps() const {
  double s = 0;
  for (const SSDProfile &d : ssds)
    s += d.combinedGBps;
  return s;
}

namespace {
/// The smallest rate a profile may give (GB/s, TFLOP/s, parameters/s):
/// 1e-12 GB/s is one byte in 1000 s, and the times stay finite.
constexpr double kSmallestRate = 1e-12;

/// Reads one JSON object's keys, remembering which it saw so that the rest
/// can be reported as unknown. The first error wins.
class ObjectReader {
public:
  ObjectReader(const json::Object &obj, std::string where, std::string &error)
      : obj(obj), where(std::move(where)), error(error) {}

  bool ok() const { return error.empty(); }

  const json::Value *get(const char *key, bool required = true) {
    seen.insert(key);
    const json::Value *v = obj.get(key);
    if (!v && required)
      fail(std::string("missing key '") + key + "'");
    return v;
  }
  void number(const char *key, double &out) {
    const json::Value *v = get(key);
    if (!v || !ok())
      return;
    std::optional<double> d = v->getAsNumber();
    if (!d)
      return fail(std::string("'") + key + "' must be a number");
    if (!std::isfinite(*d))
      return fail(std::string("'") + key + "' must be a finite number, got " +
                  std::to_string(*d));
    if (!(*d > 0))
      return fail(std::string("'") + key + "' must be positive, got " +
                  std::to_string(*d));
    // Below it the model's times overflow to infinity (1e-320 passes > 0).
    if (*d < kSmallestRate) {
      char got[32];
      std::snprintf(got, sizeof got, "%g", *d);
      return fail(std::string("'") + key + "' must be at least 1e-12, got " +
                  got);
    }
    out = *d;
  }
  void bytes(const char *key, uint64_t &out) {
    const json::Value *v = get(key);
    if (!v || !ok())
      return;
    std::optional<int64_t> i = v->getAsInteger();
    if (!i)
      return fail(std::string("'") + key + "' must be an integer (bytes)");
    if (*i <= 0)
      return fail(std::string("'") + key + "' must be positive, got " +
                  std::to_string(*i));
    out = uint64_t(*i);
  }
  void string(const char *key, std::string &out, bool required = true) {
    const json::Value *v = get(key, required);
    if (!v || !ok())
      return;
    std::optional<llvm::StringRef> s = v->getAsString();
    if (!s)
      return fail(std::string("'") + key + "' must be a string");
    out = s->str();
  }
  const json::Object *object(const char *key, bool required = true) {
    const json::Value *v = get(key, required);
    if (!v || !ok())
      return nullptr;
    const json::Object *o = v->getAsObject();
    if (!o)
      fail(std::string("'") + key + "' must be an object");
    return o;
  }
  const json::Array *array(const char *key) {
    const json::Value *v = get(key);
    if (!v || !ok())
      return nullptr;
    const json::Array *a = v->getAsArray();
    if (!a)
      fail(std::string("'") + key + "' must be a list");
    return a;
  }
  /// Keys not asked for; call last.
  void rejectUnknown() {
    if (!ok())
      return;
    for (const auto &kv : obj)
      if (!seen.count(kv.first.str()))
        return fail("unknown key '" + kv.first.str() + "'");
  }
  void fail(const std::string &msg) {
    if (error.empty())
      error = where + ": " + msg;
  }

private:
  const json::Object &obj;
  std::string where;
  std::string &error;
  std::set<std::string> seen;
};
} // namespace

std::optional<HardwareProfile>
spillway::schedule::parseHardwareProfile(const std::string &text,
                                         const std::string &what,
                                         std::string &error) {
  error.clear();
  llvm::Expected<json::Value> parsed = json::parse(text);
  if (!parsed) {
    error = "hardware profile '" + what +
            "': not valid JSON: " + llvm::toString(parsed.takeError());
    return std::nullopt;
  }
  const json::Object *root = parsed->getAsObject();
  std::string file = "hardware profile '" + what + "'";
  if (!root) {
    error = file + ": the top level must be an object";
    return std::nullopt;
  }
  HardwareProfile p;
  ObjectReader top(*root, file, error);
  std::string schema;
  top.string("schema", schema);
  if (top.ok() && schema != kSchema)
    top.fail("'schema' is '" + schema + "', expected '" + kSchema + "'");
  top.string("name", p.name);
  top.string("source", p.source, /*required=*/false);
  top.string("backend", p.backend);
  if (top.ok() && p.backend != "cuda" && p.backend != "cpu")
    top.fail("'backend' must be \"cuda\" or \"cpu\", got '" + p.backend + "'");

  if (const json::Object *gpu = top.object("gpu")) {
    ObjectReader r(*gpu, file + " gpu", error);
    r.number("bf16_tflops", p.gpuBf16TFlops);
    r.number("fp32_tflops", p.gpuFp32TFlops);
    r.bytes("memory_bytes", p.gpuMemoryBytes);
    r.rejectUnknown();
  }
  if (const json::Object *host = top.object("host")) {
    ObjectReader r(*host, file + " host", error);
    r.bytes("memory_bytes", p.hostMemoryBytes);
    r.number("memcpy_gbps", p.hostMemcpyGBps);
    r.number("cpu_optimizer_params_per_s", p.cpuOptimizerParamsPerSec);
    r.rejectUnknown();
  }
  if (const json::Object *pcie = top.object("pcie")) {
    ObjectReader r(*pcie, file + " pcie", error);
    r.number("h2d_gbps", p.h2dGBps);
    r.number("d2h_gbps", p.d2hGBps);
    r.number("bidirectional_gbps", p.bidirectionalGBps);
    r.rejectUnknown();
  }
  // Optional: only data-parallel plans (spillwayc --ranks) use it.
  if (const json::Object *net = top.object("network", /*required=*/false)) {
    ObjectReader r(*net, file + " network", error);
    r.number("gbps", p.networkGBps);
    r.rejectUnknown();
  }
  if (const json::Array *ssds = top.array("ssd")) {
    for (size_t i = 0; i < ssds->size() && error.empty(); ++i) {
      std::string where = file + " ssd[" + std::to_string(i) + "]";
      const json::Object *o = (*ssds)[i].getAsObject();
      if (!o) {
        error = where + ": must be an object";
        break;
      }
      SSDProfile d;
      ObjectReader r(*o, where, error);
      r.string("path", d.path);
      r.number("read_gbps", d.readGBps);
      r.number("write_gbps", d.writeGBps);
      r.number("combined_gbps", d.combinedGBps);
      r.rejectUnknown();
      if (!error.empty())
        break;
      // One device listed twice would count its bandwidth twice.
      for (const SSDProfile &prev : p.ssds)
        if (prev.path == d.path) {
          error = where + ": duplicate path '" + d.path +
                  "' (each SSD is listed once)";
          break;
        }
      p.ssds.push_back(d);
    }
  }
  top.rejectUnknown();
  if (!error.empty())
    return std::nullopt;
  return p;
}

std::optional<HardwareProfile>
spillway::schedule::readHardwareProfile(const std::string &path,
                                        std::string &error) {
  auto buf = llvm::MemoryBuffer::getFile(path, /*IsText=*/true);
  if (!buf) {
    error = "cannot read hardware profile '" + path +
            "': " + buf.getError().message();
    return std::nullopt;
  }
  return parseHardwareProfile((*buf)->getBuffer().str(), path, error);
}

/// %.6g: the probe's measurements are not that precise, and 2.1 stays "2.1"
/// (llvm::json writes 17 digits).
static std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::string
spillway::schedule::writeHardwareProfile(const HardwareProfile &p) {
  auto str = [](const std::string &s) {
    std::string out;
    llvm::raw_string_ostream os(out);
    os << json::Value(s);
    return out;
  };
  std::string o = "{\n";
  o += "  \"schema\": \"" + std::string(kSchema) + "\",\n";
  o += "  \"name\": " + str(p.name) + ",\n";
  if (!p.source.empty())
    o += "  \"source\": " + str(p.source) + ",\n";
  o += "  \"backend\": " + str(p.backend) + ",\n";
  o += "  \"gpu\": {\"bf16_tflops\": " + num(p.gpuBf16TFlops) +
       ", \"fp32_tflops\": " + num(p.gpuFp32TFlops) +
       ", \"memory_bytes\": " + std::to_string(p.gpuMemoryBytes) + "},\n";
  o += "  \"host\": {\"memory_bytes\": " + std::to_string(p.hostMemoryBytes) +
       ", \"memcpy_gbps\": " + num(p.hostMemcpyGBps) +
       ", \"cpu_optimizer_params_per_s\": " + num(p.cpuOptimizerParamsPerSec) +
       "},\n";
  o += "  \"pcie\": {\"h2d_gbps\": " + num(p.h2dGBps) +
       ", \"d2h_gbps\": " + num(p.d2hGBps) +
       ", \"bidirectional_gbps\": " + num(p.bidirectionalGBps) + "},\n";
  if (p.networkGBps > 0)
    o += "  \"network\": {\"gbps\": " + num(p.networkGBps) + "},\n";
  o += "  \"ssd\": [";
  for (size_t i = 0; i < p.ssds.size(); ++i) {
    const SSDProfile &d = p.ssds[i];
    o += std::string(i ? ",\n" : "\n") + "    {\"path\": " + str(d.path) +
         ", \"read_gbps\": " + num(d.readGBps) +
         ", \"write_gbps\": " + num(d.writeGBps) +
         ", \"combined_gbps\": " + num(d.combinedGBps) + "}";
  }
  o += p.ssds.empty() ? "]\n}\n" : "\n  ]\n}\n";
  return o;
}
