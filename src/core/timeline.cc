#include "core/timeline.h"

namespace mxplugin {
namespace {

std::string JsonEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    out += c;
  }
  return out;
}

}  // namespace

bool Timeline::Start(const std::string& path_template, int rank, bool mark_cycles) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (file_ != nullptr) {
    std::fputs("\n]\n", file_);
    std::fclose(file_);
    file_ = nullptr;
    active_ = false;
  }
  // One path for all ranks is written by rank 0 alone (as Horovod does);
  // "{rank}" in the path gives every rank a file of its own.
  std::string path = path_template;
  const std::string placeholder = "{rank}";
  auto at = path.find(placeholder);
  if (at == std::string::npos && rank != 0) return true;
  while (at != std::string::npos) {
    path.replace(at, placeholder.size(), std::to_string(rank));
    at = path.find(placeholder);
  }
  file_ = std::fopen(path.c_str(), "w");
  if (file_ == nullptr) return false;
  active_ = true;
  std::fputs("[\n", file_);
  first_event_ = true;
  rows_.clear();
  rank_ = rank;
  mark_cycles_ = mark_cycles;
  origin_ = Clock::now();
  return true;
}

void Timeline::Stop() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (file_ == nullptr) return;
  std::fputs("\n]\n", file_);
  std::fclose(file_);
  file_ = nullptr;
  active_ = false;
}

double Timeline::Micros(Clock::time_point t) const {
  return std::chrono::duration<double, std::micro>(t - origin_).count();
}

int Timeline::RowFor(const std::string& tensor) {
  auto it = rows_.find(tensor);
  if (it != rows_.end()) return it->second;
  int row = static_cast<int>(rows_.size()) + 1;
  rows_[tensor] = row;
  std::fprintf(file_, "%s{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, \"args\": {\"name\": \"%s\"}}",
               first_event_ ? "" : ",\n", rank_, row, JsonEscape(tensor).c_str());
  first_event_ = false;
  return row;
}

void Timeline::Record(const std::string& tensor, const char* phase, Clock::time_point begin,
                      Clock::time_point end) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (file_ == nullptr) return;
  int row = RowFor(tensor);
  std::fprintf(file_, ",\n{\"name\": \"%s\", \"ph\": \"X\", \"pid\": %d, \"tid\": %d, \"ts\": %.3f, \"dur\": %.3f}",
               phase, rank_, row, Micros(begin), Micros(end) - Micros(begin));
}

void Timeline::MarkCycle(Clock::time_point at) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (file_ == nullptr || !mark_cycles_) return;
  std::fprintf(file_, "%s{\"name\": \"CYCLE_START\", \"ph\": \"i\", \"s\": \"g\", \"pid\": %d, \"tid\": 0, \"ts\": %.3f}",
               first_event_ ? "" : ",\n", rank_, Micros(at));
  first_event_ = false;
}

}  // namespace mxplugin
