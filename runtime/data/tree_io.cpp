// Bracketed-tree reader and writer, and the plain sentence reader.
// The reader is an explicit-stack state machine over one line at a time, so no input (however
// deep, truncated or binary) can overflow the C++ stack or loop: every step consumes a byte or
// fails. Columns in messages are 1-based byte offsets within the line. Both readers refuse
// text that is not UTF-8 or holds a NUL byte (the first bad byte is the error's column), and
// skip a UTF-8 byte order mark at the start of the file.
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

/// The column (0-based) of the first byte of `line` that is NUL or not part of a well-formed
/// UTF-8 sequence (overlong forms, surrogates and code points above U+10FFFF included), or npos.
size_t bad_text_byte(std::string_view line) {
  const size_t n = line.size();
  for (size_t i = 0; i < n;) {
    auto u = static_cast<unsigned char>(line[i]);
    if (u >= 0x01 && u < 0x80) {
      ++i;
      continue;
    }
    if (u == 0)
      return i;
    size_t len = u >= 0xc2 && u <= 0xdf   ? 2
                 : u >= 0xe0 && u <= 0xef ? 3
                 : u >= 0xf0 && u <= 0xf4 ? 4
                                          : 0;
    if (len == 0 || i + len > n)
      return i;
    auto b1 = static_cast<unsigned char>(line[i + 1]);
    unsigned char lo = 0x80, hi = 0xbf;
    if (u == 0xe0)
      lo = 0xa0;
    else if (u == 0xed)
      hi = 0x9f;
    else if (u == 0xf0)
      lo = 0x90;
    else if (u == 0xf4)
      hi = 0x8f;
    if (b1 < lo || b1 > hi)
      return i;
    for (size_t k = 2; k < len; ++k)
      if ((static_cast<unsigned char>(line[i + k]) & 0xc0) != 0x80)
        return i;
    i += len;
  }
  return std::string_view::npos;
}

/// What is wrong with the byte at `line[pos]` (as bad_text_byte found it).
std::string bad_text_what(std::string_view line, size_t pos) {
  char buf[64];
  if (line[pos] == '\0')
    return "a NUL byte: data files are UTF-8 text";
  std::snprintf(buf, sizeof buf, "invalid UTF-8 (byte 0x%02x): data files are UTF-8 text",
                static_cast<unsigned>(static_cast<unsigned char>(line[pos])));
  return buf;
}

/// The text after a UTF-8 byte order mark, if the file starts with one.
std::string_view skip_bom(std::string_view text) {
  return text.starts_with("\xef\xbb\xbf") ? text.substr(3) : text;
}

/// "FILE:LINE:COL: error: WHAT", then the line (a window of it around the column when it is
/// long) and a caret under the column; then each note, rendered as the model's diagnostics are.
std::string render_at(const std::string& file, uint32_t line_no, std::string_view line, size_t pos,
                      const std::string& what,
                      const std::vector<std::pair<Span, std::string>>& notes = {}) {
  std::string out =
      file + ":" + std::to_string(line_no) + ":" + std::to_string(pos + 1) + ": error: " + what;
  constexpr size_t kWindow = 60;
  size_t from = 0, to = line.size();
  if (line.size() > 2 * kWindow + 20) {
    from = pos > kWindow ? pos - kWindow : 0;
    to = std::min(line.size(), pos + kWindow);
  }
  if (to == line.size() && to > from && line[to - 1] == '\r' && pos + 1 < to)
    --to; // a CRLF line's '\r'
  std::string shown = (from > 0 ? "..." : "") + std::string(line.substr(from, to - from)) +
                      (to < line.size() ? "..." : "");
  size_t caret = pos - from + (from > 0 ? 3 : 0);
  // Bytes that would garble a terminal (controls, bytes of no well-formed UTF-8 sequence) are
  // shown as '?'; the column still counts bytes.
  for (size_t i = 0; i < shown.size();) {
    size_t bad = bad_text_byte(std::string_view(shown).substr(i));
    if (bad == std::string_view::npos)
      break;
    shown[i + bad] = '?';
    i += bad + 1;
  }
  for (char& c : shown)
    if (static_cast<unsigned char>(c) < 0x20 && c != '\t')
      c = '?';
  out += "\n  " + shown + "\n  ";
  for (size_t c = 0; c < caret && c < shown.size(); ++c)
    out += shown[c] == '\t' ? '\t' : ' ';
  out += '^';
  for (const auto& [span, msg] : notes) {
    Diagnostic d;
    d.severity = Severity::Note;
    d.span = span;
    d.message = msg;
    std::string r = render_diagnostic(d);
    if (!r.empty() && r.back() == '\n')
      r.pop_back();
    out += "\n" + r;
  }
  return out;
}

/// The column (0-based) of the '(' that opens `line` when the line is a whole bracketed tree
/// (it parses as one), else npos. How the sentence reader recognizes a tree file.
size_t looks_like_tree(std::string_view line);

class TreeReader {
public:
  TreeReader(std::shared_ptr<const SourceFile> file, Vocab& vocab, const ReadOptions& opts)
      : file_(std::move(file)), vocab_(vocab), opts_(opts) {}

