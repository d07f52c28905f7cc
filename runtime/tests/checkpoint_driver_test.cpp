//===- checkpoint_driver_test.cpp - checkpoints through real executables --===//
//
// --checkpoint-dir / --resume of spw_main, run through the test models:
// checkpointing does not change the result; a resumed run ends with the
// bit-identical weights of the uninterrupted one, after a SIGKILL at every
// phase of a checkpoint write and after kills at random moments; torn
// checkpoints, injected -ENOSPC, another model's checkpoint and the usage
// errors of the new flags.
//
//===----------------------------------------------------------------------===//

#include "executable_fixture.h"
#include "storage/checkpoint.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <random>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using namespace spwtest;
namespace fs = std::filesystem;

namespace {

class CheckpointDriver : public ExecutableTest {
protected:
  CheckpointDriver() : ExecutableTest(SPW_TEST_MODEL_EXE) {}

  void SetUp() override {
    ExecutableTest::SetUp();
    // As driver_test.cpp: 3 batches, 38 float weights.
    auto x = randoms(36, 100);
    write("x.npy", spw::write_npy("<f4", {3, 4, 3}, x.data(), 144));
    std::vector<int64_t> y = {0, 1, 2, 1, 2, 2, 0, 1, 1, 0, 0, 2};
    write("y.npy", spw::write_npy("<i8", {3, 4}, y.data(), 96));
    auto w = randoms(38, 101, -0.7f, 0.7f);
    write("m.weights", std::string(reinterpret_cast<char *>(w.data()), 152));
  }
  // Every run gets TMPDIR=dir: a failed checkpoint rescues the weights to
  // $TMPDIR, which must not be the machine's /tmp (files left behind by
  // each test run). A rescue the run names must lie inside the test's dir.
  Result run(const std::string &args, const std::string &env = "",
             const std::string &program = "") {
    Result r = ExecutableTest::run(args, "TMPDIR='" + dir.string() + "' " + env,
                                   program);
    for (size_t at = 0;
         (at = r.err.find(" were written to '", at)) != std::string::npos;) {
      at += std::strlen(" were written to '");
      const std::string to = r.err.substr(at, r.err.find('\'', at) - at);
      EXPECT_EQ(to.rfind(dir.string() + "/", 0), 0u)
          << "a rescue outside the test's dir: " << to;
    }
    return r;
  }
  Result train(const std::string &extra, const std::string &env = "") {
    return run("--input x=x.npy --input y=y.npy --weights m.weights --lr "
               "0.05 " +
                   extra,
               env);
  }
  // The final weights of an uninterrupted run of `steps` steps.
  std::string reference(int steps) {
    Result r = train("--steps " + std::to_string(steps) +
                     " --save reference.safetensors");
    EXPECT_EQ(r.rc, 0) << r.err;
    return read("reference.safetensors");
  }
  std::string step_dir(const std::string &root, int64_t s) const {
    return path(root + "/" + spw::storage::checkpoint_dir_name(s));
  }
};

TEST_F(CheckpointDriver, CheckpointingDoesNotChangeTheResult) {
  const std::string ref = reference(10);
  Result r = train("--steps 10 --checkpoint-dir ck --checkpoint-every 3 "
                   "--save a.safetensors --print-every 3");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(read("a.safetensors"), ref);
  EXPECT_CONTAINS(r.out, "  checkpoints: ck, every 3 steps and after the last "
                         "step, keep 2, uncompressed, I/O ");
  EXPECT_CONTAINS(r.out, "  checkpoint ck/step-00000003 (716 B, ");
  EXPECT_CONTAINS(r.out, "  checkpoint ck/step-00000010 (716 B, ");
  EXPECT_EQ(r.err.find("error"), std::string::npos) << r.err;
  // keep 2: step 9 and the final step 10.
  auto list = spw::storage::list_checkpoints(path("ck"));
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].first, 10);
  EXPECT_EQ(list[1].first, 9);

  r = train("--steps 10 --checkpoint-dir ckz --checkpoint-every 4 "
            "--checkpoint-zstd --keep-checkpoints 5 --save z.safetensors");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(read("z.safetensors"), ref);
  EXPECT_EQ(spw::storage::list_checkpoints(path("ckz")).size(), 3u); // 4 8 10
  EXPECT_CONTAINS(read("ckz/step-00000008/MANIFEST.json"),
                  "\"compression\": \"zstd\"");
}

