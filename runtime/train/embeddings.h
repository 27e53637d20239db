// Pretrained word vectors for `pejit train --embeddings FILE`: GloVe or word2vec text (`word
// v1 ... vD` per line, an optional word2vec header `N D`), gzip-compressed or not, copied into
// the rows of the model's embedding parameter for the words of the vocabulary; words the file
// lacks keep the model's initialization.
#pragma once

#include "pejit/pejit.h"
#include "runtime/data/tree.h"
#include "runtime/train/common.h"
#include "src/ir/module.h"

#include <cstdint>
#include <string>

namespace pejit::runtime {

struct EmbeddingReport {
  std::string param;      ///< the parameter filled
  int64_t vocab = 0;      ///< words of the vocabulary
  int64_t found = 0;      ///< of them in the file
  int64_t tokens = 0;     ///< tokens (leaves or sentence words) of the data
  int64_t covered = 0;    ///< of them whose word was found
  int64_t file_words = 0; ///< vectors read
  /// "embeddings FILE -> PARAM: F of V vocabulary words found (P%), covering T% of the
  /// training tokens; the others keep PARAM's initialization".
  std::string str(const std::string& path) const;
};

/// The parameter `--embeddings` fills: `name` when given (it must exist and be 2-D), otherwise
/// the one 2-D parameter whose first axis is the dimension V. Throws pejit::Error when there
/// is none or more than one (naming them: choose with --embeddings-param).
std::string embedding_param(const ir::Module& m, const std::string& name);

/// Reads `path` (gzip when it is compressed) and sets the rows of `param` in `session` of the
/// vocabulary's words found in it. `ds` gives the token coverage. Throws pejit::Error at
/// FILE:LINE (and column for a bad number) for a vector whose length is not the parameter's
/// row length, a header that says another one, or a value that is not a number; naming the
/// file when it cannot be read.
EmbeddingReport load_embeddings(Session& session, const std::string& param, const std::string& path,
                                const data::Vocab& vocab, const Dataset& ds);

} // namespace pejit::runtime
