// What the CLI tests share: running the pejit binary with captured output and exit code, a
// per-process temporary directory, the JSON lines of --json output, the example model's path.
#pragma once

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace pejit::cli_test {

struct Run {
  int code = -1;
  std::string out, err;
};

// Runs the pejit binary with `args` (a shell-quoted string); captures stdout and stderr.
inline Run run_pejit(const std::string& args) {
  namespace fs = std::filesystem;
  static int n = 0;
  fs::path dir = fs::temp_directory_path() / ("pejit_cli_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::path err = dir / ("err" + std::to_string(n++));
  std::string cmd = std::string(PEJIT_BINARY_DIR "/pejit ") + args + " 2>" + err.string();
  Run r;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p);
  std::array<char, 4096> buf;
  size_t k;
  while ((k = fread(buf.data(), 1, buf.size(), p)) > 0)
    r.out.append(buf.data(), k);
  int st = pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  std::ifstream e(err);
  std::stringstream ss;
  ss << e.rdbuf();
  r.err = ss.str();
  return r;
}

inline std::string tmp(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("pejit_cli_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

inline std::vector<nlohmann::json> json_lines(const std::string& out) {
  std::vector<nlohmann::json> js;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty() && line[0] == '{')
      js.push_back(nlohmann::json::parse(line));
  return js;
}

inline const std::string kModel = PEJIT_SOURCE_DIR "/examples/treelstm/treelstm.pe";

} // namespace pejit::cli_test
