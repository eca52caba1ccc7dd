// SPDX-License-Identifier: Apache-2.0
#include "daemon/peer/coordinate_reactor.h"

namespace gradsync::peer {

// The stream as the job holds it: the outbox, and the reactor while it
// lives. A write starts from send() only when none was in flight, a cut
// cancels the call before the stream may finish (Outbox::cancelled), and the
// stream finishes only once nothing is in flight: so the reactor and its
// call are alive whenever send() touches them. What is sent after the end
// finds the outbox closed.
class CoordinateReactor::Sink : public FollowerStream {
 public:
  Sink(CoordinateReactor* reactor, Outbox::Limits limits) : outbox(limits), reactor_(reactor) {}

  bool send(const SharedMessage& message) override {
    switch (outbox.push(message)) {
      case Outbox::Push::kWriteFront:
        reactor_->StartWrite(outbox.front());
        return true;
      case Outbox::Push::kQueued:
        return true;
      case Outbox::Push::kOverflow:
        reactor_->cut(outbox.overflow());
        if (outbox.cancelled()) reactor_->Finish(reactor_->status());
        return false;
      case Outbox::Push::kClosed:
        return false;
    }
    return false;
  }

  Outbox outbox;

 private:
  CoordinateReactor* const reactor_;
};

CoordinateReactor::CoordinateReactor(grpc::CallbackServerContext* context, Resolve resolve, Outbox::Limits limits)
    : context_(context), resolve_(std::move(resolve)), sink_(std::make_shared<Sink>(this, limits)) {
  StartRead(&incoming_);
}

void CoordinateReactor::OnReadDone(bool ok) {
  if (!ok) {  // the follower closed its side, or the call ended
    endSession();
    finishWhenWritten(status());
    return;
  }
  grpc::Status handled;
  if (!session_) {
    if (!incoming_.has_hello()) {
      handled = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "the first message must be hello");
    } else {
      handled = resolve_(incoming_, sink_, &session_);
    }
  } else {
    handled = session_->onMessage(incoming_);
  }
  if (!handled.ok()) {
    endSession();
    finishWhenWritten(handled);
    return;
  }
  StartRead(&incoming_);
}

void CoordinateReactor::OnWriteDone(bool ok) {
  const Outbox::AfterWrite after = sink_->outbox.written(ok);
  if (after.next != nullptr) {
    StartWrite(after.next);
  } else if (after.finish) {
    Finish(status());
  }
}

void CoordinateReactor::OnDone() {
  endSession();
  session_.reset();
  delete this;
}

void CoordinateReactor::endSession() {
  std::string why;
  {
    MutexLock lock(mutex_);
    if (session_ended_ || !session_) return;
    session_ended_ = true;
    why = cut_;
  }
  // The outbox says it overflowed before the cut is under way: the read may
  // end on another thread in between.
  if (why.empty()) why = sink_->outbox.overflow();
  session_->onEnd(context_->IsCancelled() || !why.empty(), why);
}

void CoordinateReactor::finishWhenWritten(const grpc::Status& status) {
  {
    MutexLock lock(mutex_);
    if (status_.ok()) status_ = status;
  }
  if (sink_->outbox.closeWhenWritten()) Finish(this->status());
}

grpc::Status CoordinateReactor::status() const {
  MutexLock lock(mutex_);
  return status_;
}

void CoordinateReactor::cut(const std::string& why) {
  {
    MutexLock lock(mutex_);
    cut_ = why;
    status_ = grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "the leader cut this follower: " + why);
  }
  // The write in flight (stuck) fails, the read ends; the stream finishes
  // once the caller says the call is cancelled (Outbox::cancelled).
  context_->TryCancel();
}

}  // namespace gradsync::peer
