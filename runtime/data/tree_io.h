// Reading and writing PTB/SST bracketed trees, one per line: `(3 (2 The) (4 (2 Rock) (2 is)))`,
// and plain whitespace-tokenized sentences (PTB language-modelling text). Malformed input is a
// user error: pejit::Error with `file:line:col: error: what`, the source line and a caret;
// node_error gives later stages (the encoder) the same form for a node of a tree read here.
#pragma once

#include "pejit/error.h"
#include "runtime/data/tree.h"

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pejit::data {

/// How readers map tokens to ids.
struct ReadOptions {
  /// true: new tokens are added to the vocabulary; false: unknown tokens map to 0 ("<unk>").
  bool grow_vocab = true;
};

/// Reads a file of bracketed trees, one per line; blank lines are skipped. A node is
/// `(LABEL TOKEN)` (a leaf) or `(LABEL CHILD...)`; LABEL is a non-negative integer or `-`;
/// a token is a run of characters other than whitespace and parentheses. The text must be
/// UTF-8 without NUL bytes (a byte order mark at the start is skipped). Throws pejit::Error
/// "FILE:LINE:COL: error: <what>" (first line of the message) for a malformed line, and
/// "FILE: error: cannot open file" when the file cannot be read. Never recurses on the input.
/// Each tree records its origin (the file, its line, each node's column).
std::vector<ParseTree> read_trees(const std::string& path, Vocab& vocab,
                                  const ReadOptions& opts = {});

/// As read_trees, on text in memory; `name` stands for the file name in messages.
std::vector<ParseTree> parse_trees(std::string_view text, const std::string& name, Vocab& vocab,
                                   const ReadOptions& opts = {});

/// One tree as a line of text (no newline). parse_trees(write_tree(t)) == t for a tree in
/// post-order (as read or generated). Throws pejit::Error for a tree that cannot be written
/// (a leaf without a token, a token with whitespace or parentheses).
std::string write_tree(const ParseTree& t);

/// Writes one tree per line, atomically: a temporary file beside `path`, then a rename.
void write_trees(const std::string& path, const std::vector<ParseTree>& trees);

/// Reads whitespace-separated sentences, one per line (blank lines skipped), as word ids. The
/// text must be UTF-8 without NUL bytes, as for trees. A line that is a whole bracketed tree
/// is an error (a tree file given where sentences are expected): no sentence of plain text
/// is one. Throws pejit::Error "FILE:LINE:COL: error: <what>".
std::vector<std::vector<int32_t>> read_sentences(const std::string& path, Vocab& vocab,
                                                 const ReadOptions& opts = {});

/// As read_sentences, on text in memory; `name` stands for the file name in messages.
std::vector<std::vector<int32_t>> parse_sentences(std::string_view text, const std::string& name,
                                                  Vocab& vocab, const ReadOptions& opts = {});
/// As above, named "<text>" in messages.
std::vector<std::vector<int32_t>> parse_sentences(std::string_view text, Vocab& vocab,
                                                  const ReadOptions& opts = {});

/// A node as it reads in messages: `(7 Rock)` for a leaf, `(3 (...) (...))` for an inner node.
std::string node_text(const ParseTree& t, int32_t n);

/// The error for node `n` of `t`: "FILE:LINE:COL: error: WHAT (node `(7 Rock)`)" with the
/// line (around the node when it is long) and a caret under the node's '(', then `notes`
/// (e.g. where in the model the value is used), for a tree read by read_trees/parse_trees;
/// "tree node N: error: WHAT (node ...)" for a tree built in memory.
Error node_error(const ParseTree& t, int32_t n, const std::string& what,
                 const std::vector<std::pair<Span, std::string>>& notes = {});

} // namespace pejit::data
