// A benchmark's examples as `pejit train` sees them: a read dataset cut to its first `limit`
// examples, its dimensions bound from the vocabulary, and every example encoded once, in file
// order (pejit_plan_ahead_bench, pejit_profile_bench).
#pragma once

#include "runtime/train/common.h"

#include <numeric>
#include <vector>

namespace pejit::bench {

struct EncodedData {
  interp::DimBindings dims;
  std::vector<interp::Value> examples;
};

/// Throws pejit::Error (bad data, a model that cannot take it).
inline EncodedData encode_examples(const ir::Module& m, runtime::Dataset& ds, const ir::Type& elem,
                                   const data::Vocab& v, size_t limit) {
  EncodedData out;
  ds.limit(static_cast<int64_t>(limit));
  out.dims = interp::bind_dims(m, runtime::vocab_dims(m, v));
  const runtime::Encoder enc(m, ds, elem, out.dims);
  std::vector<size_t> idx(ds.size());
  std::iota(idx.begin(), idx.end(), size_t{0});
  const interp::Value all = enc.batch(ds, idx, 0, ds.size());
  for (size_t i = 0; i < all.list_size(); ++i)
    out.examples.push_back(all.list_at(i));
  return out;
}

} // namespace pejit::bench