TEST_F(CheckpointDriver, ResumeIsBitIdentical) {
  const std::string ref = reference(10);
  ASSERT_EQ(train("--steps 10 --log-json full.jsonl").rc, 0);
  Result r = train("--steps 6 --checkpoint-dir ck --log-json log.jsonl");
  ASSERT_EQ(r.rc, 0) << r.err;
  r = train("--steps 10 --checkpoint-dir ck --resume --log-json log.jsonl "
            "--save b.safetensors");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_CONTAINS(r.out, "  resume: from 'ck/step-00000006' (step 6 of 10)");
  EXPECT_CONTAINS(r.out, "done: 4 steps in ");
  EXPECT_EQ(r.out.find("step 6/10"), std::string::npos);
  EXPECT_EQ(read("b.safetensors"), ref);
  // The log of the resumed run continues the interrupted one's.
  EXPECT_EQ(spwtest::without_timings(read("log.jsonl")),
            spwtest::without_timings(read("full.jsonl")));

  // Resuming at the last step trains nothing and saves the same weights.
  r = train("--steps 10 --checkpoint-dir ck --resume --save c.safetensors");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_CONTAINS(r.out, "nothing to train");
  EXPECT_EQ(read("c.safetensors"), ref);

  // --steps is the total: fewer than the checkpoint's step is an error.
  r = train("--steps 5 --checkpoint-dir ck --resume");
  EXPECT_EQ(r.rc, 1);
  EXPECT_CONTAINS(r.err, "checkpoint 'ck/step-00000010' is at step 10, "
                         "beyond --steps 5");
}

TEST_F(CheckpointDriver, ResumeWithoutCheckpointStartsFromTheWeights) {
  const std::string ref = reference(4);
  Result r = train("--steps 4 --checkpoint-dir fresh --resume --save "
                   "a.safetensors");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_CONTAINS(r.out, "  resume: no valid checkpoint in 'fresh'; starting "
                         "from the weights");
  EXPECT_EQ(read("a.safetensors"), ref);
}

TEST_F(CheckpointDriver, ExistingCheckpointsNeedResume) {
  ASSERT_EQ(train("--steps 2 --checkpoint-dir ck").rc, 0);
  Result r = train("--steps 2 --checkpoint-dir ck");
  EXPECT_EQ(r.rc, 1);
  EXPECT_CONTAINS(r.err, "error: --checkpoint-dir 'ck' already holds "
                         "checkpoints (the newest: 'ck/step-00000002'): pass "
                         "--resume to continue that run, or choose another "
                         "directory");
}

// SIGKILL at each phase of the checkpoint of step 6 (every 3 steps, 10
// steps); the resumed run starts from step 3 or 6 and ends bit-identical.
TEST_F(CheckpointDriver, KillAtEveryPhaseThenResume) {
  const std::string ref = reference(10);
  for (size_t i = 0; i < spw::storage::kNumCrashPhases; ++i) {
    const std::string phase = spw::storage::kCrashPhases[i];
    SCOPED_TRACE(phase);
    const std::string ck = "ck-" + phase;
    Result r = train("--steps 10 --checkpoint-dir " + ck +
                         " --checkpoint-every 3",
                     "SPILLWAY_TEST_CRASH_AT=" + phase +
                         " SPILLWAY_TEST_CRASH_STEP=6");
    EXPECT_EQ(r.rc, 128 + SIGKILL) << r.out << r.err;
    EXPECT_CONTAINS(r.out, "step 6/10");
    EXPECT_EQ(r.out.find("step 7/10"), std::string::npos);
    r = train("--steps 10 --checkpoint-dir " + ck +
              " --checkpoint-every 3 --resume --save out.safetensors");
    ASSERT_EQ(r.rc, 0) << r.out << r.err;
    const bool published = phase == "renamed" || phase == "pruned";
    EXPECT_CONTAINS(r.out, "  resume: from '" + ck + "/step-0000000" +
                               (published ? "6" : "3") + "'");
    if (!published)
      EXPECT_CONTAINS(r.err, "an unfinished checkpoint write");
    EXPECT_EQ(read("out.safetensors"), ref);
    // Nothing of the dead writer is left once the run has checkpointed
    // (LOCK stays: its flock died with the writer).
    for (auto &e : fs::directory_iterator(path(ck)))
      if (e.path().filename() != spw::storage::kCheckpointLockFile)
        EXPECT_EQ(e.path().filename().string().rfind("step-", 0), 0u)
            << e.path();
  }
}

