// Reading and writing PTB/SST bracketed trees, one per line: `(3 (2 The) (4 (2 Rock) (2 is)))`,
// and plain whitespace-tokenized sentences (PTB language-modelling text). Malformed input is a
// user error: pejit::Error with `file:line:col: error: what`, the source line and a caret.
#pragma once

#include "runtime/data/tree.h"

#include <string>
#include <string_view>
#include <vector>

namespace pejit::data {

/// How readers map tokens to ids.
struct ReadOptions {
  /// true: new tokens are added to the vocabulary; false: unknown tokens map to 0 ("<unk>").
  bool grow_vocab = true;
};

/// Reads a file of bracketed trees, one per line; blank lines are skipped. A node is
/// `(LABEL TOKEN)` (a leaf) or `(LABEL CHILD...)`; LABEL is a non-negative integer or `-`;
/// a token is a run of characters other than whitespace and parentheses. Throws pejit::Error
/// "FILE:LINE:COL: error: <what>" (first line of the message) for a malformed line, and
/// "FILE: error: cannot open file" when the file cannot be read. Never recurses on the input.
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

/// Reads whitespace-separated sentences, one per line (blank lines skipped), as word ids.
std::vector<std::vector<int32_t>> read_sentences(const std::string& path, Vocab& vocab,
                                                 const ReadOptions& opts = {});

/// As read_sentences, on text in memory.
std::vector<std::vector<int32_t>> parse_sentences(std::string_view text, Vocab& vocab,
                                                  const ReadOptions& opts = {});

} // namespace pejit::data
