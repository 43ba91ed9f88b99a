#include "core/fusion_buffer.h"

#include <new>

namespace mxplugin {

char* FusionBuffer::Reserve(int64_t bytes) {
  if (bytes <= capacity_) return data_;
  std::free(data_);
  data_ = nullptr;
  capacity_ = 0;
  int64_t rounded = AlignFusionOffset(bytes);
  data_ = static_cast<char*>(std::aligned_alloc(64, static_cast<size_t>(rounded)));
  if (data_ == nullptr) throw std::bad_alloc();
  capacity_ = rounded;
  return data_;
}

}  // namespace mxplugin