  std::vector<ParseTree> run() {
    std::vector<ParseTree> trees;
    const std::string_view all = file_->text;
    const std::string_view text = skip_bom(all);
    for_each_line(text, [&](std::string_view line, uint32_t line_no) {
      line_no_ = line_no;
      line_ = line;
      if (size_t bad = bad_text_byte(line); bad != std::string_view::npos)
        fail(bad, bad_text_what(line, bad));
      if (is_blank(line))
        return;
      // Columns and node indices are 32-bit.
      if (line.size() >= INT32_MAX)
        fail(0, "a line of " + std::to_string(line.size()) + " bytes: at most 2^31 - 2 per tree");
      trees.push_back(parse_line(line));
      ParseTree::Origin& o = trees.back().origin;
      o.file = file_;
      o.line = line_no;
      o.offset = static_cast<size_t>(line.data() - all.data());
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

  [[noreturn]] void fail(size_t pos, const std::string& what) const {
    throw Error(render_at(file_->name, line_no_, line_, pos, what));
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
    t.origin.cols.push_back(static_cast<uint32_t>(o.pos + 1));
    return static_cast<int32_t>(t.nodes.size()) - 1;
  }

  std::shared_ptr<const SourceFile> file_;
  Vocab& vocab_;
  const ReadOptions& opts_;
  uint32_t line_no_ = 0;
  std::string_view line_;
  std::vector<Open> stack_;
};

size_t looks_like_tree(std::string_view line) {
  size_t i = 0;
  while (i < line.size() && is_space(line[i]))
    ++i;
  // Cheap tests first: '(' then a label; the line ends with ')'.
  if (i + 1 >= line.size() || line[i] != '(' ||
      !(line[i + 1] == '-' || (line[i + 1] >= '0' && line[i + 1] <= '9')))
    return std::string_view::npos;
  size_t e = line.size();
  while (e > i && is_space(line[e - 1]))
    --e;
  if (line[e - 1] != ')')
    return std::string_view::npos;
  Vocab scratch;
  auto file = std::make_shared<const SourceFile>(SourceFile{"", std::string(line)});
  try {
    (void)TreeReader(std::move(file), scratch, ReadOptions{}).run();
  } catch (const Error&) {
    return std::string_view::npos;
  }
  return i;
}

void append_label(std::string& out, int32_t label) {
  out += '(';
  if (label < 0)
    out += '-';
  else
    out += std::to_string(label);
}

} // namespace

std::vector<ParseTree> read_trees(const std::string& path, Vocab& vocab, const ReadOptions& opts) {
  auto file = std::make_shared<const SourceFile>(SourceFile{path, read_file(path)});
  return TreeReader(std::move(file), vocab, opts).run();
}

std::vector<ParseTree> parse_trees(std::string_view text, const std::string& name, Vocab& vocab,
                                   const ReadOptions& opts) {
  auto file = std::make_shared<const SourceFile>(SourceFile{name, std::string(text)});
  return TreeReader(std::move(file), vocab, opts).run();
}

std::string node_text(const ParseTree& t, int32_t n) {
  PEJIT_CHECK(n >= 0 && static_cast<size_t>(n) < t.nodes.size()) << "node " << n;
  const ParseTree::Node& node = t.nodes[static_cast<size_t>(n)];
  std::string out;
  append_label(out, node.label);
  if (node.children.empty()) {
    // (Not `cond ? t.tokens[n] : ""`: that is a temporary std::string, gone before the view is
    // read.)
    std::string_view tok;
    if (static_cast<size_t>(n) < t.tokens.size())
      tok = t.tokens[static_cast<size_t>(n)];
    std::string shown = tok.size() > 40 ? std::string(tok.substr(0, 40)) + "..." : std::string(tok);
    for (char& c : shown)
      if (static_cast<unsigned char>(c) < 0x20)
        c = '?'; // a control character would garble the message
    out += ' ' + shown;
  } else {
    for (size_t c = 0; c < node.children.size() && c < 3; ++c)
      out += " (...)";
    if (node.children.size() > 3)
      out += " ...";
  }
  return out + ")";
}

Error node_error(const ParseTree& t, int32_t n, const std::string& what,
                 const std::vector<std::pair<Span, std::string>>& notes) {
  const ParseTree::Origin& o = t.origin;
  std::string full = what + " (node `" + node_text(t, n) + "`)";
  if (!o.file || static_cast<size_t>(n) >= o.cols.size() || o.offset > o.file->text.size()) {
    std::string msg = "tree node " + std::to_string(n) + ": error: " + full;
    for (const auto& [span, note] : notes)
      msg += "\n" + span.str() + ": note: " + note;
    return Error(msg);
  }
  std::string_view rest = std::string_view(o.file->text).substr(o.offset);
  std::string_view line = rest.substr(0, rest.find('\n'));
  return Error(render_at(o.file->name, o.line, line, o.cols[n] - 1, full, notes));
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
  return parse_sentences(read_file(path), path, vocab, opts);
}

std::vector<std::vector<int32_t>> parse_sentences(std::string_view text, Vocab& vocab,
                                                  const ReadOptions& opts) {
  return parse_sentences(text, "<text>", vocab, opts);
}

std::vector<std::vector<int32_t>> parse_sentences(std::string_view text, const std::string& name,
                                                  Vocab& vocab, const ReadOptions& opts) {
  std::vector<std::vector<int32_t>> out;
  std::string tok;
  for_each_line(skip_bom(text), [&](std::string_view line, uint32_t line_no) {
    if (size_t bad = bad_text_byte(line); bad != std::string_view::npos)
      throw Error(render_at(name, line_no, line, bad, bad_text_what(line, bad)));
    if (size_t open = looks_like_tree(line); open != std::string_view::npos)
      throw Error(render_at(name, line_no, line, open,
                            "this line is a bracketed tree, but plain sentences are read here "
                            "(whitespace-separated tokens, one sentence per line, for a model "
                            "over List[i32[]]); trees are for a model over a tree type"));
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
