// Seeded generators of the built-in default data: SST-like sentiment trees and ListOps
// expressions. Deterministic for a seed on every machine and standard library: mt19937_64
// with integer-only distributions written here (no std:: distributions, no floating point).
#pragma once

#include "runtime/data/tree.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pejit::data {

/// Tree shapes for gen_sst.
enum class Shape {
  Sst,      ///< random binary bracketing, mostly right-branching with some left, like parses
  Deep,     ///< caterpillar: every internal node has a leaf child, depth == length
  Balanced, ///< halves split evenly, depth == ceil(log2(length)) + 1
};

/// "sst", "deep" or "balanced".
std::string shape_name(Shape s);
/// The inverse of shape_name; throws pejit::Error for any other name.
Shape parse_shape(std::string_view name);

/// `n` synthetic SST-like binary trees with a label 0..4 at every node. Lengths 1..56 words,
/// mean about 19 (1 + negative binomial). Words are "w0".."w2999" with a fixed polarity per word
/// (the same for every seed), the negators "not", "never", "n't" and the intensifiers "very",
/// "really", "extremely". A node's score is the sum of its children's, except that a negator
/// child negates and an intensifier child doubles its sibling's score; the score maps to a class
/// (<= -3: 0, -2..-1: 1, 0: 2, 1..2: 3, >= 3: 4) and 5% of labels are replaced at random.
/// Every word of the lexicon is added to `vocab` first, in a fixed order. The words come from
/// their own random stream, so one seed gives the same sentences in every shape and arity.
/// `arity` is the most children an internal node may have: 2 gives the binary trees above;
/// more gives n-ary trees whose internal nodes each take 2..arity children (never more than
/// the words they span): cut at random for Shape::Sst, a caterpillar of single words beside
/// one deeper child for Deep, even parts (as many as allowed) for Balanced. An n-ary node's
/// score is the sum of its content children's, doubled by an intensifier child and negated
/// by an odd number of negator children. Throws pejit::Error for an arity below 2.
std::vector<ParseTree> gen_sst(size_t n, uint64_t seed, Shape shape, Vocab& vocab,
                               size_t arity = 2);

/// `n` ListOps expressions (Nangia & Bowman 2018) over MAX, MIN, MED (median, the floor of the
/// mean of the two middle values for an even count) and SM (sum mod 10) with digit operands,
/// 2..5 arguments per list, nesting depth at most 6, at most 200 tokens. Binarized as in the
/// original generator: a list `[OP a b c ]` becomes the left-branching tree
/// `((((OP a) b) c) ])` where `[OP` and `]` are leaf tokens and each argument is a digit leaf
/// or the tree of a nested list. The root is labeled with the value 0..9; other nodes `-`.
std::vector<ParseTree> gen_listops(size_t n, uint64_t seed, Vocab& vocab);

} // namespace pejit::data
