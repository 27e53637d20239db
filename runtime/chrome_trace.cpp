// The Chrome trace of the engine (chrome_trace.h).
#include "runtime/chrome_trace.h"

#include "pejit/error.h"

#include <cstdio>
#include <fstream>
#include <thread>

namespace pejit::runtime {

void ChromeTrace::add(const std::string& name, const char* cat, Clock::time_point a,
                      Clock::time_point b) {
  if (!on_)
    return;
  std::lock_guard<std::mutex> lock(mu_);
  auto tid = std::hash<std::thread::id>{}(std::this_thread::get_id());
  auto [it, fresh] = tids_.emplace(tid, static_cast<int>(tids_.size()) + 1);
  events_.push_back({name, cat, std::chrono::duration<double, std::micro>(a - t0_).count(),
                     std::chrono::duration<double, std::micro>(b - a).count(), it->second});
}

void ChromeTrace::write(const std::string& path) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    f << "{\"traceEvents\":[";
    bool first = true;
    for (const auto& [tid, n] : tids_) {
      f << (first ? "" : ",") << "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":" << n
        << ",\"args\":{\"name\":\"" << (n == 1 ? "training loop" : "thread") << " " << n << "\"}}";
      first = false;
    }
    for (const auto& e : events_) {
      f << (first ? "" : ",") << "{\"name\":\"" << e.name << "\",\"cat\":\"" << e.cat
        << "\",\"ph\":\"X\",\"ts\":" << e.ts << ",\"dur\":" << e.dur
        << ",\"pid\":1,\"tid\":" << e.tid << "}";
      first = false;
    }
    f << "]}\n";
    if (!f)
      throw Error("cannot write trace '" + path + "'");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw Error("cannot write trace '" + path + "'");
}

} // namespace pejit::runtime