TEST_F(CheckpointDriver, TornNewestIsSkipped) {
  const std::string ref = reference(10);
  ASSERT_EQ(train("--steps 6 --checkpoint-dir ck --checkpoint-every 3").rc, 0);
  const std::string data = step_dir("ck", 6) + "/data";
  std::string bytes = read("ck/step-00000006/data");
  bytes[100] ^= 1;
  write("ck/step-00000006/data", bytes);
  Result r = train("--steps 10 --checkpoint-dir ck --checkpoint-every 3 "
                   "--resume --save out.safetensors");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_CONTAINS(r.err, "spillway: skipping checkpoint 'ck/step-00000006': "
                         "chunk 0 (bytes 0..716 of 'ck/step-00000006/data') "
                         "fails its checksum");
  EXPECT_CONTAINS(r.out, "  resume: from 'ck/step-00000003' (step 3 of 10)");
  EXPECT_EQ(read("out.safetensors"), ref);
  EXPECT_EQ(spw::storage::list_checkpoints(path("ck")).front().first, 10);
}

TEST_F(CheckpointDriver, EnospcStopsTheRunWithAClearError) {
  const std::string ref = reference(6);
  ASSERT_EQ(train("--steps 3 --checkpoint-dir ck").rc, 0);
  // TMPDIR: the weights the failed checkpoint would lose are rescued there.
  Result r = train("--steps 6 --checkpoint-dir ck --resume",
                   "SPILLWAY_IO_FAULTS=enospc@1/write");
  EXPECT_EQ(r.rc, 1);
  EXPECT_CONTAINS(r.err, "error: cannot write the checkpoint of step 6 to "
                         "'ck/step-00000006': ");
  EXPECT_CONTAINS(r.err, "No space left on device");
  EXPECT_CONTAINS(r.err, "the checkpoints already in 'ck' are untouched");
  auto list = spw::storage::list_checkpoints(path("ck"));
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].first, 3);
  r = train("--steps 6 --checkpoint-dir ck --resume --save out.safetensors");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(read("out.safetensors"), ref);
}

// Every read failing (injected EIO) is not a torn checkpoint: the resume
// stops with exit 1 naming the checkpoint, instead of restarting from the
// weights and pruning the intact ones later; a checksum mismatch still skips.
TEST_F(CheckpointDriver, ReadErrorsStopTheResumeAndPruneNothing) {
  const std::string ref = reference(10);
  ASSERT_EQ(train("--steps 6 --checkpoint-dir ck --checkpoint-every 3").rc, 0);
  const std::string data6 = read("ck/step-00000006/data");
  Result r = train("--steps 10 --checkpoint-dir ck --checkpoint-every 3 "
                   "--resume",
                   "SPILLWAY_IO_FAULTS=eio@1+/read");
  EXPECT_EQ(r.rc, 1) << r.out << r.err;
  EXPECT_CONTAINS(r.err, "error: cannot read checkpoint 'ck/step-00000006': "
                         "read of ");
  EXPECT_CONTAINS(r.err, " of 'ck/step-00000006/data' ");
  EXPECT_CONTAINS(r.err, "Input/output error");
  EXPECT_CONTAINS(r.err, "it is not skipped and nothing in 'ck' is changed");
  EXPECT_EQ(r.err.find("skipping"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("step 1/10"), std::string::npos) << r.out;
  auto list = spw::storage::list_checkpoints(path("ck"));
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].first, 6);
  EXPECT_EQ(list[1].first, 3);
  EXPECT_EQ(read("ck/step-00000006/data"), data6);

  // A checksum mismatch is evidence of a torn one: skipped.
  std::string bytes = data6;
  bytes[100] ^= 1;
  write("ck/step-00000006/data", bytes);
  r = train("--steps 10 --checkpoint-dir ck --checkpoint-every 3 --resume "
            "--save out.safetensors");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_CONTAINS(r.err, "spillway: skipping checkpoint 'ck/step-00000006': "
                         "chunk 0 ");
  EXPECT_CONTAINS(r.out, "  resume: from 'ck/step-00000003' (step 3 of 10)");
  EXPECT_EQ(read("out.safetensors"), ref);
}

