// Schedule text, the tuned database's JSON (nlohmann-json) and the lookup every compile entry
// point shares. Loading checks everything it will later rely on, so that a bad file is one
// clear error at load time, never a failed compile later.
#include "jit/schedule.h"

#include "pejit/error.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

namespace pejit::jit {

namespace {

constexpr const char* kFormat = "pejit-schedules";
constexpr int kVersion = 1;

// Parses "<prefix>AxB" with positive A and B; false when `text` is not of that form.
bool parse_pair(const std::string& text, const char* prefix, int& a, int& b) {
  std::string p(prefix);
  if (text.rfind(p, 0) != 0)
    return false;
  std::string rest = text.substr(p.size());
  size_t x = rest.find('x');
  if (x == std::string::npos || x == 0 || x + 1 == rest.size() || rest.size() > 12)
    return false;
  // from_chars, not stoi: a number past int's range is text of the wrong form, not an
  // exception other than pejit::Error.
  const char* end = rest.data() + rest.size();
  auto [pa, ea] = std::from_chars(rest.data(), rest.data() + x, a);
  auto [pb, eb] = std::from_chars(rest.data() + x + 1, end, b);
  if (ea != std::errc() || pa != rest.data() + x || eb != std::errc() || pb != end)
    return false;
  return a > 0 && b > 0;
}

/// nlohmann's DOM builder, keeping where parsing failed: its message for a number beyond a
/// double's range (out_of_range 406), unlike its syntax errors', has no position.
class LocatingParser : public nlohmann::detail::json_sax_dom_parser<nlohmann::json> {
public:
  using json_sax_dom_parser::json_sax_dom_parser;
  template <class Exception>
  bool parse_error(std::size_t position_, const std::string& token_, const Exception& ex) {
    position = position_;
    token = token_;
    return json_sax_dom_parser::parse_error(position_, token_, ex);
  }
  size_t position = 0; ///< bytes read when it failed: the end of the offending token
  std::string token;
};

std::string family_of(const std::string& signature) {
  if (signature.rfind("ew ", 0) == 0)
    return "elementwise";
  if (signature.rfind("gemm ", 0) == 0)
    return "gemm";
  return "";
}

// Throws when `schedule` is not valid text for `family`.
void check_schedule(const std::string& family, const std::string& schedule) {
  if (family == "elementwise") {
    (void)parse_elementwise_schedule(schedule);
  } else if (family == "gemm") {
    int mr = 0, nr = 0;
    parse_gemm_schedule(schedule, mr, nr);
  } else {
    throw Error(fmt::format("unknown kernel family '{}' (elementwise or gemm)", family));
  }
}

} // namespace

ElementwiseSchedule parse_elementwise_schedule(const std::string& text) {
  if (text == "default")
    return {};
  ElementwiseSchedule s;
  bool ok = parse_pair(text, "v", s.vector_width, s.interleave) && s.vector_width <= 64 &&
            (s.vector_width & (s.vector_width - 1)) == 0 && s.interleave <= 16;
  if (!ok)
    throw Error(fmt::format("elementwise schedule '{}' is not 'default' or 'vWxU' (W a power of "
                            "two in 1..64, U in 1..16)",
                            text));
  return s;
}

std::string elementwise_schedule_text(const ElementwiseSchedule& s) {
  return s.is_default() ? "default" : fmt::format("v{}x{}", s.vector_width, s.interleave);
}

void parse_gemm_schedule(const std::string& text, int& mr, int& nr) {
  if (text == "default") {
    mr = nr = 0;
    return;
  }
  if (!parse_pair(text, "", mr, nr) || mr > 32 || nr > 32 || mr * nr > 28)
    throw Error(fmt::format("gemm schedule '{}' is not 'default' or a block 'MxN' (M, N in "
                            "1..32, M*N <= 28)",
                            text));
}

ScheduleDB ScheduleDB::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Error(fmt::format("tuned schedule database '{}': cannot read the file", path));
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  nlohmann::json j;
  LocatingParser sax(j);
  try {
    nlohmann::json::sax_parse(text, &sax);
  } catch (const nlohmann::json::parse_error& e) {
    // Its message says "at line L, column C".
    throw Error(fmt::format("tuned schedule database '{}': not valid JSON: {}", path, e.what()));
  } catch (const nlohmann::json::exception& e) {
    // A number beyond a double's range: nlohmann's message has no position.
    size_t at = std::min(sax.position, text.size()) - std::min(sax.position, sax.token.size());
    size_t nl = at == 0 ? std::string::npos : text.rfind('\n', at - 1);
    size_t line = 1 + static_cast<size_t>(std::count(text.begin(), text.begin() + at, '\n'));
    size_t col = nl == std::string::npos ? at + 1 : at - nl;
    throw Error(fmt::format("tuned schedule database '{}': not valid JSON: number '{}' out of "
                            "range at line {}, column {}",
                            path, sax.token.substr(0, 40), line, col));
  }
  auto fail = [&](const std::string& why) {
    throw Error(fmt::format("tuned schedule database '{}': {}", path, why));
  };
  if (!j.is_object() || !j.contains("format") || j["format"] != kFormat)
    fail(fmt::format("not a pejit schedule database (\"format\" must be \"{}\")", kFormat));
  if (!j.contains("version") || !j["version"].is_number_integer() || j["version"] != kVersion)
    fail(fmt::format("unsupported version {} (this pejit reads version {})",
                     !j.contains("version") ? "(none)"
                     : j["version"].is_primitive()
                         ? j["version"].dump()
                         : std::string("(an ") + j["version"].type_name() + ")",
                     kVersion));
  if (!j.contains("entries") || !j["entries"].is_array())
    fail("\"entries\" must be an array");
  ScheduleDB db(path);
  std::set<std::pair<std::string, std::string>> seen;
  const auto& es = j["entries"];
  for (size_t i = 0; i < es.size(); ++i) {
    const auto& ej = es[i];
    std::string sig = ej.is_object() && ej.contains("signature") && ej["signature"].is_string()
                          ? ej["signature"].get<std::string>()
                          : std::string();
    auto bad = [&](const std::string& why) {
      fail(fmt::format("entry {}{}: {}", i, sig.empty() ? "" : " (" + sig + ")", why));
    };
    if (!ej.is_object())
      bad("not an object");
    for (const char* field : {"signature", "cpu", "family", "schedule"})
      if (!ej.contains(field) || !ej[field].is_string() || ej[field].get<std::string>().empty())
        bad(fmt::format("\"{}\" must be a non-empty string", field));
    ScheduleEntry e;
    e.signature = sig;
    e.cpu = ej["cpu"].get<std::string>();
    e.family = ej["family"].get<std::string>();
    e.schedule = ej["schedule"].get<std::string>();
    if (family_of(e.signature) != e.family)
      bad(fmt::format("family '{}' does not match the signature (\"ew ...\": elementwise, "
                      "\"gemm ...\": gemm)",
                      e.family));
    try {
      check_schedule(e.family, e.schedule);
    } catch (const Error& err) {
      bad(err.what());
    }
    if (ej.contains("measured")) {
      // Checked by kind and range before conversion: nlohmann converts a float to an int, or
      // a huge unsigned to a signed, with a plain cast (undefined or wrapped), and a time that
      // is not finite would be saved as null, which this reader then refuses.
      const auto& m = ej["measured"];
      if (!m.is_object())
        bad("\"measured\" must be an object");
      auto count = [&](const nlohmann::json& v, const char* what, int64_t hi) {
        if (!v.is_number_integer() ||
            (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(hi)) || v.get<int64_t>() < 0 ||
            v.get<int64_t>() > hi)
          bad(fmt::format("\"measured\": {} must be an integer in [0, {}]", what, hi));
        return v.get<int64_t>();
      };
      auto time = [&](const char* key) {
        if (!m.contains(key))
          return 0.0;
        const auto& v = m[key];
        if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0)
          bad(fmt::format("\"measured\": \"{}\" must be a non-negative number", key));
        return v.get<double>();
      };
      if (m.contains("rows")) {
        if (!m["rows"].is_array())
          bad("\"measured\": \"rows\" must be an array of row counts");
        for (const auto& r : m["rows"])
          e.rows.push_back(count(r, "a row count", std::numeric_limits<int64_t>::max()));
      }
      e.default_us = time("default_us");
      e.best_us = time("best_us");
      if (m.contains("candidates"))
        e.candidates = static_cast<int>(
            count(m["candidates"], "\"candidates\"", std::numeric_limits<int>::max()));
    }
    if (!seen.insert({e.signature, e.cpu}).second)
      bad(fmt::format("a second entry for CPU '{}'", e.cpu));
    db.entries_.push_back(std::move(e));
  }
  return db;
}

