// TensorFlow custom ops of ours for training on CPU, each one pass over memory where TensorFlow's
// ops make several: dropout (keras_transformer/layers/dropout.py), LayerNorm and its gradient
// (keras_transformer/layers/layer_norm.py) and the training loss's softmax
// (keras_transformer/training/loss.py). Built on first use by cpu_kernels.py.
//
// Dropout. TensorFlow's ops draw the random words into a tensor, then compare, select and
// multiply, each a pass of its own. Here each block of units draws its words and masks the input
// at once. The words are those of tf.random.stateless_uniform(dtype=uint32) on CPU: Philox4x32-10
// with the key and counter of StatelessRandomGetKeyCounter, word w the (w % 4)-th output of the
// counter advanced by w / 4, unit u the (u % 2)-th 16-bit half of word u / 2 (little-endian, as
// tf.bitcast splits it). So the outputs and gradients are bit for bit those of the layer's
// TensorFlow ops (tests/test_dropout.py), and a run trains the same with or without this file.
//
// DropoutKeep(x, key, counter) -> (y, keep): y = x * scale where the unit's draw >= threshold,
// else x * 0; keep holds the decision (1 byte per unit) for the gradient,
// ApplyKeep(dy, keep) -> dy * scale or dy * 0, one pass more.
//
// The loss's softmax. TensorFlow's ops cast bfloat16 logits to float32, take the row maximum,
// the softmax (its own passes), then cast the softmax back and copy it to change the labels'
// entries. Here each row is read from memory once (its later passes find it in cache), its
// exponentials kept in a float32 buffer:
// SoftmaxRows(logits, labels) -> (probs, logsumexp, row_max, label_logit), with
// probs = softmax(z) - at_label at the label, computed in float32 and rounded once to T, and
// logsumexp exact however small the label's probability (tests/test_loss.py).
//
// LayerNorm. TensorFlow's ops make about ten passes over the activations forward (casts, mean,
// centring, square, variance, scaling, gamma, beta) and as many backward. Here each pass reads a
// row from memory once (its later loops find it in cache): LayerNorm(x, gamma, beta) ->
// (y, mean, inverse) and LayerNormGrad(dy, x, gamma, mean, inverse) -> (dx, dgamma, dbeta), in
// float32 whatever T is (tests/test_layer_norm.py).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/util/work_sharder.h"

namespace keras_transformer {
namespace {

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;

REGISTER_OP("KerasTransformerDropoutKeep")
    .Input("x: T")
    .Input("key: uint64")
    .Input("counter: uint64")
    .Attr("threshold: int >= 0")
    .Attr("scale: float")
    .Attr("T: {float, bfloat16}")
    .Output("y: T")
    .Output("keep: uint8")
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      c->set_output(0, c->input(0));
      c->set_output(1, c->input(0));
      return absl::OkStatus();
    });

REGISTER_OP("KerasTransformerApplyKeep")
    .Input("dy: T")
    .Input("keep: uint8")
    .Attr("scale: float")
    .Attr("T: {float, bfloat16}")
    .Output("dx: T")
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      c->set_output(0, c->input(0));
      return absl::OkStatus();
    });

// x86-64 builds carry three versions of the loops below: one for the x86-64-v4 level's instructions
// (AVX-512, with the 16-bit ones, AVX512BW, that bfloat16's loops need), one for x86-64-v3's
// (AVX2, FMA) and one for the build's own flags; the library chooses once, when it loads, the
// first the CPU can run, so that one build serves every CPU kind sharing a cache folder. Wrappers
// with target attributes and a choice by __builtin_cpu_supports, not target_clones: GCC before 12
// has no dispatcher for the x86-64 levels and clang clones no templates. -DKT_VERSIONS=0 builds
// the build's own version alone (with -march=..., e.g. to test the AVX2 one on an AVX-512 machine).
#ifndef KT_VERSIONS
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define KT_VERSIONS 1
#else
#define KT_VERSIONS 0
#endif
#endif

// A loop's body, inlined into each version's wrapper (KT_VERSIONED), which compiles it for its
// instructions.
#define KT_LOOP __attribute__((always_inline)) inline

