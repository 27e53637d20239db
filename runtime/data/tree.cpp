// ParseTree queries and the Vocab map. Queries run in one pass over the flat node array,
// relying on children coming before their parents.
#include "runtime/data/tree.h"

#include "src/util/check.h"

#include <algorithm>

namespace pejit::data {

int32_t ParseTree::root() const {
  PEJIT_CHECK(!nodes.empty()) << "root() of an empty tree";
  return static_cast<int32_t>(nodes.size()) - 1;
}

size_t ParseTree::leaves() const {
  return static_cast<size_t>(
      std::count_if(nodes.begin(), nodes.end(), [](const Node& n) { return n.children.empty(); }));
}

size_t ParseTree::depth() const {
  std::vector<size_t> d(nodes.size(), 1);
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (int32_t c : nodes[i].children) {
      PEJIT_CHECK(c >= 0 && static_cast<size_t>(c) < i) << "child " << c << " of node " << i;
      d[i] = std::max(d[i], d[c] + 1);
    }
  }
  return nodes.empty() ? 0 : d.back();
}

bool ParseTree::is_binary() const {
  return std::all_of(nodes.begin(), nodes.end(),
                     [](const Node& n) { return n.children.empty() || n.children.size() == 2; });
}

std::vector<std::string> ParseTree::sentence() const {
  std::vector<std::string> out;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].children.empty())
      out.push_back(i < tokens.size() ? tokens[i] : std::string());
  return out;
}

Vocab::Vocab() {
  words_.push_back(kUnk);
  ids_.emplace(kUnk, 0);
}

int32_t Vocab::add(const std::string& w) {
  auto [it, inserted] = ids_.try_emplace(w, static_cast<int32_t>(words_.size()));
  if (inserted)
    words_.push_back(w);
  return it->second;
}

int32_t Vocab::lookup(const std::string& w) const {
  auto it = ids_.find(w);
  return it == ids_.end() ? 0 : it->second;
}

const std::string& Vocab::word(int32_t id) const {
  PEJIT_CHECK(id >= 0 && static_cast<size_t>(id) < words_.size())
      << "word id " << id << " out of range [0, " << words_.size() << ")";
  return words_[id];
}

Vocab Vocab::from_words(std::vector<std::string> words) {
  if (words.empty() || words[0] != kUnk)
    throw Error("vocabulary: the first word must be \"<unk>\"");
  Vocab v;
  v.words_ = std::move(words);
  v.ids_.clear();
  v.ids_.reserve(v.words_.size());
  for (size_t i = 0; i < v.words_.size(); ++i) {
    if (!v.ids_.try_emplace(v.words_[i], static_cast<int32_t>(i)).second)
      throw Error("vocabulary: word \"" + v.words_[i] + "\" appears twice (ids " +
                  std::to_string(v.ids_[v.words_[i]]) + " and " + std::to_string(i) + ")");
  }
  return v;
}

} // namespace pejit::data