void ScheduleDB::save(const std::string& path) const {
  std::vector<ScheduleEntry> sorted = entries_;
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    return std::tie(a.signature, a.cpu) < std::tie(b.signature, b.cpu);
  });
  nlohmann::ordered_json j;
  j["format"] = kFormat;
  j["version"] = kVersion;
  j["entries"] = nlohmann::ordered_json::array();
  for (const auto& e : sorted) {
    nlohmann::ordered_json ej;
    ej["signature"] = e.signature;
    ej["cpu"] = e.cpu;
    ej["family"] = e.family;
    ej["schedule"] = e.schedule;
    ej["measured"] = {{"rows", e.rows},
                      {"default_us", e.default_us},
                      {"best_us", e.best_us},
                      {"candidates", e.candidates}};
    j["entries"].push_back(std::move(ej));
  }
  std::string text = j.dump(2) + "\n";
  std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  bool ok = f != nullptr && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (f != nullptr)
    ok = std::fclose(f) == 0 && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw Error(fmt::format("tuned schedule database '{}': cannot write the file", path));
  }
}

const ScheduleEntry* ScheduleDB::find(const std::string& signature, const std::string& cpu,
                                      size_t* index) const {
  for (size_t i = 0; i < entries_.size(); ++i)
    if (entries_[i].signature == signature && entries_[i].cpu == cpu) {
      if (index != nullptr)
        *index = i;
      return &entries_[i];
    }
  return nullptr;
}

