#include "core/request.h"

#include <cstring>

namespace mxplugin {

bool RequestMeta::SameSignature(const RequestMeta& o) const {
  return name == o.name && op == o.op && reduce_op == o.reduce_op && dtype == o.dtype &&
         device == o.device && shape == o.shape && root_rank == o.root_rank &&
         prescale == o.prescale && postscale == o.postscale && splits == o.splits &&
         requested_op == o.requested_op && group == o.group && group_size == o.group_size &&
         zeros_when_joined == o.zeros_when_joined;
}

std::string ControlText(const std::vector<int64_t>& shape) {
  if (shape.empty()) return "";
  std::string args;
  for (size_t i = 1; i < shape.size(); ++i) args += (i > 1 ? ", " : "") + std::to_string(shape[i]);
  switch (static_cast<ControlKind>(shape[0])) {
    case ControlKind::kAddProcessSet: return "add_process_set(ranks [" + args + "])";
    case ControlKind::kRemoveProcessSet: return "remove_process_set(id " + args + ")";
    case ControlKind::kReferenceAllreduce: return "reference_allreduce(" + args + " elements)";
  }
  return "control call " + std::to_string(shape[0]) + "(" + args + ")";
}

void Completion::Finish(const Status& status) {
  if (!status.ok() && !failed_.exchange(true)) first_error_ = status;
  if (remaining_.fetch_sub(1) == 1) done_(failed_ ? first_error_ : Status::Ok());
}

namespace {

class Writer {
 public:
  template <typename T>
  void Put(T v) { out_.append(reinterpret_cast<const char*>(&v), sizeof(T)); }
  void PutString(const std::string& s) {
    Put<uint32_t>(static_cast<uint32_t>(s.size()));
    out_.append(s);
  }
  void PutInts(const std::vector<int64_t>& v) {
    Put<uint32_t>(static_cast<uint32_t>(v.size()));
    out_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(int64_t));
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(const std::string& in) : in_(in) {}
  template <typename T>
  T Get() {
    Need(sizeof(T));
    T v;
    std::memcpy(&v, in_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string GetString() {
    uint32_t n = Get<uint32_t>();
    Need(n);
    std::string s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  std::vector<int64_t> GetInts() {
    uint32_t n = Get<uint32_t>();
    Need(n * sizeof(int64_t));
    std::vector<int64_t> v(n);
    std::memcpy(v.data(), in_.data() + pos_, n * sizeof(int64_t));
    pos_ += n * sizeof(int64_t);
    return v;
  }
  bool done() const { return pos_ >= in_.size(); }

 private:
  void Need(size_t n) {
    if (pos_ + n > in_.size()) throw Error(Status::Internal("truncated negotiation message"));
  }
  const std::string& in_;
  size_t pos_ = 0;
};

}  // namespace

std::string SerializeMetas(const std::vector<RequestMeta>& metas) {
  Writer w;
  w.Put<uint32_t>(static_cast<uint32_t>(metas.size()));
  for (const auto& m : metas) {
    w.PutString(m.name);
    w.Put<int32_t>(static_cast<int32_t>(m.op));
    w.Put<int32_t>(static_cast<int32_t>(m.reduce_op));
    w.Put<int32_t>(static_cast<int32_t>(m.dtype));
    w.Put<int32_t>(m.device);
    w.PutInts(m.shape);
    w.Put<int32_t>(m.root_rank);
    w.Put<int32_t>(m.set_root);
    w.Put<double>(m.prescale);
    w.Put<double>(m.postscale);
    w.PutInts(m.splits);
    w.Put<int32_t>(m.priority);
    w.Put<int32_t>(m.rank);
    w.Put<int32_t>(static_cast<int32_t>(m.requested_op));
    w.PutString(m.group);
    w.Put<int32_t>(m.group_size);
    w.Put<int32_t>(m.zeros_when_joined ? 1 : 0);
  }
  return w.Take();
}

std::vector<RequestMeta> ParseMetas(const std::string& bytes) {
  std::vector<RequestMeta> metas;
  if (bytes.empty()) return metas;
  Reader r(bytes);
  uint32_t n = r.Get<uint32_t>();
  metas.resize(n);
  for (auto& m : metas) {
    m.name = r.GetString();
    m.op = static_cast<OpType>(r.Get<int32_t>());
    m.reduce_op = static_cast<ReduceOp>(r.Get<int32_t>());
    m.dtype = static_cast<DataType>(r.Get<int32_t>());
    m.device = r.Get<int32_t>();
    m.shape = r.GetInts();
    m.root_rank = r.Get<int32_t>();
    m.set_root = r.Get<int32_t>();
    m.prescale = r.Get<double>();
    m.postscale = r.Get<double>();
    m.splits = r.GetInts();
    m.priority = r.Get<int32_t>();
    m.rank = r.Get<int32_t>();
    m.requested_op = static_cast<ReduceOp>(r.Get<int32_t>());
    m.group = r.GetString();
    m.group_size = r.Get<int32_t>();
    m.zeros_when_joined = r.Get<int32_t>() != 0;
  }
  return metas;
}

std::string SerializePlan(const RoundPlan& plan) {
  Writer w;
  w.Put<uint32_t>(static_cast<uint32_t>(plan.responses.size()));
  for (const auto& r : plan.responses) {
    w.Put<int32_t>(static_cast<int32_t>(r.kind));
    w.PutString(r.name);
    w.Put<int32_t>(static_cast<int32_t>(r.op));
    w.PutString(r.error);
    w.PutInts(r.sizes);
    w.Put<int32_t>(r.priority);
    w.PutInts(r.joined);
    if (!r.joined.empty()) w.PutString(SerializeMetas({r.meta}));
  }
  w.Put<uint32_t>(static_cast<uint32_t>(plan.invalidated.size()));
  for (const auto& name : plan.invalidated) w.PutString(name);
  w.Put<int32_t>(plan.full_rounds ? 1 : 0);
  return w.Take();
}

RoundPlan ParsePlan(const std::string& bytes) {
  RoundPlan plan;
  Reader r(bytes);
  plan.responses.resize(r.Get<uint32_t>());
  for (auto& resp : plan.responses) {
    resp.kind = static_cast<Response::Kind>(r.Get<int32_t>());
    resp.name = r.GetString();
    resp.op = static_cast<OpType>(r.Get<int32_t>());
    resp.error = r.GetString();
    resp.sizes = r.GetInts();
    resp.priority = r.Get<int32_t>();
    resp.joined = r.GetInts();
    if (!resp.joined.empty()) resp.meta = ParseMetas(r.GetString()).at(0);
  }
  plan.invalidated.resize(r.Get<uint32_t>());
  for (auto& name : plan.invalidated) name = r.GetString();
  plan.full_rounds = r.Get<int32_t>() != 0;
  return plan;
}

}  // namespace mxplugin