#if KT_VERSIONS
// Exactly the features CpuLevel asks the CPU for, so that no version uses one it did not check
// (a virtual machine may hide single features).
#define KT_V3 "avx2,fma,bmi2"
#define KT_V4 "avx512f,avx512bw,avx512dq,avx512vl," KT_V3

enum class Level { kBuild, kV3, kV4 };

Level CpuLevel() {
  __builtin_cpu_init();
  const bool v3 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                  __builtin_cpu_supports("bmi2");
  const bool v4 = v3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  return v4 ? Level::kV4 : v3 ? Level::kV3 : Level::kBuild;
}

const Level kCpuLevel = CpuLevel();

// Name(args...): Name##Loop(args...) in the version for kCpuLevel.
#define KT_VERSIONED(Name)                                                              \
  template <typename... Args>                                                           \
  __attribute__((target(KT_V4))) void Name##V4(Args... args) {                          \
    Name##Loop(args...);                                                                \
  }                                                                                     \
  template <typename... Args>                                                           \
  __attribute__((target(KT_V3))) void Name##V3(Args... args) {                          \
    Name##Loop(args...);                                                                \
  }                                                                                     \
  template <typename... Args>                                                           \
  void Name(Args... args) {                                                             \
    if (kCpuLevel == Level::kV4) return Name##V4(args...);                              \
    if (kCpuLevel == Level::kV3) return Name##V3(args...);                              \
    Name##Loop(args...);                                                                \
  }
#else
#define KT_VERSIONED(Name) \
  template <typename... Args>  \
  void Name(Args... args) {    \
    Name##Loop(args...);       \
  }
#endif

constexpr uint32_t kW32A = 0x9E3779B9, kW32B = 0xBB67AE85;     // Philox's key increments
constexpr uint32_t kM4x32A = 0xD2511F53, kM4x32B = 0xCD9E8D57; // and multipliers
constexpr int kLanes = 16;                  // Philox counters computed side by side
constexpr int64_t kBlock = 4 * 2 * kLanes;  // units per block: 4 words a counter, 2 units a word

// Float <-> bfloat16 as Eigen's vectorized conversion does (round to nearest even, any NaN to
// the quiet NaN 0x7FC0), written on the bits so that the loops vectorize.
inline float Widen(float x) { return x; }
inline float Widen(tensorflow::bfloat16 x) {
  uint16_t bits;
  std::memcpy(&bits, &x, 2);
  const uint32_t wide = uint32_t(bits) << 16;
  float f;
  std::memcpy(&f, &wide, 4);
  return f;
}
inline void Narrow(float f, float* out) { *out = f; }
inline void Narrow(float f, tensorflow::bfloat16* out) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const bool nan = (u & 0x7FFFFFFFu) > 0x7F800000u;
  const uint16_t rounded = uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
  const uint16_t bits = nan ? uint16_t(0x7FC0u) : rounded;
  std::memcpy(out, &bits, 2);
}

// The 16-bit draws of units [block * kBlock, (block + 1) * kBlock): Philox of the kLanes counters
// counter + block * kLanes + lane, in 64-bit lanes holding 32-bit values (a 32 x 32 -> 64-bit
// product of zero-extended lanes is one vector instruction).
inline void DrawBlock(const uint32_t counter[4], const uint32_t key[2], uint64_t block,
                      uint16_t draws[kBlock]) {
  constexpr uint64_t kLow = 0xFFFFFFFFull;
  uint64_t c0[kLanes], c1[kLanes], c2[kLanes], c3[kLanes];
  const uint64_t low = (uint64_t(counter[1]) << 32) | counter[0];
  const uint64_t high = (uint64_t(counter[3]) << 32) | counter[2];
  for (int l = 0; l < kLanes; ++l) {  // Philox's Skip(block * kLanes + l): a 128-bit addition
    const uint64_t sum = low + block * kLanes + l;
    const uint64_t h = high + (sum < low);
    c0[l] = sum & kLow;
    c1[l] = sum >> 32;
    c2[l] = h & kLow;
    c3[l] = h >> 32;
  }
  uint64_t k0 = key[0], k1 = key[1];
  for (int round = 0; round < 10; ++round) {
    for (int l = 0; l < kLanes; ++l) {
      const uint64_t p0 = uint64_t(kM4x32A) * c0[l];
      const uint64_t p1 = uint64_t(kM4x32B) * c2[l];
      const uint64_t n0 = ((p1 >> 32) ^ c1[l] ^ k0) & kLow;
      const uint64_t n2 = ((p0 >> 32) ^ c3[l] ^ k1) & kLow;
      c1[l] = p1 & kLow;
      c3[l] = p0 & kLow;
      c0[l] = n0;
      c2[l] = n2;
    }
    k0 = (k0 + kW32A) & kLow;
    k1 = (k1 + kW32B) & kLow;
  }
  for (int l = 0; l < kLanes; ++l) {
    const uint64_t words[4] = {c0[l], c1[l], c2[l], c3[l]};
    for (int w = 0; w < 4; ++w) {
      draws[(l * 4 + w) * 2] = uint16_t(words[w]);
      draws[(l * 4 + w) * 2 + 1] = uint16_t(words[w] >> 16);
    }
  }
}

