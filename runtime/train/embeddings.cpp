// Reading word vectors into an embedding parameter (embeddings.h). zlib's gzread reads plain
// files as they are, so one reader serves both forms.
#include "runtime/train/embeddings.h"

#include <zlib.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

namespace pejit::runtime {

std::string EmbeddingReport::str(const std::string& path) const {
  char buf[400];
  std::snprintf(buf, sizeof buf,
                "embeddings %s -> %s: %lld of %lld vocabulary words found (%.1f%%), covering "
                "%.1f%% of the training tokens; the others keep %s's initialization",
                path.c_str(), param.c_str(), static_cast<long long>(found),
                static_cast<long long>(vocab), vocab ? 100.0 * found / vocab : 0.0,
                tokens ? 100.0 * covered / tokens : 0.0, param.c_str());
  return buf;
}

std::string embedding_param(const ir::Module& m, const std::string& name) {
  if (!name.empty()) {
    int i = m.param_index(name);
    if (i < 0)
      throw Error("--embeddings-param " + name + ": the model has no parameter " + name);
    if (m.params()[static_cast<size_t>(i)]->type->dims.size() != 2)
      throw Error("--embeddings-param " + name + ": the parameter is not 2-D (a row per word)");
    return name;
  }
  std::vector<std::string> found;
  for (const auto& p : m.params())
    if (p->type->dims.size() == 2 && p->type->dims[0] == ir::Dim::named("V"))
      found.push_back(p->name);
  if (found.size() == 1)
    return found[0];
  std::string names;
  for (const auto& n : found)
    names += (names.empty() ? "" : ", ") + n;
  throw Error(found.empty()
                  ? "--embeddings: the model has no 2-D parameter over the vocabulary (first "
                    "axis V); name one with --embeddings-param"
                  : "--embeddings: several parameters have a vocabulary axis (" + names +
                        "); choose one with --embeddings-param");
}

namespace {

// Lines of a gzip or plain file.
class LineReader {
public:
  explicit LineReader(const std::string& path) : f_(gzopen(path.c_str(), "rb")) {
    if (!f_)
      throw Error(path + ": error: cannot open file");
    gzbuffer(f_, 1 << 18);
  }
  ~LineReader() { gzclose(f_); }
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;
  /// False at the end. Throws for a read error (a corrupt gzip stream).
  bool next(std::string& line, const std::string& path) {
    line.clear();
    char buf[65536];
    while (gzgets(f_, buf, sizeof buf)) {
      line += buf;
      if (!line.empty() && line.back() == '\n') {
        line.pop_back();
        if (!line.empty() && line.back() == '\r')
          line.pop_back();
        return true;
      }
    }
    int err = 0;
    const char* msg = gzerror(f_, &err);
    if (err != Z_OK && err != Z_STREAM_END)
      throw Error(path + ": error: cannot read: " + msg);
    return !line.empty();
  }

private:
  gzFile f_;
};

std::vector<std::string_view> split_ws(std::string_view s, std::vector<size_t>& cols) {
  std::vector<std::string_view> out;
  cols.clear();
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t'))
      ++i;
    size_t j = i;
    while (j < s.size() && s[j] != ' ' && s[j] != '\t')
      ++j;
    if (j > i) {
      out.push_back(s.substr(i, j - i));
      cols.push_back(i + 1);
    }
    i = j;
  }
  return out;
}

bool is_count(std::string_view s) {
  if (s.empty())
    return false;
  for (char c : s)
    if (c < '0' || c > '9')
      return false;
  return true;
}

} // namespace

EmbeddingReport load_embeddings(Session& session, const std::string& param, const std::string& path,
                                const data::Vocab& vocab, const Dataset& ds) {
  const std::vector<int64_t> shape = session.param_shape(param);
  const int64_t rows = shape[0], d = shape[1];
  std::vector<float> table = session.get_param(param);
  std::vector<uint8_t> seen(static_cast<size_t>(rows), 0);
  EmbeddingReport r;
  r.param = param;
  LineReader in(path);
  std::string line;
  std::vector<size_t> cols;
  for (int64_t no = 1; in.next(line, path); ++no) {
    auto at = [&](size_t col) {
      return path + ":" + std::to_string(no) + (col ? ":" + std::to_string(col) : "") + ": error: ";
    };
    std::vector<std::string_view> toks = split_ws(line, cols);
    if (toks.empty())
      continue;
    if (no == 1 && toks.size() == 2 && is_count(toks[0]) && is_count(toks[1])) {
      if (std::strtoll(std::string(toks[1]).c_str(), nullptr, 10) != d)
        throw Error(at(0) + "the word2vec header says " + std::string(toks[1]) +
                    " dimensions, but " + param + " has rows of " + std::to_string(d));
      continue;
    }
    if (static_cast<int64_t>(toks.size()) - 1 != d)
      throw Error(at(0) + "the vector of '" + std::string(toks[0]) + "' has " +
                  std::to_string(toks.size() - 1) + " values, but " + param + " has rows of " +
                  std::to_string(d));
    ++r.file_words;
    const std::string word(toks[0]);
    int32_t id = vocab.lookup(word);
    if (id == 0 && word != data::Vocab::kUnk)
      continue;
    if (id >= rows || seen[static_cast<size_t>(id)])
      continue; // a repeated word: the first vector counts
    float* row = table.data() + static_cast<size_t>(id) * static_cast<size_t>(d);
    for (int64_t k = 0; k < d; ++k) {
      const std::string v(toks[static_cast<size_t>(k + 1)]);
      char* end = nullptr;
      errno = 0;
      float x = std::strtof(v.c_str(), &end);
      if (end != v.c_str() + v.size() || !std::isfinite(x))
        throw Error(at(cols[static_cast<size_t>(k + 1)]) + "'" + v + "' is not a finite number");
      row[k] = x;
    }
    seen[static_cast<size_t>(id)] = 1;
  }
  session.set_param(param, table);
  r.vocab = static_cast<int64_t>(vocab.size());
  for (size_t i = 0; i < vocab.size() && i < seen.size(); ++i)
    r.found += seen[i];
  auto count = [&](int32_t w) {
    ++r.tokens;
    r.covered += w >= 0 && w < rows && seen[static_cast<size_t>(w)];
  };
  ds.for_each_token(count);
  return r;
}

} // namespace pejit::runtime
