// BatchFeed (feed.h): the training loop's batches, made and handed to the pipeline ahead.
#include "runtime/train/feed.h"

#include "runtime/session_access.h"

#include <algorithm>

namespace pejit::runtime {

BatchFeed::BatchFeed(Session& session, KeptExamples& examples, const Dataset& ds,
                     const std::vector<size_t>& order, size_t batch, size_t first, size_t look)
    : session_(session), examples_(examples), ds_(ds), order_(order), batch_(batch),
      batches_((ds.size() + batch - 1) / batch), look_(look), made_(first), prefetched_(first) {}

void BatchFeed::make_upto(size_t upto) {
  const size_t n = ds_.size();
  for (; made_ < std::min(upto, batches_); ++made_) {
    const size_t lo = made_ * batch_, hi = std::min(n, lo + batch_);
    auto [first_here, end_here] = session_.slice(hi - lo); // this rank's part
    ahead_.emplace_back(
        SessionAccess::wrap(examples_.batch(order_, lo + first_here, lo + end_here)),
        end_here > first_here);
  }
}

void BatchFeed::prefetch_upto(size_t upto) {
  std::vector<pejit::Value> fresh;
  const size_t front = made_ - ahead_.size(); // the batch at ahead_.front()
  for (; prefetched_ < std::min(upto, made_); ++prefetched_) {
    const auto& [v, has_rows] = ahead_[prefetched_ - front];
    if (has_rows)
      fresh.push_back(v);
  }
  if (!fresh.empty())
    session_.prefetch("loss", fresh);
}

pejit::Value BatchFeed::take(size_t b) {
  make_upto(b + (look_ > 0 ? look_ + 2 : 1));
  if (look_ > 0)
    prefetch_upto(b + 1 + look_);
  pejit::Value v = std::move(ahead_.front().first);
  ahead_.pop_front();
  return v;
}

void BatchFeed::stepped(size_t b) {
  if (look_ == 0)
    return;
  prefetch_upto(b + 2 + look_);
  make_upto(b + 3 + look_);
}

} // namespace pejit::runtime