template <typename T>
KT_LOOP void DropBlocksLoop(const T* __restrict in, T* __restrict out, uint8_t* __restrict keep,
                            int64_t size, int64_t begin, int64_t end, const uint32_t counter[4],
                            const uint32_t key[2], uint32_t threshold, float scale) {
  uint16_t draws[kBlock];
  for (int64_t block = begin; block < end; ++block) {
    DrawBlock(counter, key, uint64_t(block), draws);
    const int64_t base = block * kBlock;
    const int64_t n = std::min<int64_t>(kBlock, size - base);
    for (int64_t i = 0; i < n; ++i) {
      Narrow(Widen(in[base + i]) * (draws[i] >= threshold ? scale : 0.0f), &out[base + i]);
    }
    for (int64_t i = 0; i < n; ++i) keep[base + i] = draws[i] >= threshold;
  }
}
KT_VERSIONED(DropBlocks)

template <typename T>
KT_LOOP void KeepUnitsLoop(const T* __restrict in, const uint8_t* __restrict keep,
                           T* __restrict out, int64_t begin, int64_t end, float scale) {
  for (int64_t i = begin; i < end; ++i) Narrow(Widen(in[i]) * (float(keep[i]) * scale), &out[i]);
}
KT_VERSIONED(KeepUnits)

// The scale in T, back in float: the TensorFlow ops multiply by the scale as a T constant.
template <typename T>
float ScaleAsT(OpKernelConstruction* ctx) {
  float scale = 0;
  const absl::Status status = ctx->GetAttr("scale", &scale);
  if (!status.ok()) ctx->CtxFailure(__FILE__, __LINE__, status);
  return Widen(T(scale));
}

template <typename T>
class DropoutKeepOp : public OpKernel {
 public:
  explicit DropoutKeepOp(OpKernelConstruction* ctx) : OpKernel(ctx), scale_(ScaleAsT<T>(ctx)) {
    int threshold = 0;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("threshold", &threshold));
    threshold_ = uint32_t(threshold);
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& key = ctx->input(1);
    const Tensor& counter = ctx->input(2);
    OP_REQUIRES(ctx, key.NumElements() == 1 && counter.NumElements() == 2,
                absl::InvalidArgumentError("key must hold 1 and counter 2 uint64 values"));
    Tensor* y = nullptr;
    Tensor* keep = nullptr;
    OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({0}, 0, x.shape(), &y));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, x.shape(), &keep));
    const uint64_t k = key.flat<tensorflow::uint64>()(0);
    const uint64_t c0 = counter.flat<tensorflow::uint64>()(0);
    const uint64_t c1 = counter.flat<tensorflow::uint64>()(1);
    const uint32_t key32[2] = {uint32_t(k), uint32_t(k >> 32)};
    const uint32_t counter32[4] = {uint32_t(c0), uint32_t(c0 >> 32), uint32_t(c1),
                                   uint32_t(c1 >> 32)};
    const int64_t size = x.NumElements();
    const T* in = x.flat<T>().data();
    T* out = y->flat<T>().data();
    uint8_t* kept = keep->flat<tensorflow::uint8>().data();
    const uint32_t threshold = threshold_;
    const float scale = scale_;
    auto* threads = ctx->device()->tensorflow_cpu_worker_threads();
    tensorflow::Shard(threads->num_threads, threads->workers, (size + kBlock - 1) / kBlock,
                      /*cost_per_unit=*/kBlock * 16, [&](int64_t begin, int64_t end) {
                        DropBlocks(in, out, kept, size, begin, end, counter32, key32, threshold,
                                   scale);
                      });
  }

 private:
  const float scale_;
  uint32_t threshold_;
};