// Two runs on one --checkpoint-dir: the second is refused at start, naming
// the holder of ck/LOCK (here a child process holding it as a run does);
// once the holder is gone (killed: its flock died with it) a run proceeds.
TEST_F(CheckpointDriver, SecondRunOnTheDirIsRefusedAtStart) {
  LockHolder holder(path("ck"));
  const pid_t child = holder.pid();
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof host - 1), 0);
  Result r = train("--steps 4 --checkpoint-dir ck --checkpoint-every 2 "
                   "--resume");
  EXPECT_EQ(r.rc, 1) << r.out << r.err;
  EXPECT_CONTAINS(r.err, "error: --checkpoint-dir 'ck' is in use by another "
                         "run (pid " +
                             std::to_string(child) + " on host " + host +
                             " since ");
  EXPECT_CONTAINS(r.err, "wait for that one to finish, or pass another "
                         "--checkpoint-dir");
  EXPECT_EQ(r.out.find("step 1/4"), std::string::npos) << r.out;
  holder.release();
  r = train("--steps 4 --checkpoint-dir ck --checkpoint-every 2 --resume");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(spw::storage::list_checkpoints(path("ck")).size(), 2u);
}

// An out-of-memory right after the rename (or after the pruning) stops the
// run with a message that says the checkpoint is published, not that the
// old ones are untouched; the resume continues from it.
TEST_F(CheckpointDriver, OutOfMemoryAfterPublishingSaysSo) {
  const std::string ref = reference(10);
  Result r = train("--steps 10 --checkpoint-dir ck --checkpoint-every 3",
                   "SPILLWAY_TEST_CRASH_AT=renamed SPILLWAY_TEST_CRASH_STEP=6 "
                   "SPILLWAY_TEST_CRASH_HOW=bad_alloc");
  EXPECT_EQ(r.rc, 1) << r.out << r.err;
  EXPECT_CONTAINS(r.err, "error: the checkpoint of step 6 is published as "
                         "'ck/step-00000006' but 'ck' was not fsynced, so it "
                         "may not survive a power loss, and no older "
                         "checkpoint was pruned; then: out of memory "
                         "(--resume continues from 'ck/step-00000006')");
  EXPECT_EQ(r.err.find("untouched"), std::string::npos) << r.err;
  EXPECT_EQ(spw::storage::list_checkpoints(path("ck")).size(), 2u);
  // The published checkpoint holds the weights: no rescue copy of them.
  EXPECT_EQ(r.err.find("rescued"), std::string::npos) << r.err;

  r = train("--steps 10 --checkpoint-dir ck2 --checkpoint-every 3 "
            "--keep-checkpoints 1",
            "SPILLWAY_TEST_CRASH_AT=pruned SPILLWAY_TEST_CRASH_STEP=6 "
            "SPILLWAY_TEST_CRASH_HOW=bad_alloc");
  EXPECT_EQ(r.rc, 1) << r.out << r.err;
  EXPECT_CONTAINS(r.err, "error: the checkpoint of step 6 is published as "
                         "'ck2/step-00000006' and fsynced, and 1 older one "
                         "was pruned; then: out of memory");
  for (const char *ck : {"ck", "ck2"}) {
    r = train(std::string("--steps 10 --checkpoint-dir ") + ck +
              " --checkpoint-every 3 --resume --save out.safetensors");
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_CONTAINS(r.out, std::string("  resume: from '") + ck +
                               "/step-00000006' (step 6 of 10)");
    EXPECT_EQ(read("out.safetensors"), ref);
  }
}