void ScheduleDB::put(ScheduleEntry e) {
  e.family = family_of(e.signature);
  check_schedule(e.family, e.schedule);
  for (auto& old : entries_)
    if (old.signature == e.signature && old.cpu == e.cpu) {
      old = std::move(e);
      return;
    }
  entries_.push_back(std::move(e));
}

std::string ScheduleDB::cpu_warning(const std::string& cpu) const {
  std::set<std::string> cpus;
  for (const auto& e : entries_)
    cpus.insert(e.cpu);
  if (cpus.count(cpu) != 0)
    return "";
  std::string held;
  for (const auto& c : cpus)
    held += (held.empty() ? "" : ", ") + c;
  return fmt::format("tuned schedule database '{}' has no entry for this CPU ({}){}; every "
                     "kernel gets its default schedule",
                     path_, cpu,
                     held.empty() ? " (it is empty)" : " (it was tuned on " + held + ")");
}

std::string tuned_source(const ScheduleDB& db, size_t index) {
  return fmt::format("tuned {} entry {}", db.path(), index);
}

namespace {

// The lookup both families share: a spec that names its schedule keeps it ("given"); else this
// CPU's database entry applies (`apply` writes it into the spec); else the default.
template <class Spec, class Apply>
Spec resolve(const Spec& spec, bool given, const ScheduleDB* db, const std::string& cpu,
             std::string& source, Apply apply) {
  if (given) {
    source = "given";
    return spec;
  }
  size_t index = 0;
  const ScheduleEntry* e = db != nullptr ? db->find(spec.signature(), cpu, &index) : nullptr;
  if (e == nullptr) {
    source = "default";
    return spec;
  }
  Spec s = spec;
  apply(s, e->schedule);
  source = tuned_source(*db, index);
  return s;
}

} // namespace

KernelSpec resolve_schedule(const KernelSpec& spec, const ScheduleDB* db, const std::string& cpu,
                            std::string& source) {
  return resolve(spec, spec.schedule != "default", db, cpu, source,
                 [](KernelSpec& s, const std::string& schedule) { s.schedule = schedule; });
}

GemmSpec resolve_schedule(const GemmSpec& spec, const ScheduleDB* db, const std::string& cpu,
                          std::string& source) {
  return resolve(
      spec, spec.mr != 0 || spec.nr != 0, db, cpu, source,
      [](GemmSpec& s, const std::string& schedule) { parse_gemm_schedule(schedule, s.mr, s.nr); });
}

} // namespace pejit::jit