template <typename T>
class ApplyKeepOp : public OpKernel {
 public:
  explicit ApplyKeepOp(OpKernelConstruction* ctx) : OpKernel(ctx), scale_(ScaleAsT<T>(ctx)) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& dy = ctx->input(0);
    const Tensor& keep = ctx->input(1);
    OP_REQUIRES(ctx, dy.NumElements() == keep.NumElements(),
                absl::InvalidArgumentError("dy and keep differ in size"));
    Tensor* dx = nullptr;
    OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({0}, 0, dy.shape(), &dx));
    const T* in = dy.flat<T>().data();
    const uint8_t* kept = keep.flat<tensorflow::uint8>().data();
    T* out = dx->flat<T>().data();
    const float scale = scale_;
    auto* threads = ctx->device()->tensorflow_cpu_worker_threads();
    tensorflow::Shard(threads->num_threads, threads->workers, dy.NumElements(),
                      /*cost_per_unit=*/4, [&](int64_t begin, int64_t end) {
                        KeepUnits(in, kept, out, begin, end, scale);
                      });
  }

 private:
  const float scale_;
};


REGISTER_OP("KerasTransformerSoftmaxRows")
    .Input("logits: T")
    .Input("labels: int32")
    .Attr("at_label: float")
    .Attr("T: {float, bfloat16}")
    .Output("probs: T")
    .Output("logsumexp: float")
    .Output("row_max: float")
    .Output("label_logit: float")
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      tensorflow::shape_inference::ShapeHandle logits;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &logits));
      c->set_output(0, logits);
      for (int i = 1; i < 4; ++i) c->set_output(i, c->Vector(c->Dim(logits, 0)));
      return absl::OkStatus();
    });

// exp(x) for x <= 0 without a branch, so that its loop vectorizes (at AVX2's width given
// -fno-trapping-math, cpu_kernels.py; tests/test_cpu_kernels.py): Cephes' expf, within a unit in
// the last place of std::exp. Below -87, where float32 leaves the normal numbers, it gives
// exp(-87) rather than a subnormal or zero (a softmax entry of 1e-38 at most); NaN stays NaN, so
// a non-finite logit still makes the loss non-finite.
inline float ExpNonPositive(float x) {
  x = x < -87.0f ? -87.0f : x;
  const float shifter = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float n = (x * 1.44269504088896341f + shifter) - shifter;  // round(x / ln 2)
  const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;    // x - n ln 2, in two parts
  float p = 1.9875691500E-4f;
  p = p * r + 1.3981999507E-3f;
  p = p * r + 8.3334519073E-3f;
  p = p * r + 4.1665795894E-2f;
  p = p * r + 1.6666665459E-1f;
  p = p * r + 5.0000001201E-1f;
  const int32_t bits = (int32_t(n) + 127) << 23;  // 2^n
  float power;
  std::memcpy(&power, &bits, 4);
  return (p * r * r + r + 1.0f) * power;
}

