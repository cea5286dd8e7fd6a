// A main() for the fuzz targets without libFuzzer: runs
// LLVMFuzzerTestOneInput once on every file named on the command line (or
// found directly in a directory named there). The CMake and Bazel test
// builds use it to replay fuzz/corpus/<target>/ as a regression test with any
// compiler; the real fuzzing build (RELOCK_BUILD_FUZZERS) links libFuzzer's
// main instead.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    const fs::path arg(argv[i]);
    if (fs::is_directory(arg)) {
      for (const fs::directory_entry& e : fs::directory_iterator(arg)) {
        if (fs::is_regular_file(e.path())) files.push_back(e.path());
      }
    } else {
      files.push_back(arg);
    }
  }
  if (files.empty()) {
    fprintf(stderr, "usage: %s FILE_OR_DIR...\n", argv[0]);
    return 2;
  }
  for (const fs::path& file : files) {
    std::ifstream in(file, std::ios::binary);
    if (!in) {
      fprintf(stderr, "cannot read %s\n", file.c_str());
      return 1;
    }
    const std::string bytes((std::istreambuf_iterator<char>(in)),
                            std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()),
                           bytes.size());
  }
  printf("%zu inputs ran\n", files.size());
  return 0;
}