// A checkpoint the resume skipped as invalid (a truncated data file, a
// chunk failing its checksum) takes no place among those kept: the next
// checkpoint prunes it, not the one the run resumed from.
TEST_F(CheckpointDriver, SkippedCheckpointsArePrunedNotTheResumedOne) {
  for (const char *damage : {"truncate", "flip"}) {
    SCOPED_TRACE(damage);
    fs::remove_all(path("ck"));
    ASSERT_EQ(train("--steps 4 --checkpoint-dir ck --checkpoint-every 2").rc,
              0);
    std::string bytes = read("ck/step-00000004/data");
    if (std::strcmp(damage, "truncate") == 0)
      bytes.resize(100);
    else
      bytes[10] ^= 1;
    write("ck/step-00000004/data", bytes);
    Result r = train("--steps 6 --checkpoint-dir ck --resume");
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_CONTAINS(r.err, "spillway: skipping checkpoint 'ck/step-00000004'");
    EXPECT_CONTAINS(r.out, "  resume: from 'ck/step-00000002' (step 2 of 6)");
    auto list = spw::storage::list_checkpoints(path("ck"));
    ASSERT_EQ(list.size(), 2u);
    EXPECT_EQ(list[0].first, 6);
    EXPECT_EQ(list[1].first, 2);
  }
}

// Something other than a directory named like a checkpoint stops the run
// (exit 1) naming it and saying what to do, not blaming the storage.
TEST_F(CheckpointDriver, NonDirectoryNamedLikeACheckpointIsNamed) {
  ASSERT_EQ(train("--steps 2 --checkpoint-dir ck").rc, 0);
  write("ck/step-00000009", "not a checkpoint");
  for (const char *resume : {" --resume", ""}) {
    Result r = train(std::string("--steps 4 --checkpoint-dir ck") + resume);
    EXPECT_EQ(r.rc, 1) << r.out << r.err;
    EXPECT_CONTAINS(r.err, "error: 'ck/step-00000009' is a regular file, not "
                           "a checkpoint directory; move it out of 'ck'");
    EXPECT_EQ(r.err.find("dmesg"), std::string::npos) << r.err;
    EXPECT_EQ(r.out.find("step 3/4"), std::string::npos) << r.out;
  }
  EXPECT_EQ(read("ck/step-00000009"), "not a checkpoint");
}

TEST_F(CheckpointDriver, AnotherModelsCheckpointIsRefused) {
  // The wide model names its parameters like the test model, with other
  // shapes.
  std::vector<float> w(1024 * 384 + 1024 + 1024 * 3 + 3, 0.01f);
  write("wide.weights",
        std::string(reinterpret_cast<char *>(w.data()), w.size() * 4));
  std::vector<float> x(8 * 384, 0.5f);
  write("wx.npy", spw::write_npy("<f4", {8, 384}, x.data(), x.size() * 4));
  std::vector<int64_t> y(8, 1);
  write("wy.npy", spw::write_npy("<i8", {8}, y.data(), 64));
  Result r = run("--input x=wx.npy --input y=wy.npy --weights wide.weights "
                 "--checkpoint-dir ck",
                 "", SPW_WIDE_MODEL_EXE);
  ASSERT_EQ(r.rc, 0) << r.err;
  r = train("--steps 2 --checkpoint-dir ck --resume");
  EXPECT_EQ(r.rc, 1);
  EXPECT_CONTAINS(r.err, "error: checkpoint 'ck/step-00000001': parameter "
                         "'fc1.weight' is f32 [1024,384], the model's is f32 "
                         "[5,3]; it was written for another model: pass "
                         "another --checkpoint-dir to train this one");
}