template <typename T>
KT_LOOP void SoftmaxRowsLoop(const T* __restrict in, const int32_t* __restrict labels,
                             T* __restrict out, float* __restrict logsumexp,
                             float* __restrict row_max, float* __restrict label_logit,
                             int64_t classes, int64_t begin, int64_t end, float at_label) {
  std::vector<float> row_buffer(classes);  // one row's exponentials, in cache for the last pass
  float* __restrict exps = row_buffer.data();
  for (int64_t row = begin; row < end; ++row) {
    const T* __restrict z = in + row * classes;
    float largest = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : largest)
    for (int64_t i = 0; i < classes; ++i) largest = std::max(largest, Widen(z[i]));
    for (int64_t i = 0; i < classes; ++i) exps[i] = ExpNonPositive(Widen(z[i]) - largest);
    // Summed in double (a loop of its own, so that both vectorize): in float32 the sum's rounding
    // depends on the vector width the clone runs at, and 8,000 terms can lose 1e-5 of it.
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < classes; ++i) sum += exps[i];
    const float inverse = float(1.0 / sum);
    T* __restrict probs = out + row * classes;
    for (int64_t i = 0; i < classes; ++i) Narrow(exps[i] * inverse, &probs[i]);
    const int32_t label = labels[row];
    Narrow(exps[label] * inverse - at_label, &probs[label]);
    logsumexp[row] = largest + float(std::log(sum));
    row_max[row] = largest;
    label_logit[row] = Widen(z[label]);
  }
}
KT_VERSIONED(SoftmaxRows)

template <typename T>
class SoftmaxRowsOp : public OpKernel {
 public:
  explicit SoftmaxRowsOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("at_label", &at_label_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& logits = ctx->input(0);
    const Tensor& labels = ctx->input(1);
    OP_REQUIRES(ctx, logits.dims() == 2 && labels.dims() == 1 &&
                         labels.dim_size(0) == logits.dim_size(0),
                absl::InvalidArgumentError("logits must be [rows, classes], labels [rows]"));
    const int64_t rows = logits.dim_size(0), classes = logits.dim_size(1);
    const int32_t* label = labels.flat<int32_t>().data();
    for (int64_t row = 0; row < rows; ++row) {
      OP_REQUIRES(ctx, label[row] >= 0 && label[row] < classes,
                  absl::InvalidArgumentError("a label is outside [0, classes)"));
    }
    Tensor* outputs[4] = {};
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, logits.shape(), &outputs[0]));
    for (int i = 1; i < 4; ++i) {
      OP_REQUIRES_OK(ctx, ctx->allocate_output(i, labels.shape(), &outputs[i]));
    }
    const T* in = logits.flat<T>().data();
    T* probs = outputs[0]->flat<T>().data();
    float* logsumexp = outputs[1]->flat<float>().data();
    float* row_max = outputs[2]->flat<float>().data();
    float* label_logit = outputs[3]->flat<float>().data();
    const float at_label = at_label_;
    auto* threads = ctx->device()->tensorflow_cpu_worker_threads();
    tensorflow::Shard(threads->num_threads, threads->workers, rows,
                      /*cost_per_unit=*/classes * 16, [&](int64_t begin, int64_t end) {
                        SoftmaxRows(in, label, probs, logsumexp, row_max, label_logit, classes,
                                    begin, end, at_label);
                      });
  }

 private:
  float at_label_;
};

REGISTER_OP("KerasTransformerLayerNorm")
    .Input("x: T")
    .Input("gamma: float")
    .Input("beta: float")
    .Attr("epsilon: float")
    .Attr("T: {float, bfloat16}")
    .Output("y: T")
    .Output("mean: float")
    .Output("inverse: float")
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      tensorflow::shape_inference::ShapeHandle x;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &x));
      c->set_output(0, x);
      c->set_output(1, c->Vector(c->Dim(x, 0)));
      c->set_output(2, c->Vector(c->Dim(x, 0)));
      return absl::OkStatus();
    });

REGISTER_OP("KerasTransformerLayerNormGrad")
    .Input("dy: T")
    .Input("x: T")
    .Input("gamma: float")
    .Input("mean: float")
    .Input("inverse: float")
    .Attr("T: {float, bfloat16}")
    .Output("dx: T")
    .Output("dgamma: float")
    .Output("dbeta: float")
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      c->set_output(0, c->input(1));
      c->set_output(1, c->input(2));
      c->set_output(2, c->input(2));
      return absl::OkStatus();
    });

