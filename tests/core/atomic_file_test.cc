#include "core/atomic_file.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <thread>
#include <stdexcept>

#include "core/error.h"
#include "testing/scratch_dir.h"

namespace px {
namespace {

namespace fs = std::filesystem;
using testing::list_dir;
using testing::read_file;
using testing::ScratchDir;
using testing::write_file;

TEST(AtomicFile, CreatesThenReplacesAFileLeavingNoTemporaries) {
  ScratchDir dir;
  const std::string path = dir.file("ckpt.bin");
  write_file_atomically(path, "first");
  EXPECT_EQ(read_file(path), "first");
  write_file_atomically(path, [](FileSink& sink) {
    sink.write("sec");
    sink.write("ond", 3);
    EXPECT_EQ(sink.bytes_written(), 6u);
  });
  EXPECT_EQ(read_file(path), "second");
  EXPECT_EQ(list_dir(dir.path()), std::vector<std::string>{"ckpt.bin"});
}

TEST(AtomicFile, WriterThrowingMidwayLeavesTheOldFileIntact) {
  ScratchDir dir;
  const std::string path = dir.file("ckpt.bin");
  write_file(path, "old good checkpoint");
  EXPECT_THROW(write_file_atomically(path,
                                     [](FileSink& sink) {
                                       sink.write(std::string(100000, 'x'));
                                       throw std::runtime_error("disk on fire");
                                     }),
               std::runtime_error);
  EXPECT_EQ(read_file(path), "old good checkpoint");
  EXPECT_EQ(list_dir(dir.path()), std::vector<std::string>{"ckpt.bin"});
}

TEST(AtomicFile, MissingDirectoriesAreMadeAndAFileInTheWayIsAnErrorNamingThePath) {
  ScratchDir dir;
  write_file_atomically(dir.file("no/such/dir/ckpt.bin"), "x");
  EXPECT_EQ(read_file(dir.file("no/such/dir/ckpt.bin")), "x");
  write_directory_atomically(dir.file("new/parent/ckpt"),
                             [](const std::string& staging) { write_file_atomically(staging + "/model", "m"); });
  EXPECT_EQ(read_file(dir.file("new/parent/ckpt/model")), "m");
  write_file(dir.file("file"), "not a directory");
  const std::string path = dir.file("file/dir/ckpt.bin");
  try {
    write_file_atomically(path, "x");
    ADD_FAILURE() << "expected px::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

TEST(AtomicFile, FailedRenameLeavesTargetAndRemovesTemporary) {
  ScratchDir dir;
  const std::string path = dir.file("target");
  fs::create_directory(path);  // rename(2) of a file over a directory fails
  write_file(path + "/keep", "kept");
  try {
    write_file_atomically(path, "new");
    ADD_FAILURE() << "expected px::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("renaming"), std::string::npos) << e.what();
  }
  EXPECT_EQ(read_file(path + "/keep"), "kept");
  EXPECT_EQ(list_dir(dir.path()), std::vector<std::string>{"target"});
}

TEST(AtomicDirectory, CreatesThenReplacesWholeDirectory) {
  ScratchDir dir;
  const std::string ckpt = dir.file("ckpt");
  write_directory_atomically(ckpt, [](const std::string& staging) {
    EXPECT_TRUE(fs::is_directory(staging));
    EXPECT_TRUE(fs::is_empty(staging));
    write_file(staging + "/model", "m1");
    write_file(staging + "/optimizer", "o1");
  });
  EXPECT_EQ(list_dir(ckpt), (std::vector<std::string>{"model", "optimizer"}));
  write_directory_atomically(ckpt + "/", [](const std::string& staging) {
    write_file_atomically(staging + "/model", "m2");
    fs::create_directory(staging + "/shards");
    write_file(staging + "/shards/0", "s0");
  });
  EXPECT_EQ(list_dir(ckpt), (std::vector<std::string>{"model", "shards"}));
  EXPECT_EQ(read_file(ckpt + "/model"), "m2");
  EXPECT_EQ(read_file(ckpt + "/shards/0"), "s0");
  EXPECT_EQ(list_dir(dir.path()), std::vector<std::string>{"ckpt"});  // no staging left
}

TEST(AtomicDirectory, WriterThrowingMidwayKeepsThePreviousCheckpoint) {
  ScratchDir dir;
  const std::string ckpt = dir.file("ckpt");
  write_directory_atomically(
      ckpt, [](const std::string& staging) { write_file(staging + "/model", "good"); });
  EXPECT_THROW(write_directory_atomically(ckpt,
                                          [](const std::string& staging) {
                                            write_file(staging + "/model", "half");
                                            fail("simulated failure after {} file", 1);
                                          }),
               Error);
  EXPECT_EQ(list_dir(ckpt), std::vector<std::string>{"model"});
  EXPECT_EQ(read_file(ckpt + "/model"), "good");
  EXPECT_EQ(list_dir(dir.path()), std::vector<std::string>{"ckpt"});
}

// A checkpoint directory may be a run's directory too: what the writer
// does not own survives every swap, a file held open keeps growing at its
// path, and a kept previous checkpoint does not take a copy.
TEST(AtomicDirectory, EntriesTheWriterDoesNotOwnSurviveTheSwapAndStayOpen) {
  ScratchDir dir;
  const std::string ckpt = dir.file("ckpt");
  const auto owned = [](const std::string& name) { return name == "model" || name == "shards"; };
  const StagedDirectory::CarryOver foreign = [&](const std::string& name) { return !owned(name); };
  {
    StagedDirectory first(ckpt, 1);
    write_file(first.path() + "/model", "m1");
    first.commit("", foreign);
  }
  std::ofstream metrics(ckpt + "/metrics.jsonl");
  metrics << "line 1\n" << std::flush;
  fs::create_directories(ckpt + "/flight/deep");
  write_file(ckpt + "/flight/deep/rank0", "f0");
  write_file(ckpt + "/shards", "an owned name: replaced");
  {
    StagedDirectory second(ckpt, 2);
    write_file(second.path() + "/model", "m2");
    second.commit(dir.file("ckpt.kept"), foreign);
  }
  metrics << "line 2\n" << std::flush;  // through the descriptor opened before the swap
  EXPECT_EQ(list_dir(ckpt), (std::vector<std::string>{"flight", "metrics.jsonl", "model"}));
  EXPECT_EQ(read_file(ckpt + "/model"), "m2");
  EXPECT_EQ(read_file(ckpt + "/metrics.jsonl"), "line 1\nline 2\n");
  EXPECT_EQ(read_file(ckpt + "/flight/deep/rank0"), "f0");
  EXPECT_EQ(list_dir(dir.file("ckpt.kept")), (std::vector<std::string>{"model", "shards"}));
  EXPECT_EQ(list_dir(dir.path()), (std::vector<std::string>{"ckpt", "ckpt.kept"}));
}

// Files another writer puts in the directory while checkpoints replace it
// (a run's trace written at its end, as the final save commits) all
// survive: one landing between a commit's links and its swap once went
// with the previous contents (1 run in 10 of tests/cli/output_paths_test.sh).
TEST(AtomicDirectory, FilesWrittenWhileCommitsRunAllSurvive) {
  ScratchDir dir;
  const std::string ckpt = dir.file("ckpt");
  const StagedDirectory::CarryOver foreign = [](const std::string& name) { return name != "model"; };
  write_directory_atomically(ckpt, [](const std::string& staging) { write_file(staging + "/model", "m0"); });
  constexpr int kFiles = 100;
  std::vector<std::string> errors;  // the writer's
  {
    std::jthread writer([&] {
      for (int i = 0; i < kFiles; ++i) {
        try {
          write_file_atomically(fmt::format("{}/f{}", ckpt, i), "x");
        } catch (const Error& e) {
          errors.push_back(e.what());
        }
      }
    });
    for (long c = 1; c <= 100; ++c) {
      StagedDirectory staged(ckpt, c);
      write_file(staged.path() + "/model", "m");
      staged.commit("", foreign);
    }
  }
  EXPECT_TRUE(errors.empty()) << errors.size() << " writes failed, the first: " << errors.front();
  std::vector<std::string> missing;
  for (int i = 0; i < kFiles; ++i)
    if (!fs::exists(fmt::format("{}/f{}", ckpt, i))) missing.push_back(fmt::format("f{}", i));
  EXPECT_TRUE(missing.empty()) << missing.size() << " files lost, the first " << missing.front();
}

// Missing parents are made (AtomicFile.MissingDirectories...); a file where
// a parent directory should be is an error naming the path, and the
// writer is never called.
TEST(AtomicDirectory, AFileInTheWayOfTheParentIsAnErrorNamingThePath) {
  ScratchDir dir;
  write_file(dir.file("file"), "not a directory");
  const std::string ckpt = dir.file("file/ckpt");
  bool called = false;
  try {
    write_directory_atomically(ckpt, [&](const std::string&) { called = true; });
    ADD_FAILURE() << "expected px::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(ckpt), std::string::npos) << e.what();
  }
  EXPECT_FALSE(called);
}

}  // namespace
}  // namespace px
