#include "core/eval/gemm.h"

#include <cblas.h>

#include <mutex>

namespace graft::eval {
namespace {

thread_local bool t_reference = false;

// Graft links OpenBLAS's serial variant (CMakeLists.txt), whose products run in their caller's
// thread; the thread count is set to one all the same, once, before the first product (it is
// process-wide state that products read), should a threaded variant be linked. One thread makes
// results the same run to run: the order of each output's additions depends only on the extents
// and the CPU's kernel, not on a split between threads.
//
// Debian's serial variant is built without USE_LOCKING (it takes no lock around its packing
// buffers), so concurrent callers (graftd's workers) would race for the same buffer: products
// are serialized by `g_dgemm`. A block is a few milliseconds, so workers take turns finely.
std::mutex g_dgemm;

void single_threaded_once() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

}  // namespace

bool reference_kernels() { return t_reference; }

ReferenceKernelsScope::ReferenceKernelsScope(bool reference) : previous_(t_reference) {
  t_reference = reference;
}
ReferenceKernelsScope::~ReferenceKernelsScope() { t_reference = previous_; }

namespace {

// out[i * cols + j] = op(X)[r0 + i][c0 + j], reading X's elements through `at` (element index).
template <typename At>
void pack_with(const GemmOperand& x, int64_t r0, int64_t rows, int64_t c0, int64_t cols,
               double* out, At at) {
  const int64_t base = x.offset;
  if (!x.trans) {
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t from = base + (r0 + i) * x.ld + c0;
      double* o = out + i * cols;
      for (int64_t j = 0; j < cols; ++j) o[j] = at(from + j);
    }
    return;
  }
  // op(X)[r][c] = X[c][r]: X's rows c0.. are read along, the panel's columns written.
  for (int64_t j = 0; j < cols; ++j) {
    const int64_t from = base + (c0 + j) * x.ld + r0;
    for (int64_t i = 0; i < rows; ++i) out[i * cols + j] = at(from + i);
  }
}

}  // namespace

void pack_block(const GemmOperand& x, int64_t r0, int64_t rows, int64_t c0, int64_t cols,
                double* out) {
  if (x.data != nullptr) {
    pack_with(x, r0, rows, c0, cols, out, [p = x.data](int64_t i) { return p[i]; });
    return;
  }
  const Tensor& t = *x.tensor;
  if (t.dtype() == onnx::TensorProto::FLOAT) {
    pack_with(x, r0, rows, c0, cols, out,
              [p = t.data<float>()](int64_t i) { return static_cast<double>(p[i]); });
  } else if (t.dtype() == onnx::TensorProto::DOUBLE) {
    pack_with(x, r0, rows, c0, cols, out, [p = t.data<double>()](int64_t i) { return p[i]; });
  } else {
    pack_with(x, r0, rows, c0, cols, out, [&t](int64_t i) { return t.get_double(i); });
  }
}

void dgemm_block(int64_t row0, int64_t rows, int64_t col0, int64_t cols, int64_t k, double alpha,
                 const GemmOperand& a, const GemmOperand& b, double* c) {
  single_threaded_once();
  // Rows [row0, row0 + rows) of op(A): rows of A, or columns of A as stored when transposed;
  // columns [col0, col0 + cols) of op(B): columns of B, or rows of B as stored when transposed.
  const double* pa = a.data + (a.trans ? row0 : row0 * a.ld);
  const double* pb = b.data + (b.trans ? col0 * b.ld : col0);
  {
    std::lock_guard<std::mutex> lock(g_dgemm);
    cblas_dgemm(CblasRowMajor, a.trans ? CblasTrans : CblasNoTrans,
                b.trans ? CblasTrans : CblasNoTrans, static_cast<int>(rows), static_cast<int>(cols),
                static_cast<int>(k), alpha, pa, static_cast<int>(a.ld), pb, static_cast<int>(b.ld),
                1.0, c, static_cast<int>(cols));
  }
  spend_work(static_cast<uint64_t>(rows) * static_cast<uint64_t>(cols) * static_cast<uint64_t>(k));
}

}  // namespace graft::eval
