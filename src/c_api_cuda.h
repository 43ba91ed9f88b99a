/* The C surface of the CUDA scale and copy kernels (cuda/scale_kernels.h) on
 * raw device pointers, so they can be driven without MXNet (for example from
 * CuPy arrays). Conventions as in c_api.h: every function returns 0 on success
 * or a StatusCode, and mxp_last_error() then holds the message. In a build
 * without CUDA every function fails with a message saying so. Streams are
 * cudaStream_t values (NULL: the legacy default stream); the kernels are
 * only enqueued on them. Before launching, each call checks that every
 * pointer is aligned to its element size (a misaligned one would make the
 * kernel fault and lose the CUDA context), that a device exists, and that
 * every pointer is one a kernel may dereference. */
#ifndef MXPLUGIN_C_API_CUDA_H_
#define MXPLUGIN_C_API_CUDA_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One tensor of a batched copy: dst[i] = src[i] * scale for i < count
 * (elements of the batch's dtype). src == dst scales in place. */
typedef struct {
  const void* src;
  void* dst;
  int64_t count;
  double scale;
} mxp_cuda_copy;

/* Number of CUDA devices (0 when there is no GPU or driver; the reason is
 * then in mxp_last_error()). Fails only in a build without CUDA. */
int mxp_cuda_device_count(int32_t* out);

/* data[i] *= factor for i < count. */
int mxp_cuda_scale(void* data, int64_t count, int32_t dtype, double factor, void* stream);
/* dst[i] = src[i] * factor for i < count; dst may equal src. */
int mxp_cuda_copy_and_scale(void* dst, const void* src, int64_t count, int32_t dtype, double factor, void* stream);
/* Every copy of `copies`, all of `dtype`: packing tensors into a fusion
 * buffer (dst at offsets into it) or unpacking them (src at offsets). */
int mxp_cuda_batched_copy(const mxp_cuda_copy* copies, int32_t n, int32_t dtype, void* stream);
/* Waits for the work queued on `stream`; fails with the first error of it. */
int mxp_cuda_synchronize(void* stream);

#ifdef __cplusplus
}
#endif

#endif /* MXPLUGIN_C_API_CUDA_H_ */