// Layer normalisation over the rows of x [rows, d], in float32 whatever T is: each row's mean and
// variance (of the centred values, as layer_norm.py's TensorFlow ops take it), then
// y = (x - mean) * inverse * gamma + beta with inverse = 1 / sqrt(variance + epsilon).
template <typename T>
KT_LOOP void LayerNormRowsLoop(const T* __restrict in, const float* __restrict gamma,
                               const float* __restrict beta, T* __restrict out,
                               float* __restrict means, float* __restrict inverses, int64_t d,
                               int64_t begin, int64_t end, float epsilon) {
  for (int64_t row = begin; row < end; ++row) {
    const T* __restrict x = in + row * d;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < d; ++i) sum += Widen(x[i]);
    const float mean = sum / float(d);
    float squares = 0.0f;
#pragma omp simd reduction(+ : squares)
    for (int64_t i = 0; i < d; ++i) {
      const float centred = Widen(x[i]) - mean;
      squares += centred * centred;
    }
    const float inverse = 1.0f / std::sqrt(squares / float(d) + epsilon);
    T* __restrict y = out + row * d;
    for (int64_t i = 0; i < d; ++i) {
      Narrow((Widen(x[i]) - mean) * inverse * gamma[i] + beta[i], &y[i]);
    }
    means[row] = mean;
    inverses[row] = inverse;
  }
}
KT_VERSIONED(LayerNormRows)

// Its gradient for rows [begin, end), with n the normalised x and g = dy * gamma:
// dx = inverse * (g - mean(g) - n * mean(g * n)); the rows' dy * n and dy added to dgamma's and
// dbeta's partial sums (the caller sums the partials of fixed row blocks, so that the order of
// the additions does not depend on the threads).
template <typename T>
KT_LOOP void LayerNormGradRowsLoop(const T* __restrict dys, const T* __restrict xs,
                                   const float* __restrict gamma, const float* __restrict means,
                                   const float* __restrict inverses, T* __restrict dxs,
                                   float* __restrict dgamma, float* __restrict dbeta, int64_t d,
                                   int64_t begin, int64_t end) {
  for (int64_t row = begin; row < end; ++row) {
    const T* __restrict dy = dys + row * d;
    const T* __restrict x = xs + row * d;
    const float mean = means[row], inverse = inverses[row];
    float g_sum = 0.0f, gn_sum = 0.0f;
#pragma omp simd reduction(+ : g_sum, gn_sum)
    for (int64_t i = 0; i < d; ++i) {
      const float dy_i = Widen(dy[i]);
      const float n = (Widen(x[i]) - mean) * inverse;
      const float g = dy_i * gamma[i];
      g_sum += g;
      gn_sum += g * n;
      dgamma[i] += dy_i * n;
      dbeta[i] += dy_i;
    }
    const float g_mean = g_sum / float(d), gn_mean = gn_sum / float(d);
    T* __restrict dx = dxs + row * d;
    for (int64_t i = 0; i < d; ++i) {
      const float n = (Widen(x[i]) - mean) * inverse;
      Narrow(inverse * (Widen(dy[i]) * gamma[i] - g_mean - n * gn_mean), &dx[i]);
    }
  }
}
KT_VERSIONED(LayerNormGradRows)

template <typename T>
class LayerNormOp : public OpKernel {
 public:
  explicit LayerNormOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("epsilon", &epsilon_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& gamma = ctx->input(1);
    const Tensor& beta = ctx->input(2);
    OP_REQUIRES(ctx, x.dims() == 2 && gamma.dims() == 1 && beta.dims() == 1 &&
                         gamma.dim_size(0) == x.dim_size(1) && beta.dim_size(0) == x.dim_size(1),
                absl::InvalidArgumentError("x must be [rows, d], gamma and beta [d]"));
    const int64_t rows = x.dim_size(0), d = x.dim_size(1);
    Tensor *y = nullptr, *mean = nullptr, *inverse = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &y));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, {rows}, &mean));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, {rows}, &inverse));
    const T* in = x.flat<T>().data();
    const float* g = gamma.flat<float>().data();
    const float* b = beta.flat<float>().data();
    T* out = y->flat<T>().data();
    float* means = mean->flat<float>().data();
    float* inverses = inverse->flat<float>().data();
    const float epsilon = epsilon_;
    auto* threads = ctx->device()->tensorflow_cpu_worker_threads();
    tensorflow::Shard(threads->num_threads, threads->workers, rows, /*cost_per_unit=*/d * 8,
                      [&](int64_t begin, int64_t end) {
                        LayerNormRows(in, g, b, out, means, inverses, d, begin, end, epsilon);
                      });
  }

 private:
  float epsilon_;
};

