// Shared declarations of the Python extension `_pejit`: the session object Python holds (a
// pejit::Session with the tree encoder of its model), data sets read from files, and the
// conversions between Python objects and pejit values.
#pragma once

#include "pejit/pejit.h"
#include "runtime/data/tree.h"
#include "runtime/train/common.h"
#include "runtime/train/encode.h"
#include "src/interp/value.h"
#include "src/ir/module.h"

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace pejit::python {

namespace py = pybind11;

/// A vocabulary shared by the data sets read with it (training data grows it, dev data maps
/// unknown words to <unk>).
struct PyVocab {
  data::Vocab v;
};

/// Trees (the model's batch element is an ADT) or sentences (List[i32[]]), as `pejit train`
/// reads them: the command's data set, with the vocabulary it was read with.
struct PyDataset : runtime::Dataset {
  std::shared_ptr<PyVocab> vocab;
};

/// A parse tree on its own (read from a bracket line or built from nested tuples).
struct PyTree {
  data::ParseTree t;
};

/// What Python holds for a session: the session and the encoder of its tree type, made again
/// when add_source changes the module.
struct PySession {
  Session s;
  explicit PySession(Session&& x) : s(std::move(x)) {}
  /// One thread at a time uses the session (the C++ Session is not thread-safe, and steps run
  /// without the GIL). Called with the GIL held; it never waits for the lock while holding the
  /// GIL (the holder may need it), so threads calling one session take turns, never deadlock.
  std::unique_lock<std::recursive_mutex> lock();
  const ir::Module& module() const;
  /// The element type of `entry`'s batch argument (List[T]).
  ir::Type batch_element(const std::string& entry) const;
  /// The encoder of trees into values of ADT `adt` (cached per ADT and module generation).
  const runtime::TreeEncoder& encoder(const std::string& adt);
  /// Examples idx[0..n) of `ds` as one batch (a List), encoded as `pejit train` does: each
  /// example once, then kept for every later batch that holds it (runtime::KeptExamples), while
  /// the entry's batch type and the data set's size are the same. Kept for a few data sets, and
  /// while `ds` lives.
  interp::Value encode(const std::shared_ptr<const PyDataset>& ds, const int64_t* idx, size_t n,
                       const std::string& entry);
  /// Examples encoded into batches so far, by encode() and by the scoring sets that share its
  /// examples ("encoded_examples" in stats()): a data set's examples count once while kept.
  int64_t encoded_examples() const;
  /// `ds` in batches of `batch` made ready to be scored as `pejit train` scores an epoch (one
  /// pass per batch where the model has the evaluation entry): kept from an earlier call on
  /// the same data set and batch size while the module and the data set's size are the same,
  /// so its batches are encoded once. Kept for a few data sets, and while `ds` lives.
  runtime::EvalSet& eval_set(const std::shared_ptr<const PyDataset>& ds, int batch);

private:
  /// A data set's examples, each encoded once (runtime::KeptExamples over its own encoder).
  /// When it goes, what it encoded is added to `retired` (encoded_examples()).
  struct Examples {
    Examples(const ir::Module& m, const PyDataset& ds, const ir::Type& elem,
             const interp::DimBindings& dims, int64_t& retired)
        : enc(m, ds, elem, dims), kept(ds, enc), retired(&retired) {}
    Examples(const Examples&) = delete;
    Examples& operator=(const Examples&) = delete;
    ~Examples() { *retired += kept.encoded(); }
    runtime::Encoder enc;
    runtime::KeptExamples kept; // over the data set and enc
    int64_t* retired;
  };
  struct Kept {
    std::weak_ptr<const PyDataset> data;
    size_t size = 0;
    std::string entry, stamp; // stamp: batch_stamp(the entry's batch element)
    std::shared_ptr<Examples> examples;
  };
  /// What encoding examples into `elem` depends on: its type and the ADTs' versions (not the
  /// module's generation, which the scoring's hidden entry and changed functions move).
  std::string batch_stamp(const ir::Type& elem) const;
  /// encode()'s entry for `ds` and `entry` while it holds for `stamp`, else none (and the
  /// entry, made for another stamp or another size of the data set, dropped).
  std::vector<Kept>::iterator find_kept(const std::shared_ptr<const PyDataset>& ds,
                                        const std::string& entry, const std::string& stamp);
  struct Scored {
    std::weak_ptr<const PyDataset> data;
    size_t size = 0;
    int batch = 0;
    uint64_t generation = 0;
    std::unique_ptr<runtime::Encoder> enc;
    std::shared_ptr<Examples> examples;    // encode()'s of the data set, which set shares
    std::unique_ptr<runtime::EvalSet> set; // over *data and *enc
  };
  int64_t retired_encoded_ = 0; // by the Examples gone (declared first: they go before it)
  std::vector<Scored> scored_;  // the most recent last
  std::vector<Kept> kept_;      // the most recent last
  std::recursive_mutex mu_;
  std::optional<runtime::TreeEncoder> enc_;
  std::string enc_adt_;
  uint64_t enc_gen_ = ~0ull;
};

/// An opaque value held by Python (an ADT value, a batch built once and stepped many times).
struct PyValue {
  Value v;
};

/// A Python object as a value of type `t` (type-directed: ints become i32 scalars where the
/// type is a tensor, Int where it is Int; numpy arrays and nested lists become tensors; lists
/// become List; tuples become tuples, or ADT values when they start with a constructor's name;
/// PyTree objects become the model's tree ADT). Throws pejit::Error naming `where`.
interp::Value to_value(PySession& ps, py::handle o, const ir::Type& t, const std::string& where);
/// A value as Python: scalars as int/float/bool, other tensors as numpy arrays (copies), lists
/// and tuples as list and tuple, ADT values as pejit.Value.
py::object from_value(const interp::Value& v);

void bind_data(py::module_& m);

} // namespace pejit::python