TEST_F(CheckpointDriver, UsageErrors) {
  auto expect_usage = [&](const std::string &args, const std::string &msg) {
    Result r = train(args);
    EXPECT_EQ(r.rc, 2) << args;
    EXPECT_CONTAINS(r.err, "error: " + msg);
  };
  expect_usage("--resume", "--resume needs --checkpoint-dir DIR");
  expect_usage("--checkpoint-every 2", "--checkpoint-every needs "
                                       "--checkpoint-dir DIR");
  expect_usage("--checkpoint-zstd", "--checkpoint-zstd needs "
                                    "--checkpoint-dir DIR");
  expect_usage("--keep-checkpoints 3", "--keep-checkpoints needs "
                                       "--checkpoint-dir DIR");
  expect_usage("--checkpoint-dir ck --checkpoint-every 0",
               "invalid value '0' for --checkpoint-every: expected an "
               "integer >= 1");
  expect_usage("--checkpoint-dir ck --keep-checkpoints 0",
               "invalid value '0' for --keep-checkpoints");
  expect_usage("--checkpoint-dir ck --resume=yes", "--resume takes no value");
  expect_usage("--checkpoint-dir=", "--checkpoint-dir needs a directory");
  expect_usage("--io-backend spdk", "invalid value 'spdk' for --io-backend: "
                                    "expected auto, io_uring or threads");
  expect_usage("--checkpoint-dir ck --check-gradients",
               "--check-gradients does not train");
  EXPECT_FALSE(fs::exists(path("ck")));

  Result fwd = run("--checkpoint-dir ck", "", SPW_FORWARD_MODEL_EXE);
  EXPECT_EQ(fwd.rc, 2);
  EXPECT_CONTAINS(fwd.err, "compiled with --forward: --checkpoint-dir is a "
                           "training flag");
  fwd = run("--checkpoint-dir ck --resume", "", SPW_FORWARD_MODEL_EXE);
  EXPECT_EQ(fwd.rc, 2);

  Result help = run("--help");
  EXPECT_EQ(help.rc, 0);
  for (const char *flag : {"--checkpoint-dir DIR", "--checkpoint-every N",
                           "--resume", "--keep-checkpoints K",
                           "--checkpoint-zstd", "--io-backend B"})
    EXPECT_CONTAINS(help.out, flag);
}

// kill -9 at random moments (seeded) of runs that checkpoint every step,
// each resumed by the next; the last run finishes, bit-identical to an
// uninterrupted one.
class RandomKills : public ExecutableTest {
protected:
  RandomKills() : ExecutableTest(SPW_WIDE_MODEL_EXE) {}
};

