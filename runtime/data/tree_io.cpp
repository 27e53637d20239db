// Bracketed-tree reader and writer, and the plain sentence reader.
// The reader is an explicit-stack state machine over one line at a time, so no input (however
// deep, truncated or binary) can overflow the C++ stack or loop: every step consumes a byte or
// fails. Columns in messages are 1-based byte offsets within the line.
#include "runtime/data/tree_io.h"

#include "src/util/check.h"
#include "src/util/diagnostics.h"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <unistd.h>

namespace pejit::data {

namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}
bool is_token_char(char c) {
  return !is_space(c) && c != '(' && c != ')' && c != '\n';
}

std::string read_file(const std::string& path) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f)
    throw Error(path + ": error: cannot open file: " + std::strerror(errno));
  std::string text;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f.get())) > 0)
    text.append(buf, n);
  if (std::ferror(f.get()))
    throw Error(path + ": error: cannot read file: " + std::strerror(errno));
  return text;
}

/// Calls fn(line, line_number) for each line of `text` (without its '\n').
template <class Fn> void for_each_line(std::string_view text, Fn&& fn) {
  uint32_t line_no = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos)
      end = text.size();
    fn(text.substr(start, end - start), ++line_no);
    start = end + 1;
  }
}

bool is_blank(std::string_view line) {
  for (char c : line)
    if (!is_space(c))
      return false;
  return true;
}

/// Parses a label: `-` is -1, otherwise a non-negative decimal int32. False if malformed.
bool parse_label(std::string_view s, int32_t& out) {
  if (s == "-") {
    out = -1;
    return true;
  }
  if (s.empty() || s.size() > 10)
    return false;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9')
      return false;
    v = v * 10 + (c - '0');
  }
  if (v > INT32_MAX)
    return false;
  out = static_cast<int32_t>(v);
  return true;
}

/// Shows a byte of a message-quoted token: printable ASCII as is, anything else as \xHH.
std::string escaped(std::string_view s) {
  std::string out = "'";
  for (char c : s.substr(0, 40)) {
    auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f) {
      out += c;
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    }
  }
  if (s.size() > 40)
    out += "...";
  return out + "'";
}

class TreeReader {
public:
  TreeReader(std::string_view text, const std::string& name, Vocab& vocab, const ReadOptions& opts)
      : text_(text), name_(name), vocab_(vocab), opts_(opts) {}

  std::vector<ParseTree> run() {
    std::vector<ParseTree> trees;
    for_each_line(text_, [&](std::string_view line, uint32_t line_no) {
      if (is_blank(line))
        return;
      line_no_ = line_no;
      trees.push_back(parse_line(line));
    });
    return trees;
  }

private:
  struct Open {
    size_t pos; // of the '('
    int32_t label;
    std::vector<int32_t> children;
    size_t token_pos = std::string_view::npos; // npos: no token
    std::string_view token;
  };

  [[noreturn]] void fail(size_t pos, std::string what) const {
    Diagnostic d;
    d.span.file = std::make_shared<SourceFile>(SourceFile{name_, std::string(text_)});
    d.span.line = line_no_;
    d.span.col = static_cast<uint32_t>(pos + 1);
    d.message = std::move(what);
    std::string msg = render_diagnostic(d);
    if (!msg.empty() && msg.back() == '\n')
      msg.pop_back();
    throw Error(msg);
  }

  static std::string col(size_t pos) { return std::to_string(pos + 1); }

  ParseTree parse_line(std::string_view line) {
    ParseTree t;
    std::vector<Open>& stack = stack_;
    stack.clear();
    const size_t n = line.size();
    size_t i = 0;
    while (i < n && is_space(line[i]))
      ++i;
    if (line[i] != '(') {
      if (line[i] == ')')
        fail(i, "unbalanced ')' with no matching '('");
      fail(i, "expected '(' to start a tree");
    }
    for (;;) {
      // At a '(' that opens a node: read its label.
      size_t open = i++;
      size_t start = i;
      while (i < n && is_token_char(line[i]))
        ++i;
      if (start == i)
        fail(start, "missing label after '('");
      int32_t label = 0;
      if (!parse_label(line.substr(start, i - start), label))
        fail(start, "bad label " + escaped(line.substr(start, i - start)) +
                        ": expected a non-negative integer or '-'");
      stack.push_back(Open{open, label, {}, std::string_view::npos, {}});
      // Read the node's contents until a child opens or the tree closes.
      for (;;) {
        while (i < n && is_space(line[i]))
          ++i;
        Open& top = stack.back();
        if (i == n)
          fail(n, "missing ')' to close the '(' at column " + col(top.pos) +
                      " (unbalanced parentheses)");
        char c = line[i];
        if (c == '(') {
          if (top.token_pos != std::string_view::npos)
            fail(i, "a node has both a token (column " + col(top.token_pos) + ") and children");
          break;
        }
        if (c == ')') {
          ++i;
          int32_t idx = close_node(t, top, line);
          stack.pop_back();
          if (stack.empty()) {
            while (i < n && is_space(line[i]))
              ++i;
            if (i < n) {
              if (line[i] == ')')
                fail(i, "unbalanced ')' with no matching '('");
              fail(i, "unexpected text after the tree (one tree per line)");
            }
            return t;
          }
          stack.back().children.push_back(idx);
          continue;
        }
        // A token.
        if (top.token_pos != std::string_view::npos)
          fail(i,
               "a leaf has more than one token (the first at column " + col(top.token_pos) + ")");
        if (!top.children.empty())
          fail(i, "a node has both children and a token");
        top.token_pos = i;
        size_t ts = i;
        while (i < n && is_token_char(line[i]))
          ++i;
        top.token = line.substr(ts, i - ts);
      }
    }
  }

