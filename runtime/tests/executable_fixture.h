//===- executable_fixture.h - run a test model executable in a temp dir ---===//
//
// Shared by the tests that drive spw_main through a real executable: a fresh
// directory per test, files written and read there, and the executable run in
// it with its exit code, stdout and stderr captured.
//
//===----------------------------------------------------------------------===//
#ifndef SPILLWAY_RUNTIME_TESTS_EXECUTABLE_FIXTURE_H
#define SPILLWAY_RUNTIME_TESTS_EXECUTABLE_FIXTURE_H

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/wait.h>

namespace spwtest {

struct Result {
  int rc;
  std::string out, err;
};

#define EXPECT_CONTAINS(hay, needle)                                           \
  EXPECT_NE((hay).find(needle), std::string::npos)                             \
      << "expected to find: " << (needle) << "\nin:\n"                         \
      << (hay)

class ExecutableTest : public ::testing::Test {
protected:
  explicit ExecutableTest(std::string exe) : exe(std::move(exe)) {}

  std::filesystem::path dir;
  std::string exe; // the model executable run() runs by default

  void SetUp() override {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "spw_test_XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir); }

  std::string path(const std::string &name) const {
    return (dir / name).string();
  }
  void write(const std::string &name, const std::string &bytes) {
    std::ofstream(path(name), std::ios::binary) << bytes;
  }
  std::string read(const std::string &name) const {
    std::ifstream f(path(name), std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  /// Runs `program` (default: the fixture's executable) in the test
  /// directory with `args`, `env` prepended as VAR=value assignments.
  Result run(const std::string &args, const std::string &env = "",
             const std::string &program = "") {
    std::string cmd = "cd '" + dir.string() + "' && " + env + " '" +
                      (program.empty() ? exe : program) + "' " + args +
                      " >stdout.txt 2>stderr.txt";
    int status = std::system(cmd.c_str());
    Result r;
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = read("stdout.txt");
    r.err = read("stderr.txt");
    return r;
  }
};

} // namespace spwtest

#endif