// Starts `exe args` in `dir` with stdout/stderr to files; returns its pid.
pid_t spawn(const fs::path &dir, const std::string &exe,
            const std::vector<std::string> &args) {
  pid_t pid = ::fork();
  if (pid != 0)
    return pid;
  if (::chdir(dir.c_str()) != 0)
    std::_Exit(126);
  int out = ::open("stdout.txt", O_WRONLY | O_CREAT | O_APPEND, 0644);
  int err = ::open("stderr.txt", O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (out < 0 || err < 0)
    std::_Exit(126);
  ::dup2(out, 1);
  ::dup2(err, 2);
  std::vector<char *> argv = {const_cast<char *>(exe.c_str())};
  for (const std::string &a : args)
    argv.push_back(const_cast<char *>(a.c_str()));
  argv.push_back(nullptr);
  ::execv(exe.c_str(), argv.data());
  std::_Exit(127);
}

TEST_F(RandomKills, ResumeAfterEachKillIsBitIdentical) {
  std::vector<float> w = randoms(1024 * 384 + 1024 + 1024 * 3 + 3, 7, -0.05f,
                                 0.05f);
  write("m.weights",
        std::string(reinterpret_cast<char *>(w.data()), w.size() * 4));
  std::vector<float> x = randoms(2 * 8 * 384, 8);
  write("x.npy", spw::write_npy("<f4", {2, 8, 384}, x.data(), x.size() * 4));
  std::vector<int64_t> y = {0, 1, 2, 0, 1, 2, 0, 1, 2, 2, 1, 0, 0, 1, 2, 1};
  write("y.npy", spw::write_npy("<i8", {2, 8}, y.data(), y.size() * 8));
  const std::string common = "--input x=x.npy --input y=y.npy --weights "
                             "m.weights --steps 16 --lr 0.01 ";
  Result r = run(common + "--save reference.safetensors");
  ASSERT_EQ(r.rc, 0) << r.err;

  // Time runs with checkpoints to pick kill moments inside one (the faster
  // of two: fsync latency varies).
  double run_ms = 1e9;
  for (const char *timing : {"t1", "t2"}) {
    const auto t0 = std::chrono::steady_clock::now();
    r = run(common + "--checkpoint-every 1 --checkpoint-dir " + timing);
    ASSERT_EQ(r.rc, 0) << r.err;
    run_ms = std::min(run_ms, std::chrono::duration<double, std::milli>(
                                  std::chrono::steady_clock::now() - t0)
                                  .count());
  }

  // Kill 5 runs, each resuming from what the previous one left, and more
  // (up to 40 runs in all) until at least one kill has landed inside a
  // checkpoint write: the killed run's tmp dir (.step-N.tmp-<pid>) is left
  // in ck. A run that finishes before its kill starts the series over (then
  // nothing would be left to interrupt).
  std::mt19937_64 rng(20261130);
  std::uniform_real_distribution<double> when(0.02, 0.15);
  const std::vector<std::string> args = {
      "--input", "x=x.npy", "--input", "y=y.npy", "--weights", "m.weights",
      "--steps", "16", "--lr", "0.01", "--checkpoint-dir", "ck",
      "--checkpoint-every", "1", "--resume"};
  int killed = 0, attempts = 0, torn = 0, in_write = 0;
  while (killed < 5 || in_write == 0) {
    ASSERT_LT(++attempts, 40) << "runs of " << run_ms << " ms; " << killed
                              << " kills, " << in_write
                              << " inside a checkpoint write";
    const double ms = when(rng) * run_ms;
    fs::remove(path("stderr.txt"));
    pid_t pid = spawn(dir, exe, args);
    ASSERT_GT(pid, 0);
    std::this_thread::sleep_for(std::chrono::microseconds(int64_t(ms * 1000)));
    ::kill(pid, SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    const std::string err = read("stderr.txt");
    ASSERT_EQ(err.find("error"), std::string::npos) << err;
    if (err.find("an unfinished checkpoint write") != std::string::npos)
      ++torn; // the previous kill hit a checkpoint write
    if (WIFSIGNALED(status)) {
      ++killed;
      const std::string tmp_tag = ".tmp-" + std::to_string(pid);
      std::error_code ec;
      for (fs::directory_iterator it(path("ck"), ec), end; !ec && it != end;
           it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (name.size() > tmp_tag.size() &&
            name.compare(name.size() - tmp_tag.size(), tmp_tag.size(),
                         tmp_tag) == 0)
          ++in_write;
      }
      continue;
    }
    ASSERT_EQ(WEXITSTATUS(status), 0) << err;
    fs::remove_all(path("ck"));
    killed = 0;
  }
  std::printf("%d kills in %d runs of up to %.0f ms, %d of them inside a "
              "checkpoint write; %d of the resumes found a torn checkpoint "
              "write\n",
              killed, attempts, run_ms, in_write, torn);
  EXPECT_GE(in_write, 1);
  r = run(common + "--checkpoint-dir ck --checkpoint-every 1 --resume --save "
                   "out.safetensors");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(read("out.safetensors"), read("reference.safetensors"));
  EXPECT_EQ(r.err.find("skipping checkpoint"), std::string::npos) << r.err;
}

} // namespace
