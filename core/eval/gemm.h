// Matrix products in double for the floating-point kernels (MatMul, Gemm, FusedMatMul, Conv and
// ConvInteger): OpenBLAS's dgemm, called single-threaded, on blocks of the output so the work is
// charged (and the run's deadline polled) as it goes and the output buffer stays bounded.
//
// The kernels keep their plain loops as the reference: a thread can select them
// (ReferenceKernelsScope) so that tests and fuzzers compare the two. Both convert operands to
// double, accumulate in double and round once to the output type; only the order of the
// additions differs, so results agree to within double rounding.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>

#include "core/eval/budget.h"
#include "core/eval/tensor.h"

namespace graft::eval {

// Whether the floating-point MatMul, Gemm, FusedMatMul and Conv kernels (and ConvInteger) of this
// thread run their reference loops instead of dgemm. False unless a ReferenceKernelsScope says so.
bool reference_kernels();

// Selects the reference loops (or, with false, dgemm) on this thread for the scope's lifetime.
// For tests and fuzzers only.
class ReferenceKernelsScope {
 public:
  explicit ReferenceKernelsScope(bool reference = true);
  ~ReferenceKernelsScope();
  ReferenceKernelsScope(const ReferenceKernelsScope&) = delete;
  ReferenceKernelsScope& operator=(const ReferenceKernelsScope&) = delete;

 private:
  bool previous_;
};

// A row-major matrix operand of a product: `trans` reads it transposed (op(X) = X^T); `ld` is
// the distance between consecutive rows of X as stored. Its elements are doubles at `data`, or
// (`data` null) the elements of the float tensor `tensor` from element `offset` on, which
// gemm_by_blocks converts to double a panel at a time, as its blocks need them: a product does
// not convert a whole operand (a model's weights) into a buffer of its own.
struct GemmOperand {
  const double* data;
  bool trans;
  int64_t ld;
  const Tensor* tensor = nullptr;
  int64_t offset = 0;
};

// The operand `x` (a float tensor: FLOAT, DOUBLE, FLOAT16, BFLOAT16) from element `offset` on;
// a DOUBLE tensor is read in place.
inline GemmOperand tensor_operand(const Tensor& x, int64_t offset, bool trans, int64_t ld) {
  if (x.dtype() == onnx::TensorProto::DOUBLE) return {x.data<double>() + offset, trans, ld};
  return {nullptr, trans, ld, &x, offset};
}

// out (rows x cols, row-major) = the block [r0, r0 + rows) x [c0, c0 + cols) of op(X) as doubles.
void pack_block(const GemmOperand& x, int64_t r0, int64_t rows, int64_t c0, int64_t cols,
                double* out);

// Whether dgemm can take these extents (its integers are 32-bit) and the reference loops are not
// selected: the kernels run their reference loops otherwise.
inline bool use_blas(int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb) {
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  return !reference_kernels() && m <= kMax && n <= kMax && k <= kMax && lda <= kMax &&
         ldb <= kMax && lda >= 1 && ldb >= 1;
}

// c (rows x cols, row-major, leading dimension cols) += alpha * the block [row0, row0 + rows) x
// [col0, col0 + cols) of op(A) op(B) (op(A) is m x k, op(B) is k x n). Charges rows * cols * k
// units of work (polling the run's deadline) once the product is done. Single-threaded: OpenBLAS
// is told so once per process, before its first product.
void dgemm_block(int64_t row0, int64_t rows, int64_t col0, int64_t cols, int64_t k, double alpha,
                 const GemmOperand& a, const GemmOperand& b, double* c);

// Scratch doubles a product's block of output, or Conv's gathered window values, may hold
// (2 MiB): enough for products that keep dgemm near its peak, small beside a run's memory budget.
constexpr int64_t kGemmScratchDoubles = int64_t{1} << 18;

// The blocks one product is computed in: up to 256 rows (so that dgemm packs each block of B
// once per 256 rows of A) by as many columns as make about 2^25 multiply-adds (two or three
// milliseconds between polls of the deadline, 32 Budget::kPollUnits) within kGemmScratchDoubles,
// and at least 64 (so that A's rows are packed once per 64 columns).
struct GemmBlocks {
  int64_t rows, cols;
};
inline GemmBlocks gemm_blocks(int64_t m, int64_t n, int64_t k) {
  const int64_t rows = std::clamp<int64_t>(m, 1, 256);
  const int64_t by_work = (int64_t{1} << 25) / (rows * std::max<int64_t>(1, k));
  const int64_t cols = std::clamp<int64_t>(std::min(by_work, kGemmScratchDoubles / rows), 64,
                                           kGemmScratchDoubles / rows);
  return {rows, std::clamp<int64_t>(n, 1, cols)};
}

// The product alpha * op(A) op(B) (m x n) plus whatever `init` puts in the buffer, a block at a
// time: init(row0, rows, col0, cols, buf) fills buf (rows x cols, row-major) with the terms added
// to the product (zeros, a bias, beta * C), dgemm adds the product, then
// emit(row0, rows, col0, cols, buf) stores the block. The buffer is scratch charged to the run's
// budget.
template <typename Init, typename Emit>
void gemm_by_blocks(int64_t m, int64_t n, int64_t k, double alpha, const GemmOperand& a,
                    const GemmOperand& b, Init&& init, Emit&& emit) {
  if (m <= 0 || n <= 0) return;
  const GemmBlocks blk = gemm_blocks(m, n, k);
  Scratch<double> buf(static_cast<size_t>(blk.rows * blk.cols));
  // Tensor operands: A's rows of a block (rows x k) converted once per row of blocks, B's
  // columns (k x cols) once per block; dgemm then reads them at their origin.
  Scratch<double> a_panel, b_panel;
  if (a.data == nullptr && k > 0) a_panel.resize(static_cast<size_t>(blk.rows * k));
  if (b.data == nullptr && k > 0) b_panel.resize(static_cast<size_t>(k * blk.cols));
  for (int64_t row0 = 0; row0 < m; row0 += blk.rows) {
    const int64_t rows = std::min(blk.rows, m - row0);
    GemmOperand pa = a;
    int64_t a_row0 = row0;
    if (a.data == nullptr && k > 0) {
      pack_block(a, row0, rows, 0, k, a_panel.data());
      pa = {a_panel.data(), false, k};
      a_row0 = 0;
    }
    for (int64_t col0 = 0; col0 < n; col0 += blk.cols) {
      const int64_t cols = std::min(blk.cols, n - col0);
      GemmOperand pb = b;
      int64_t b_col0 = col0;
      if (b.data == nullptr && k > 0) {
        // The same panel again (one block of columns, several of rows) is not converted again.
        if (col0 != 0 || row0 == 0 || cols != n) pack_block(b, 0, k, col0, cols, b_panel.data());
        pb = {b_panel.data(), false, cols};
        b_col0 = 0;
      }
      init(row0, rows, col0, cols, buf.data());
      if (k > 0) dgemm_block(a_row0, rows, b_col0, cols, k, alpha, pa, pb, buf.data());
      emit(row0, rows, col0, cols, static_cast<const double*>(buf.data()));
    }
  }
}

}  // namespace graft::eval
