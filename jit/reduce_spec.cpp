// ReduceSpec's canonical text and validation: plain C++, no LLVM.
#include "jit/reduce_spec.h"

#include "pejit/error.h"

#include <fmt/format.h>

namespace pejit::jit {

const char* reduce_kind_name(ReduceKind kind) {
  switch (kind) {
  case ReduceKind::SumRows:
    return "sum_rows";
  case ReduceKind::CrossEntropy:
    return "cross_entropy";
  case ReduceKind::CrossEntropyBwd:
    return "cross_entropy_bwd";
  case ReduceKind::SumCols:
    return "sum_cols";
  case ReduceKind::MeanCols:
    return "mean_cols";
  case ReduceKind::Softmax:
    return "softmax";
  case ReduceKind::LogSoftmax:
    return "log_softmax";
  case ReduceKind::SoftmaxBwd:
    return "softmax_bwd";
  case ReduceKind::LogSoftmaxBwd:
    return "log_softmax_bwd";
  }
  return "?";
}

int reduce_inputs(ReduceKind kind) {
  switch (kind) {
  case ReduceKind::CrossEntropy:
  case ReduceKind::SoftmaxBwd:
  case ReduceKind::LogSoftmaxBwd:
    return 2;
  case ReduceKind::CrossEntropyBwd:
    return 3;
  default:
    return 1;
  }
}

std::string ReduceSpec::signature() const {
  return fmt::format("reduce {} {} w={}{}{}{}", dtype, reduce_kind_name(kind), width,
                     shared_logits ? " shared=logits" : "", shared_label ? " shared=label" : "",
                     row_stats ? " stats" : "");
}

std::string ReduceSpec::canonical_text() const {
  return signature() + " sched=" + schedule;
}

void ReduceSpec::validate() const {
  if (width < 1)
    throw Error(fmt::format("reduce kernel: width {} < 1", width));
  if (dtype != "f32")
    throw Error("reduce kernel: unsupported dtype '" + dtype + "' (only f32)");
  if (schedule != "default")
    throw Error("reduce kernel: unknown schedule '" + schedule + "' (only \"default\")");
  const bool ce = kind == ReduceKind::CrossEntropy || kind == ReduceKind::CrossEntropyBwd;
  if ((shared_logits || shared_label) && !ce)
    throw Error(fmt::format("reduce kernel: a shared operand of {} (only cross-entropy)",
                            reduce_kind_name(kind)));
  if (shared_logits && shared_label)
    throw Error("reduce kernel: cross-entropy with both logits and label shared");
  if (row_stats && (!ce || shared_logits))
    throw Error(fmt::format("reduce kernel: row statistics of {}{} (only cross-entropy over "
                            "per-row logits)",
                            reduce_kind_name(kind), shared_logits ? " with shared logits" : ""));
  switch (kind) {
  case ReduceKind::SumRows:
  case ReduceKind::CrossEntropy:
  case ReduceKind::CrossEntropyBwd:
  case ReduceKind::SumCols:
  case ReduceKind::MeanCols:
  case ReduceKind::Softmax:
  case ReduceKind::LogSoftmax:
  case ReduceKind::SoftmaxBwd:
  case ReduceKind::LogSoftmaxBwd:
    return;
  }
  throw Error("reduce kernel: unknown kind");
}

} // namespace pejit::jit
