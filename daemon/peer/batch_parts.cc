// SPDX-License-Identifier: Apache-2.0
#include "daemon/peer/batch_parts.h"

#include <google/protobuf/io/coded_stream.h>

namespace gradsync::peer {
namespace {

// Bytes an element of `size` adds to a repeated message field numbered
// below 16 (Batch.responses, NegotiatedResponse.requests): tag, length, body.
size_t elementBytes(size_t size) { return 1 + google::protobuf::io::CodedOutputStream::VarintSize64(size) + size; }

// Builds the parts: whole responses while they fit, a response too large
// for a part of its own cut between its requests.
class Splitter {
 public:
  Splitter(const v1::Batch& whole, size_t budget) : budget_(budget) {
    header_.set_sequence(whole.sequence());
    header_.set_epoch(whole.epoch());
    header_.set_fusion_threshold_bytes(whole.fusion_threshold_bytes());
    header_bytes_ = header_.ByteSizeLong() + 2;  // + `more`
    startPart();
  }

  void add(v1::NegotiatedResponse&& response) {
    const size_t bytes = elementBytes(response.ByteSizeLong());
    if (bytes <= budget_ - header_bytes_) {
      if (used_ + bytes > budget_) startPart();
      *part().add_responses() = std::move(response);
      used_ += bytes;
      return;
    }
    cut(response);
  }

  std::vector<v1::Batch> finish() {
    if (parts_.back().responses_size() == 0 && parts_.size() > 1) parts_.pop_back();
    for (size_t i = 0; i + 1 < parts_.size(); ++i) parts_[i].set_more(true);
    return std::move(parts_);
  }

 private:
  v1::Batch& part() { return parts_.back(); }

  void startPart() {
    if (!parts_.empty() && part().responses_size() == 0) return;
    parts_.push_back(header_);
    used_ = header_bytes_;
  }

  // The response's own fields go first, then its requests as they fit,
  // each slice but the last marked `continued`.
  void cut(const v1::NegotiatedResponse& response) {
    v1::NegotiatedResponse slice = response;
    slice.clear_requests();
    slice.clear_ranks();  // the requests carry their ranks
    slice.set_continued(false);
    startPart();
    size_t slice_bytes = slice.ByteSizeLong() + 8;  // + `continued`, and the length growing
    for (const auto& request : response.requests()) {
      const size_t bytes = elementBytes(request.ByteSizeLong());
      if (slice.requests_size() > 0 && used_ + elementBytes(slice_bytes + bytes) > budget_) {
        slice.set_continued(true);
        *part().add_responses() = std::move(slice);
        startPart();
        slice = v1::NegotiatedResponse();
        slice_bytes = 8;
      }
      *slice.add_requests() = request;
      slice_bytes += bytes;
    }
    used_ += elementBytes(slice_bytes);
    *part().add_responses() = std::move(slice);
  }

  const size_t budget_;
  v1::Batch header_;
  size_t header_bytes_ = 0;
  std::vector<v1::Batch> parts_;
  size_t used_ = 0;
};

}  // namespace

std::vector<v1::Batch> splitBatch(v1::Batch whole, size_t budget) {
  std::vector<v1::Batch> parts;
  if (whole.ByteSizeLong() <= budget) {
    parts.push_back(std::move(whole));
    return parts;
  }
  Splitter splitter(whole, budget);
  for (auto& response : *whole.mutable_responses()) splitter.add(std::move(response));
  return splitter.finish();
}

StatusOr<std::optional<v1::Batch>> BatchAssembler::add(v1::Batch part) {
  bytes_ += part.ByteSizeLong();
  if (!partial_) {
    partial_ = std::move(part);
  } else {
    if (part.sequence() != partial_->sequence() || part.epoch() != partial_->epoch()) {
      const std::string message = "a part of batch " + std::to_string(part.sequence()) + " (epoch " +
                                  std::to_string(part.epoch()) + ") came while batch " +
                                  std::to_string(partial_->sequence()) + " (epoch " +
                                  std::to_string(partial_->epoch()) + ") was incomplete";
      reset();
      return dataLoss(message);
    }
    for (int i = 0; i < part.responses_size(); ++i) {
      auto* response = part.mutable_responses(i);
      auto* responses = partial_->mutable_responses();
      if (i == 0 && !responses->empty() && responses->rbegin()->continued()) {
        auto* last = &*responses->rbegin();
        for (auto& request : *response->mutable_requests()) *last->add_requests() = std::move(request);
        last->set_continued(response->continued());
      } else {
        *partial_->add_responses() = std::move(*response);
      }
    }
    partial_->set_more(part.more());
  }
  if (bytes_ > kLimit) {
    reset();
    return dataLoss("a batch from the leader passed " + std::to_string(kLimit >> 20) + " MiB");
  }
  if (partial_->more()) return std::optional<v1::Batch>();
  if (!partial_->responses().empty() && partial_->responses().rbegin()->continued()) {
    reset();
    return dataLoss("the leader's batch ended inside a response");
  }
  std::optional<v1::Batch> whole = std::move(partial_);
  reset();
  return whole;
}

void BatchAssembler::reset() {
  partial_.reset();
  bytes_ = 0;
}

}  // namespace gradsync::peer
