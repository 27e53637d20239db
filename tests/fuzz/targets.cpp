// The fuzz targets: seeds, dictionaries and the promises checked on every input. A reader that
// returns must have read what the input says (a tree round-trips, a sentence splits as the
// format says, a checkpoint whose header is a seed's holds the seed's bits, a schedule
// database saves and reloads to itself); a reader that throws must throw pejit::Error located
// as its header promises. Inputs go to a memfd (a file in memory) for the readers of files.
#include "tests/fuzz/targets.h"

#include "jit/schedule.h"
#include "pejit/error.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/data/synthetic.h"
#include "runtime/data/tree_io.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sys/mman.h>
#include <tuple>
#include <typeinfo>
#include <unistd.h>

namespace pejit::fuzz {

namespace {

namespace fs = std::filesystem;

/// A private directory for the seeds' files and round trips, removed at exit.
class WorkDir {
public:
  WorkDir() {
    dir_ = fs::temp_directory_path() / ("pejit_fuzz_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  ~WorkDir() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }

private:
  fs::path dir_;
};

const WorkDir& work_dir() {
  static WorkDir d;
  return d;
}

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

/// The file a reader of files is given: a memfd when the kernel has them (no disk I/O per
/// case), else a file in the work directory.
class Scratch {
public:
  explicit Scratch(const char* name) {
    fd_ = ::memfd_create(name, MFD_CLOEXEC);
    path_ = fd_ >= 0 ? "/proc/self/fd/" + std::to_string(fd_) : work_dir().file(name);
  }
  ~Scratch() {
    if (fd_ >= 0)
      ::close(fd_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  /// Makes the file hold exactly `bytes`; returns its path.
  const std::string& write(std::string_view bytes) {
    if (fd_ < 0) {
      std::ofstream f(path_, std::ios::binary | std::ios::trunc);
      f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
      return path_;
    }
    if (::ftruncate(fd_, 0) != 0)
      throw std::runtime_error("fuzz: ftruncate of the scratch memfd failed");
    size_t done = 0;
    while (done < bytes.size()) {
      ssize_t k = ::pwrite(fd_, bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
      if (k <= 0)
        throw std::runtime_error("fuzz: write to the scratch memfd failed");
      done += static_cast<size_t>(k);
    }
    return path_;
  }

private:
  int fd_ = -1;
  std::string path_;
};

// ---- text readers ---------------------------------------------------------------------------

/// `o` with `why` as its violation.
Outcome broken(Outcome o, std::string why) {
  o.violation = std::move(why);
  return o;
}

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

/// The lines of `text` as the readers number them: split at '\n', no line after a final '\n'.
std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = std::min(text.find('\n', start), text.size());
    out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

/// The text the readers split into lines: a UTF-8 byte order mark at the start is not data.
std::string_view without_bom(std::string_view text) {
  return text.substr(0, 3) == "\xef\xbb\xbf" ? text.substr(3) : text;
}

bool blank(std::string_view line) {
  return std::all_of(line.begin(), line.end(), is_space);
}

/// "" when the first line of `msg` is "NAME:LINE:COL: error: ..." with LINE a line of `text`
/// and COL in it (or just past its end, where a missing ')' is reported); else what is wrong.
std::string check_located(const std::string& msg, const std::string& name, std::string_view text) {
  std::string first = msg.substr(0, msg.find('\n'));
  std::string bad =
      "message '" + first.substr(0, 200) + "' is not located as " + name + ":LINE:COL: error: ...";
  if (first.compare(0, name.size() + 1, name + ":") != 0)
    return bad;
  size_t i = name.size() + 1;
  auto number = [&](uint64_t& v) {
    size_t s = i;
    v = 0;
    while (i < first.size() && first[i] >= '0' && first[i] <= '9' && i - s < 12)
      v = v * 10 + static_cast<uint64_t>(first[i++] - '0');
    return i > s;
  };
  uint64_t line = 0, col = 0;
  if (!number(line) || first.compare(i, 1, ":") != 0 || (++i, !number(col)) ||
      first.compare(i, 9, ": error: ") != 0)
    return bad;
  auto lines = lines_of(text);
  if (line < 1 || line > lines.size())
    return bad + " (line " + std::to_string(line) + " of " + std::to_string(lines.size()) + ")";
  if (col < 1 || col > lines[line - 1].size() + 1)
    return bad + " (column " + std::to_string(col) + " of a line of " +
           std::to_string(lines[line - 1].size()) + " bytes)";
  return "";
}

Outcome run_trees(std::string_view in) {
  static const std::string kName = "fuzz-trees.txt";
  Outcome o;
  data::Vocab vocab;
  std::vector<data::ParseTree> trees;
  try {
    trees = data::parse_trees(in, kName, vocab);
  } catch (const Error& e) {
    o.violation = check_located(e.what(), kName, in);
    return o;
  }
  o.accepted = true;
  size_t expected = 0, expected_bom = 0; // a leading byte order mark: data, or skipped
  for (auto line : lines_of(in))
    expected += !blank(line);
  for (auto line : lines_of(without_bom(in)))
    expected_bom += !blank(line);
  if (trees.size() != expected && trees.size() != expected_bom)
    return broken(o, std::to_string(trees.size()) + " trees from " + std::to_string(expected) +
                         " non-blank lines");
  data::Vocab frozen = vocab;
  for (size_t i = 0; i < trees.size(); ++i) {
    const data::ParseTree& t = trees[i];
    std::string at = "tree " + std::to_string(i) + ": ";
    if (t.nodes.empty() || t.tokens.size() != t.nodes.size())
      return broken(o, at + "empty, or tokens and nodes differ in number");
    for (size_t k = 0; k < t.nodes.size(); ++k) {
      const auto& n = t.nodes[k];
      for (int32_t c : n.children)
        if (c < 0 || static_cast<size_t>(c) >= k)
          return broken(o, at + "a child not before its parent");
      bool leaf = n.children.empty();
      if (leaf ? t.tokens[k].empty() || n.word != vocab.lookup(t.tokens[k])
               : !t.tokens[k].empty() || n.word != -1)
        return broken(o, at + "node " + std::to_string(k) + " has a wrong token or word id");
    }
    // What was read writes back, and reads again to the same tree.
    std::string line = data::write_tree(t);
    auto back = data::parse_trees(line, kName, frozen, {.grow_vocab = false});
    if (back.size() != 1 || !(back[0] == t))
      return broken(o, at + "does not round-trip through write_tree: " + line.substr(0, 200));
  }
  return o;
}

Outcome run_sentences(std::string_view in) {
  static Scratch scratch("pejit-fuzz-sentences");
  const std::string& path = scratch.write(in);
  Outcome o;
  data::Vocab vocab;
  std::vector<std::vector<int32_t>> got;
  try {
    got = data::read_sentences(path, vocab);
  } catch (const Error& e) {
    o.violation = check_located(e.what(), path, in);
    return o;
  }
  o.accepted = true;
  // The format: a sentence per non-blank line, tokens split at blanks; a byte order mark at
  // the start of the file is read as data or skipped, either is the format.
  auto split = [](std::string_view text) {
    std::vector<std::vector<std::string_view>> out;
    for (auto line : lines_of(text)) {
      std::vector<std::string_view> words;
      for (size_t i = 0; i < line.size();) {
        while (i < line.size() && is_space(line[i]))
          ++i;
        size_t s = i;
        while (i < line.size() && !is_space(line[i]))
          ++i;
        if (i > s)
          words.push_back(line.substr(s, i - s));
      }
      if (!words.empty())
        out.push_back(std::move(words));
    }
    return out;
  };
  auto same = [&](const std::vector<std::vector<std::string_view>>& expected) {
    if (got.size() != expected.size())
      return false;
    for (size_t i = 0; i < got.size(); ++i) {
      if (got[i].size() != expected[i].size())
        return false;
      for (size_t k = 0; k < got[i].size(); ++k)
        if (got[i][k] < 0 || static_cast<size_t>(got[i][k]) >= vocab.size() ||
            vocab.word(got[i][k]) != expected[i][k])
          return false;
    }
    return true;
  };
  if (!same(split(in)) && !same(split(without_bom(in))))
    return broken(o, std::to_string(got.size()) + " sentences that are not the lines' words (" +
                         std::to_string(split(in).size()) + " non-blank lines)");
  return o;
}

// ---- checkpoints ----------------------------------------------------------------------------

struct CheckpointSeed {
  std::string bytes, header;
  checkpoint::Checkpoint ck;
  bool checksummed; ///< written by pejit: every tensor's bytes are checked on load
};

Tensor ramp(const Shape& s, float start) {
  Tensor t = Tensor::empty(DType::F32, s);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.f32()[i] = start + 0.25f * static_cast<float>(i);
  return t;
}

const std::vector<CheckpointSeed>& checkpoint_seeds() {
  static const std::vector<CheckpointSeed> seeds = [] {
    std::vector<checkpoint::Checkpoint> cks(3);
    cks[0].params.names = {"emb", "W", "b"};
    cks[0].params.values = {ramp(Shape{4, 3}, -1.0f), ramp(Shape{3, 5}, 0.5f), ramp(Shape{5}, 2)};
    cks[0].vocab = {"<unk>", "the", "caf\xc3\xa9", "a\"b"};
    cks[0].optimizer_state = {{"adagrad.emb", ramp(Shape{4, 3}, 0.0f)},
                              {"steps", ramp(Shape{1}, 7.0f)}};
    cks[0].meta = {{"model", "examples/treelstm/treelstm.pe"}, {"epoch", "2"}};
    cks[1].params.names = {"scalar", "empty", "t3"};
    cks[1].params.values = {Tensor::scalar_f32(-0.0f), Tensor::zeros(DType::F32, Shape{0, 4}),
                            ramp(Shape{2, 1, 3}, 1e-3f)};
    cks[1].vocab = {"<unk>"};
    // cks[2]: no parameters at all.
    std::vector<CheckpointSeed> out;
    for (size_t i = 0; i < cks.size(); ++i) {
      std::string path = work_dir().file("seed" + std::to_string(i) + ".ckpt");
      checkpoint::save(path, cks[i]);
      std::string bytes = read_bytes(path);
      std::string header = bytes.substr(0, bytes.find('\n'));
      out.push_back({std::move(bytes), std::move(header), std::move(cks[i]), true});
    }
    // The PyTorch peer's layout: no checksums, no optional fields.
    std::string header = R"({"format":"pejit-checkpoint","version":1,"params":[)"
                         R"({"name":"a","dtype":"f32","shape":[2,2],"offset":0},)"
                         R"({"name":"b","dtype":"f32","shape":[3],"offset":64}],)"
                         R"("vocab":["<unk>","x"],"data_bytes":128})";
    std::string blob(128, '\0');
    const float a[4] = {1, 2, 3, 4}, b[3] = {-1, 0.5f, 8};
    std::memcpy(blob.data(), a, sizeof a);
    std::memcpy(blob.data() + 64, b, sizeof b);
    checkpoint::Checkpoint peer;
    out.push_back({header + "\n" + blob, header, std::move(peer), false});
    return out;
  }();
  return seeds;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.defined() && b.defined() && a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

/// "" when `got` holds exactly what `want` holds.
std::string diff(const checkpoint::Checkpoint& got, const checkpoint::Checkpoint& want) {
  if (got.params.names != want.params.names || got.vocab != want.vocab || got.meta != want.meta ||
      got.optimizer_state.size() != want.optimizer_state.size())
    return "names, vocabulary or metadata differ";
  for (size_t i = 0; i < got.params.values.size(); ++i)
    if (!same_bits(got.params.values[i], want.params.values[i]))
      return "parameter '" + got.params.names[i] + "' differs";
  for (size_t i = 0; i < got.optimizer_state.size(); ++i)
    if (got.optimizer_state[i].first != want.optimizer_state[i].first ||
        !same_bits(got.optimizer_state[i].second, want.optimizer_state[i].second))
      return "optimizer state '" + got.optimizer_state[i].first + "' differs";
  return "";
}

Outcome run_checkpoint(std::string_view in) {
  static Scratch scratch("pejit-fuzz-checkpoint");
  const std::string& path = scratch.write(in);
  const std::string prefix = "checkpoint '" + path + "': ";
  // A seed whose header this input keeps: then only its data can differ.
  const CheckpointSeed* same_header = nullptr;
  if (size_t nl = in.find('\n'); nl != std::string_view::npos)
    for (const auto& s : checkpoint_seeds())
      if (s.checksummed && in.substr(0, nl) == s.header)
        same_header = &s;
  Outcome o;
  checkpoint::Checkpoint ck;
  try {
    ck = checkpoint::load(path);
  } catch (const Error& e) {
    std::string msg = e.what();
    if (msg.compare(0, prefix.size(), prefix) != 0)
      return broken(o, "message '" + msg.substr(0, 200) + "' does not start with " + prefix);
    if (same_header != nullptr && msg.find("truncated") == std::string::npos) {
      // Damage inside the data: the message names the tensor.
      bool named = false;
      for (const auto& n : same_header->ck.params.names)
        named |= msg.find("params '" + n + "'") != std::string::npos;
      for (const auto& [n, t] : same_header->ck.optimizer_state)
        named |= msg.find("optimizer_state '" + n + "'") != std::string::npos;
      if (!named)
        o.violation = "damaged data, and the message '" + msg.substr(0, 200) + "' names no tensor";
    }
    return o;
  }
  o.accepted = true;
  if (ck.params.names.size() != ck.params.values.size())
    return broken(o, "as many parameter names as values");
  for (size_t i = 0; i < ck.params.values.size(); ++i) {
    const Tensor& t = ck.params.values[i];
    if (!t.defined() || t.dtype() != DType::F32)
      return broken(o, "parameter '" + ck.params.names[i] + "' is not an f32 tensor");
    for (int64_t k = 0; k < t.numel(); ++k)
      if (!std::isfinite(t.f32()[k]))
        return broken(o, "parameter '" + ck.params.names[i] + "' loaded a non-finite value");
  }
  // A pejit file's tensors are checksummed: bytes changed behind an intact header never load.
  if (same_header != nullptr)
    if (std::string d = diff(ck, same_header->ck); !d.empty())
      o.violation = "loaded with its seed's header but not its seed's content: " + d;
  return o;
}

// ---- schedule databases ---------------------------------------------------------------------

const std::vector<std::string>& schedule_seeds() {
  static const std::vector<std::string> seeds = [] {
    std::vector<std::string> out;
    jit::ScheduleDB db;
    auto put = [&](std::string sig, std::string cpu, std::string schedule) {
      jit::ScheduleEntry e;
      e.signature = std::move(sig);
      e.cpu = std::move(cpu);
      e.schedule = std::move(schedule);
      e.rows = {16, 128, 512};
      e.default_us = 3.25;
      e.best_us = 2.5;
      e.candidates = 8;
      db.put(std::move(e));
    };
    std::string path = work_dir().file("seed.json");
    db.save(path);
    out.push_back(read_bytes(path)); // empty
    put("ew f32 w=150 in=F,F ops=mul(0,1) out=2", "sapphirerapids", "v16x2");
    put("ew f32 w=150 in=F,F ops=mul(0,1) out=2", "znver4", "default");
    put("gemm NN m=? n=450 k=300", "sapphirerapids", "8x3");
    put("gemm TN m=? n=150 k=150", "sapphirerapids", "default");
    put("ew f32 w=7 in=F ops=tanh(0) out=1", "x86-64", "v1x1");
    db.save(path);
    out.push_back(read_bytes(path));
    // A hand-written one, as a person might edit it: no "measured", other spacing.
    out.push_back(R"({"format":"pejit-schedules","version":1,"entries":[)"
                  R"({"signature":"gemm NT n=8 k=8","cpu":"a","family":"gemm","schedule":"4x4"},)"
                  "\n"
                  R"({"signature":"ew f32 w=3 in=F ops=neg(0) out=1","cpu":"a",)"
                  R"("family":"elementwise","schedule":"v4x16"}]})");
    return out;
  }();
  return seeds;
}

bool same_entries(std::vector<jit::ScheduleEntry> a, std::vector<jit::ScheduleEntry> b) {
  auto key = [](const jit::ScheduleEntry& e) {
    return std::tie(e.signature, e.cpu, e.family, e.schedule, e.rows, e.default_us, e.best_us,
                    e.candidates);
  };
  auto less = [&](const auto& x, const auto& y) { return key(x) < key(y); };
  std::sort(a.begin(), a.end(), less);
  std::sort(b.begin(), b.end(), less);
  return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                    [&](const auto& x, const auto& y) { return key(x) == key(y); });
}

Outcome run_schedules(std::string_view in) {
  static Scratch scratch("pejit-fuzz-schedules");
  const std::string& path = scratch.write(in);
  const std::string prefix = "tuned schedule database '" + path + "': ";
  Outcome o;
  std::optional<jit::ScheduleDB> db;
  try {
    db = jit::ScheduleDB::load(path);
  } catch (const Error& e) {
    std::string msg = e.what();
    if (msg.compare(0, prefix.size(), prefix) != 0)
      return broken(o, "message '" + msg.substr(0, 200) + "' does not start with " + prefix);
    std::string rest = msg.substr(prefix.size());
    auto starts = [&](const char* s) { return rest.compare(0, std::strlen(s), s) == 0; };
    bool located = starts("not valid JSON: ")
                       ? rest.find(" at line ") != std::string::npos &&
                             rest.find(", column ") != std::string::npos
                       : starts("entry ") || starts("not a pejit schedule database") ||
                             starts("unsupported version") ||
                             starts("\"entries\" must be an array");
    if (!located)
      o.violation = "message '" + msg.substr(0, 200) +
                    "' names neither the entry nor the JSON line and column";
    return o;
  }
  o.accepted = true;
  // What loaded is what the database promises: valid schedules, one entry per key...
  jit::ScheduleDB check;
  for (const auto& e : db->entries()) {
    if (check.find(e.signature, e.cpu) != nullptr)
      return broken(o, "two entries for (" + e.signature + ", " + e.cpu + ")");
    try {
      check.put(e);
    } catch (const Error& err) {
      return broken(o, std::string("an entry loaded that put() refuses: ") + err.what());
    }
    if (check.entries().back().family != e.family)
      return broken(o, "entry of family " + e.family + " for signature " + e.signature);
  }
  // ... and it saves and loads back to itself, as `pejit tune` rewrites it.
  std::string again = work_dir().file("roundtrip.json");
  db->save(again);
  jit::ScheduleDB back = jit::ScheduleDB::load(again);
  if (!same_entries(db->entries(), back.entries()))
    o.violation = "the database changes when saved and loaded again";
  return o;
}

} // namespace

const char* target_name(Target t) {
  switch (t) {
  case Target::Trees:
    return "trees";
  case Target::Sentences:
    return "sentences";
  case Target::Checkpoint:
    return "checkpoint";
  case Target::Schedules:
    return "schedules";
  }
  return "?";
}

std::optional<Target> target_from_name(std::string_view name) {
  for (Target t : kTargets)
    if (name == target_name(t))
      return t;
  return std::nullopt;
}

const std::vector<std::string>& seeds(Target t) {
  switch (t) {
  case Target::Trees: {
    static const std::vector<std::string> s = [] {
      std::vector<std::string> out = {"(3 (2 The) (4 (2 Rock) (2 is)))\n",
                                      "(- (2 a) (- (1 b) (0 c)))",
                                      "(1 (2 -LRB-) (3 ``) (4 's) (0 <unk>))\r\n\n  (2 x)\n",
                                      "(0 caf\xc3\xa9)\n\t\n(4 (4 (4 (4 deep))))\n"};
      data::Vocab v;
      std::string sst, listops;
      for (const auto& t : data::gen_sst(6, 11, data::Shape::Sst, v))
        sst += data::write_tree(t) + "\n";
      for (const auto& t : data::gen_listops(6, 12, v))
        listops += data::write_tree(t) + "\n";
      out.push_back(sst);
      out.push_back(listops);
      return out;
    }();
    return s;
  }
  case Target::Sentences: {
    static const std::vector<std::string> s = {
        "the cat sat on the mat\nit was <unk> .\n",
        "  leading and trailing  \t\r\n\n\nN N N $ 1.5 million\n",
        "caf\xc3\xa9 na\xc3\xafve \xe2\x80\x94 ok\x0b tab\tsep\fff", "one\n"};
    return s;
  }
  case Target::Checkpoint: {
    static const std::vector<std::string> s = [] {
      std::vector<std::string> out;
      for (const auto& c : checkpoint_seeds())
        out.push_back(c.bytes);
      return out;
    }();
    return s;
  }
  case Target::Schedules:
    return schedule_seeds();
  }
  throw std::logic_error("fuzz: unknown target");
}

const Dictionary& dictionary(Target t) {
  static const Dictionary trees{
      {"(",        ")",  " ",   "\n",   "\t",   "\r\n",           "-",
       "0",        "4",  "(2 ", "(- ",  "x",    "\xff",           std::string(1, '\0'),
       "\xc3\xa9", "((", "))",  " ) (", "\n\n", "(3 (2 a) (2 b))"},
      {"(1 ", "(- (2 a) ", "(", ")", "(3 x) "}};
  static const Dictionary sentences{{" ", "\n", "\t", "\r", "\v", "\f", std::string(1, '\0'),
                                     "\xff", "\xc3", "(3", "The)", "<unk>", "\xef\xbb\xbf",
                                     "\xed\xa0\x80", "(2 (3 x) (1 y))\n"},
                                    {"a ", "(", "\n", " "}};
  static const Dictionary json{{"{",
                                "}",
                                "[",
                                "]",
                                "\"",
                                ":",
                                ",",
                                "null",
                                "true",
                                "-1",
                                "1e400",
                                "0.5",
                                "\"\\u0000\"",
                                "\"\\ud800\"",
                                "\"\xff\"",
                                "\n",
                                "\"f32\"",
                                "\"f64\"",
                                "\"shape\":[3],",
                                "\"offset\":64,",
                                "\"name\":\"W\",",
                                "\"checksum\":\"0000000000000000\",",
                                "{\"name\":\"x\",\"shape\":[1],\"offset\":0}",
                                "\"optimizer_state\":[],",
                                "\"data_bytes\":0,",
                                "\"meta\":{\"a\":[1,{}]},",
                                "\"entries\":[],",
                                "\"signature\":\"ew f32 w=1\",",
                                "\"cpu\":\"a\",",
                                "\"family\":\"gemm\",",
                                "\"schedule\":\"v64x16\",",
                                "\"2147483648x1\"",
                                "\"v0x0\"",
                                "\"default\"",
                                "\"measured\":{\"rows\":[-1],\"candidates\":1e300},",
                                "\"version\":1,"},
                               {"[", "{\"a\":", "[{\"name\":\"x\",\"shape\":[", "{\"entries\":["}};
  switch (t) {
  case Target::Trees:
    return trees;
  case Target::Sentences:
    return sentences;
  case Target::Checkpoint:
  case Target::Schedules:
    return json;
  }
  throw std::logic_error("fuzz: unknown target");
}

Outcome run_one(Target t, std::string_view input) {
  try {
    switch (t) {
    case Target::Trees:
      return run_trees(input);
    case Target::Sentences:
      return run_sentences(input);
    case Target::Checkpoint:
      return run_checkpoint(input);
    case Target::Schedules:
      return run_schedules(input);
    }
  } catch (const std::exception& e) {
    // A pejit::Error here came from the check's own steps (a round trip), not from the reader
    // on the input: the reader accepted something it cannot give back.
    return {false,
            std::string("threw ") + typeid(e).name() +
                " instead of a located pejit::Error: " + std::string(e.what()).substr(0, 300)};
  }
  return {false, "unknown target"};
}

} // namespace pejit::fuzz