  int32_t close_node(ParseTree& t, Open& o, std::string_view line) {
    ParseTree::Node node;
    node.label = o.label;
    if (o.token_pos != std::string_view::npos) {
      std::string tok(o.token);
      node.word = opts_.grow_vocab ? vocab_.add(tok) : vocab_.lookup(tok);
      t.tokens.push_back(std::move(tok));
    } else if (o.children.empty()) {
      fail(o.pos, "empty node: a label needs a token or children");
    } else {
      node.children = std::move(o.children);
      t.tokens.emplace_back();
    }
    t.nodes.push_back(std::move(node));
    return static_cast<int32_t>(t.nodes.size()) - 1;
  }

  std::string_view text_;
  const std::string& name_;
  Vocab& vocab_;
  const ReadOptions& opts_;
  uint32_t line_no_ = 0;
  std::vector<Open> stack_;
};

void append_label(std::string& out, int32_t label) {
  out += '(';
  if (label < 0)
    out += '-';
  else
    out += std::to_string(label);
}

} // namespace

std::vector<ParseTree> read_trees(const std::string& path, Vocab& vocab, const ReadOptions& opts) {
  std::string text = read_file(path);
  return parse_trees(text, path, vocab, opts);
}

std::vector<ParseTree> parse_trees(std::string_view text, const std::string& name, Vocab& vocab,
                                   const ReadOptions& opts) {
  return TreeReader(text, name, vocab, opts).run();
}

std::string write_tree(const ParseTree& t) {
  if (t.nodes.empty())
    throw Error("write_tree: the tree is empty");
  PEJIT_CHECK(t.tokens.size() == t.nodes.size())
      << t.tokens.size() << " tokens for " << t.nodes.size() << " nodes";
  struct Frame {
    int32_t node;
    size_t next;
  };
  std::string out;
  std::vector<Frame> stack{{t.root(), 0}};
  append_label(out, t.nodes.back().label);
  while (!stack.empty()) {
    Frame& f = stack.back();
    const ParseTree::Node& n = t.nodes[f.node];
    if (n.children.empty()) {
      const std::string& tok = t.tokens[f.node];
      if (tok.empty())
        throw Error("write_tree: leaf " + std::to_string(f.node) + " has no token");
      for (char c : tok)
        if (!is_token_char(c))
          throw Error("write_tree: token " + escaped(tok) +
                      " holds whitespace or a parenthesis and cannot be written");
      out += ' ';
      out += tok;
      out += ')';
      stack.pop_back();
    } else if (f.next < n.children.size()) {
      if (!t.tokens[f.node].empty())
        throw Error("write_tree: internal node " + std::to_string(f.node) + " has a token");
      int32_t c = n.children[f.next++];
      PEJIT_CHECK(c >= 0 && c < f.node) << "child " << c << " of node " << f.node;
      out += ' ';
      append_label(out, t.nodes[c].label);
      stack.push_back({c, 0});
    } else {
      out += ')';
      stack.pop_back();
    }
  }
  return out;
}

void write_trees(const std::string& path, const std::vector<ParseTree>& trees) {
  std::string text;
  for (const ParseTree& t : trees) {
    text += write_tree(t);
    text += '\n';
  }
  static std::atomic<uint64_t> counter{0};
  std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f)
    throw Error(path + ": error: cannot write file: " + std::strerror(errno));
  bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  ok = std::fflush(f) == 0 && ok;
  int err = errno;
  ok = std::fclose(f) == 0 && ok;
  std::error_code ec;
  if (ok)
    std::filesystem::rename(tmp, path, ec);
  if (!ok || ec) {
    std::filesystem::remove(tmp, ec);
    throw Error(path + ": error: cannot write file: " + (ok ? ec.message() : std::strerror(err)));
  }
}

std::vector<std::vector<int32_t>> read_sentences(const std::string& path, Vocab& vocab,
                                                 const ReadOptions& opts) {
  return parse_sentences(read_file(path), vocab, opts);
}

std::vector<std::vector<int32_t>> parse_sentences(std::string_view text, Vocab& vocab,
                                                  const ReadOptions& opts) {
  std::vector<std::vector<int32_t>> out;
  std::string tok;
  for_each_line(text, [&](std::string_view line, uint32_t) {
    std::vector<int32_t> ids;
    size_t i = 0;
    while (i < line.size()) {
      while (i < line.size() && is_space(line[i]))
        ++i;
      size_t s = i;
      while (i < line.size() && !is_space(line[i]))
        ++i;
      if (s == i)
        break;
      tok.assign(line.substr(s, i - s));
      ids.push_back(opts.grow_vocab ? vocab.add(tok) : vocab.lookup(tok));
    }
    if (!ids.empty())
      out.push_back(std::move(ids));
  });
  return out;
}

} // namespace pejit::data