template <typename T>
class LayerNormGradOp : public OpKernel {
 public:
  explicit LayerNormGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& dy = ctx->input(0);
    const Tensor& x = ctx->input(1);
    const Tensor& gamma = ctx->input(2);
    const Tensor& mean = ctx->input(3);
    const Tensor& inverse = ctx->input(4);
    OP_REQUIRES(ctx, x.dims() == 2 && dy.shape() == x.shape() && gamma.dims() == 1 &&
                         gamma.dim_size(0) == x.dim_size(1) && mean.dims() == 1 &&
                         mean.dim_size(0) == x.dim_size(0) && inverse.shape() == mean.shape(),
                absl::InvalidArgumentError("dy and x must be [rows, d], gamma [d], mean and "
                                           "inverse [rows]"));
    const int64_t rows = x.dim_size(0), d = x.dim_size(1);
    Tensor *dx = nullptr, *dgamma = nullptr, *dbeta = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &dx));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, gamma.shape(), &dgamma));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, gamma.shape(), &dbeta));
    // dgamma's and dbeta's partial sums, one pair per block of kRows rows.
    constexpr int64_t kRows = 32;
    const int64_t blocks = (rows + kRows - 1) / kRows;
    std::vector<float> partials(blocks * 2 * d, 0.0f);
    const T* dys = dy.flat<T>().data();
    const T* xs = x.flat<T>().data();
    const float* g = gamma.flat<float>().data();
    const float* means = mean.flat<float>().data();
    const float* inverses = inverse.flat<float>().data();
    T* dxs = dx->flat<T>().data();
    float* parts = partials.data();
    auto* threads = ctx->device()->tensorflow_cpu_worker_threads();
    tensorflow::Shard(threads->num_threads, threads->workers, blocks,
                      /*cost_per_unit=*/kRows * d * 12, [&](int64_t begin, int64_t end) {
                        for (int64_t block = begin; block < end; ++block) {
                          LayerNormGradRows(dys, xs, g, means, inverses, dxs,
                                            parts + block * 2 * d, parts + block * 2 * d + d, d,
                                            block * kRows, std::min(rows, (block + 1) * kRows));
                        }
                      });
    float* dgammas = dgamma->flat<float>().data();
    float* dbetas = dbeta->flat<float>().data();
    std::fill(dgammas, dgammas + d, 0.0f);
    std::fill(dbetas, dbetas + d, 0.0f);
    for (int64_t block = 0; block < blocks; ++block) {
      const float* part = parts + block * 2 * d;
      for (int64_t i = 0; i < d; ++i) {
        dgammas[i] += part[i];
        dbetas[i] += part[d + i];
      }
    }
  }
};

#define REGISTER_CPU(T)                                                                 \
  REGISTER_KERNEL_BUILDER(Name("KerasTransformerDropoutKeep")                           \
                              .Device(tensorflow::DEVICE_CPU)                           \
                              .TypeConstraint<T>("T"),                                  \
                          DropoutKeepOp<T>);                                            \
  REGISTER_KERNEL_BUILDER(                                                              \
      Name("KerasTransformerApplyKeep").Device(tensorflow::DEVICE_CPU).TypeConstraint<T>("T"), \
      ApplyKeepOp<T>);                                                                  \
  REGISTER_KERNEL_BUILDER(                                                              \
      Name("KerasTransformerSoftmaxRows").Device(tensorflow::DEVICE_CPU).TypeConstraint<T>("T"), \
      SoftmaxRowsOp<T>);                                                                \
  REGISTER_KERNEL_BUILDER(                                                              \
      Name("KerasTransformerLayerNorm").Device(tensorflow::DEVICE_CPU).TypeConstraint<T>("T"), \
      LayerNormOp<T>);                                                                  \
  REGISTER_KERNEL_BUILDER(                                                              \
      Name("KerasTransformerLayerNormGrad").Device(tensorflow::DEVICE_CPU).TypeConstraint<T>("T"), \
      LayerNormGradOp<T>);
REGISTER_CPU(float)
REGISTER_CPU(tensorflow::bfloat16)

}  // namespace
}  // namespace keras_transformer
