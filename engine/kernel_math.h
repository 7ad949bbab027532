// Per-element math of the training kernels, shared by the CPU backend (engine/cpu) and the CUDA
// kernels (engine/cuda/elementwise_kernels.cu): each function is __host__ __device__ under nvcc
// and plain inline C++ elsewhere, so the CPU unit tests cover the arithmetic the GPU runs and a
// GPU run only has to prove indexing and launches (issue P14's design rule).
// Only C functions that exist on both sides (expf, erff, tanhf, sqrtf, powf, fabsf, copysignf, fminf,
// fmaxf, sinf, cosf, memcpy).
// Depends on: <cmath>, <cstdint>, <cstring> only.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define PS_HOST_DEVICE __host__ __device__
#else
#define PS_HOST_DEVICE
#endif

namespace ps::engine::math {

inline constexpr float kSqrt2OverPi = 0.7978845608028654F;
inline constexpr float kGeluCubic = 0.044715F;
inline constexpr float kInvSqrt2 = 0.7071067811865476F;
inline constexpr float kTwoOverSqrtPi = 1.1283791670955126F;

// ---- exp and tanh in arithmetic only (no library call, no branch): a loop over them vectorizes
// (engine/cpu/vector_loops.cpp), and the CUDA kernels run the same formulas.

PS_HOST_DEVICE inline float floatFromBits(std::int32_t bits)
{
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

PS_HOST_DEVICE inline std::int32_t bitsOfFloat(float f)
{
    std::int32_t bits;
    memcpy(&bits, &f, sizeof bits);
    return bits;
}

// e^x: 0 below -87 (where e^x is under float's smallest normal), e^88 above 88 (+inf included), NaN
// for NaN; within 2 ulp of e^x on [-87, 88], where x = n ln2 + r with |r| <= ln2/2 (n rounded by adding
// 1.5 * 2^23, whose low mantissa bits then hold n), e^r by its degree-7 Taylor polynomial
// (truncation < 6e-9 relative), times 2^n built in the exponent bits.
PS_HOST_DEVICE inline float expArith(float x)
{
    constexpr float kRound = 12582912.0F; // 1.5 * 2^23
    const bool under = x < -87.0F;
    x = under ? -87.0F : x;
    x = x > 88.0F ? 88.0F : x;
    const float t = x * 1.44269504088896341F + kRound;
    const float n = t - kRound;
    float r = x - n * 0.693145751953125F; // ln2, high part (exact in float)
    r = r - n * 1.428606765330187e-06F; // ln2, low part
    float p = 1.0F / 5040.0F;
    p = p * r + 1.0F / 720.0F;
    p = p * r + 1.0F / 120.0F;
    p = p * r + 1.0F / 24.0F;
    p = p * r + 1.0F / 6.0F;
    p = p * r + 0.5F;
    p = p * r + 1.0F;
    p = p * r + 1.0F;
    // Unsigned: a NaN's bits give a garbage exponent (the product stays NaN), never an overflow.
    const auto exponent =
        static_cast<std::uint32_t>(bitsOfFloat(t)) - static_cast<std::uint32_t>(bitsOfFloat(kRound)) + 127U;
    const float result = p * floatFromBits(static_cast<std::int32_t>(exponent << 23));
    return under ? 0.0F : result;
}

// tanh within 1.5 ulp: tanh's odd Taylor series to x^17 below |x| = 0.55 (truncation < 6e-9
// relative there), 1 - 2 / (e^(2|x|) + 1) above (no cancellation: the result is over 0.5), and
// +-1 beyond 9.5. Both sides are computed and one is selected, so a loop over it has no branch.
PS_HOST_DEVICE inline float fastTanh(float x)
{
    const float a = x < 0.0F ? -x : x;
    const float x2 = x * x;
    float p = 6404582.0F / 10854718875.0F;
    p = p * x2 - 929569.0F / 638512875.0F;
    p = p * x2 + 21844.0F / 6081075.0F;
    p = p * x2 - 1382.0F / 155925.0F;
    p = p * x2 + 62.0F / 2835.0F;
    p = p * x2 - 17.0F / 315.0F;
    p = p * x2 + 2.0F / 15.0F;
    p = p * x2 - 1.0F / 3.0F;
    p = p * x2 + 1.0F;
    const float series = x * p;
    const float e = expArith(2.0F * (a > 9.5F ? 9.5F : a));
    const float magnitude = 1.0F - 2.0F / (e + 1.0F);
    const float outer = x < 0.0F ? -magnitude : magnitude;
    return a < 0.55F ? series : outer;
}

// GELU, tanh approximation (approximate="tanh"), and its derivative, over fastTanh (PyTorch's CPU
// kernel takes a vectorised tanh of about 1 ulp too).
PS_HOST_DEVICE inline float geluTanh(float a)
{
    return 0.5F * a * (1.0F + fastTanh(kSqrt2OverPi * (a + kGeluCubic * a * a * a)));
}

PS_HOST_DEVICE inline float geluTanhGrad(float a)
{
    const float t = fastTanh(kSqrt2OverPi * (a + kGeluCubic * a * a * a));
    return 0.5F * (1.0F + t) + 0.5F * a * (1.0F - t * t) * kSqrt2OverPi * (1.0F + 3.0F * kGeluCubic * a * a);
}

// erfc(z) for z >= 0 in arithmetic only, within about 1.2e-7 relative (plus float rounding):
// Numerical Recipes' Chebyshev fit (Press et al., 3rd ed., section 6.2, "erfccheb"'s short form),
// t = 1 / (1 + z/2), erfc z = t e^(-z^2 + P(t)), with expArith's e^x (0 once -z^2 is under -87,
// where erfc is under float's normals).
PS_HOST_DEVICE inline float erfcPositive(float z)
{
    z = z > 10.0F ? 10.0F : z; // erfc(10) = 2e-45, under float's normals; +inf stays finite (NaN passes)
    const float t = 1.0F / (1.0F + 0.5F * z);
    float p = 0.17087277F;
    p = p * t - 0.82215223F;
    p = p * t + 1.48851587F;
    p = p * t - 1.13520398F;
    p = p * t + 0.27886807F;
    p = p * t - 0.18628806F;
    p = p * t + 0.09678418F;
    p = p * t + 0.37409196F;
    p = p * t + 1.00002368F;
    p = p * t - 1.26551223F;
    // e^(-z^2) without z^2's rounding (7.6e-6 of the result at z = 9): z^2 = s^2 + (z - s)(z + s),
    // with s = z to 11 significant bits, so s^2 is exact (fdlibm's erfc splits the same way).
    const float head = floatFromBits(bitsOfFloat(z) & static_cast<std::int32_t>(0xFFFFF000U));
    return t * expArith(-head * head) * expArith((head - z) * (head + z) + p);
}

// The standard normal CDF, Phi(a) = erfc(-a / sqrt 2) / 2, without cancellation on either side:
// erfc of |a| / sqrt 2 taken directly, and 1 - that half above 0 (a result over 0.5).
PS_HOST_DEVICE inline float normalCdf(float a)
{
    const float half = 0.5F * erfcPositive((a < 0.0F ? -a : a) * kInvSqrt2);
    return a < 0.0F ? half : 1.0F - half;
}

// GELU, exact (erf): a Phi(a), and its derivative Phi(a) + a phi(a); arithmetic only, so a loop
// over them vectorizes (erff and expf did not): within 5e-7 relative of the double-precision values
// for |a| <= 2, growing as a^2 ulps beyond with the rounding of a / sqrt 2 (1e-5 at a = -11; the
// bound KernelMath.ExactGeluFollowsTheErfForm holds).
PS_HOST_DEVICE inline float geluErf(float a)
{
    return a * normalCdf(a);
}

PS_HOST_DEVICE inline float geluErfGrad(float a)
{
    return normalCdf(a) + a * (0.5F * kTwoOverSqrtPi * kInvSqrt2) * expArith(-0.5F * a * a);
}

// ---- Activations of the imported models (CNNs and MLPs); Relu, Tanh and GELU are above ----

// No overflow either way: exp of a non-positive number only.
PS_HOST_DEVICE inline float sigmoid(float x)
{
    if (x >= 0.0F)
        return 1.0F / (1.0F + expf(-x));
    const float e = expf(x);
    return e / (1.0F + e);
}

PS_HOST_DEVICE inline float clampUnit(float x)
{
    return x < 0.0F ? 0.0F : (x > 1.0F ? 1.0F : x);
}

// ONNX HardSigmoid: max(0, min(1, alpha x + beta)); its derivative is alpha inside (0, 1).
PS_HOST_DEVICE inline float hardSigmoid(float x, float alpha, float beta)
{
    return clampUnit(alpha * x + beta);
}
PS_HOST_DEVICE inline float hardSigmoidGrad(float x, float alpha, float beta)
{
    const float t = alpha * x + beta;
    return t > 0.0F && t < 1.0F ? alpha : 0.0F;
}

// x * relu6(x + 3) / 6, and its derivative as torch's hardswish_backward.
PS_HOST_DEVICE inline float hardSwish(float x)
{
    const float t = x + 3.0F;
    return x * (t < 0.0F ? 0.0F : (t > 6.0F ? 6.0F : t)) / 6.0F;
}
PS_HOST_DEVICE inline float hardSwishGrad(float x)
{
    return x < -3.0F ? 0.0F : (x > 3.0F ? 1.0F : x / 3.0F + 0.5F);
}

PS_HOST_DEVICE inline float leakyRelu(float x, float alpha)
{
    return x < 0.0F ? alpha * x : x;
}
PS_HOST_DEVICE inline float leakyReluGrad(float x, float alpha)
{
    return x > 0.0F ? 1.0F : alpha;
}

// torch.clamp: the gradient passes where lo <= x <= hi, the bounds included.
PS_HOST_DEVICE inline float clip(float x, float lo, float hi)
{
    const float t = x < lo ? lo : x; // NaN passes through; lo > hi gives hi, as ONNX
    return t > hi ? hi : t;
}
PS_HOST_DEVICE inline float clipGrad(float x, float lo, float hi)
{
    return x >= lo && x <= hi ? 1.0F : 0.0F;
}

// d/dx erf(x) = 2 / sqrt(pi) * exp(-x^2).
PS_HOST_DEVICE inline float erfGrad(float x)
{
    return kTwoOverSqrtPi * expf(-x * x);
}

// d/dx sin(x) = cos(x); d/dx cos(x) = -sin(x).
PS_HOST_DEVICE inline float sinGrad(float x)
{
    return cosf(x);
}
PS_HOST_DEVICE inline float cosGrad(float x)
{
    return -sinf(x);
}

// Trilu: whether element (i, j) of a matrix stays (upper: on or above diagonal k; lower: on or below).
PS_HOST_DEVICE inline bool triluKeeps(long long i, long long j, bool upper, long long k)
{
    return upper ? j - i >= k : j - i <= k;
}

// ---- Cast to the integer types (the engine holds every integer as i64) ----

enum class IntegerType { I64, I32, I8, U8, Bool };

// t wrapped to the target's width (two's complement, as static_cast), or 0/1 for bool.
PS_HOST_DEVICE inline long long narrowInteger(long long t, IntegerType to)
{
    switch (to) {
    case IntegerType::I32:
        return static_cast<int>(t);
    case IntegerType::I8:
        return static_cast<signed char>(t);
    case IntegerType::U8:
        return static_cast<unsigned char>(t);
    case IntegerType::Bool:
        return t != 0 ? 1 : 0;
    case IntegerType::I64:
        break;
    }
    return t;
}

// A float truncated toward zero; out of range or NaN saturates (NaN to the minimum, as x86 does);
// to bool: nonzero (NaN included) is 1.
PS_HOST_DEVICE inline long long floatToInteger(float a, IntegerType to)
{
    if (to == IntegerType::Bool)
        return a != 0.0F ? 1 : 0;
    constexpr float kLimit = 9.2e18F;
    long long t = 0;
    if (!(fabsf(a) < kLimit))
        t = a > 0.0F ? 9223372036854775807LL : (-9223372036854775807LL - 1);
    else
        t = static_cast<long long>(a);
    return narrowInteger(t, to);
}

// x^e with the square exact (what torch's pow does for 2), and its derivative.
PS_HOST_DEVICE inline float power(float x, float e)
{
    return e == 2.0F ? x * x : powf(x, e);
}
PS_HOST_DEVICE inline float powerGrad(float x, float e)
{
    return e == 2.0F ? 2.0F * x : e * powf(x, e - 1.0F);
}

// One AdamW step's constants (torch.optim.AdamW: decoupled decay, then Adam with bias corrections),
// computed once per step on the host.
struct AdamWCoefficients
{
    float lr = 0;
    float weightDecay = 0;
    float beta1 = 0;
    float beta2 = 0;
    float eps = 0;
    float correction1 = 1; // 1 - beta1^step
    float correction2Sqrt = 1; // sqrt(1 - beta2^step)
    float gradScale = 1; // 1 / accumulated micro-batches
};

// The coefficients of step `step` (1-based): the bias corrections 1 - beta1^t and sqrt(1 - beta2^t).
inline AdamWCoefficients adamwCoefficients(
    float lr, float weightDecay, float beta1, float beta2, float eps, int step, float gradScale)
{
    return { lr, weightDecay, beta1, beta2, eps, 1.0F - std::pow(beta1, static_cast<float>(step)),
        std::sqrt(1.0F - std::pow(beta2, static_cast<float>(step))), gradScale };
}

PS_HOST_DEVICE inline void adamwElement(float& w, float grad, float& m, float& v, const AdamWCoefficients& c)
{
    const float g = grad * c.gradScale;
    w *= 1.0F - c.lr * c.weightDecay;
    m = c.beta1 * m + (1.0F - c.beta1) * g;
    v = c.beta2 * v + (1.0F - c.beta2) * g * g;
    const float denom = sqrtf(v) / c.correction2Sqrt + c.eps;
    w -= c.lr / c.correction1 * m / denom;
}

// A fused update over several arrays laid end to end: the slot holding flat element e, given each
// slot's end offset (increasing), by binary search.
PS_HOST_DEVICE inline int slotOf(const long long* ends, int count, long long e)
{
    int lo = 0;
    int hi = count - 1;
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (ends[mid] > e)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

// One step of torch.optim.SGD (dampening 0; the momentum buffer is the gradient on the first step).
struct SgdCoefficients
{
    float lr = 0;
    float momentum = 0;
    float weightDecay = 0;
    float gradScale = 1;
    bool firstStep = true;
};

PS_HOST_DEVICE inline void sgdElement(float& w, float grad, float& m, const SgdCoefficients& c)
{
    const float g = grad * c.gradScale + c.weightDecay * w;
    m = c.firstStep ? g : c.momentum * m + g;
    w -= c.lr * m;
}

// fp32 -> bfloat16 bits, rounded to nearest even (NaN stays a quiet NaN of the same sign): what
// __float2bfloat16_rn and torch's .to(torch.bfloat16) give. The CUDA kernels cast GEMM operands
// with it, so the CPU tests check the rounding the GPU applies.
PS_HOST_DEVICE inline unsigned short floatToBf16Bits(float value)
{
    unsigned int bits = 0;
    memcpy(&bits, &value, sizeof bits);
    if ((bits & 0x7F800000U) == 0x7F800000U && (bits & 0x007FFFFFU) != 0U)
        return static_cast<unsigned short>((bits >> 16U) | 0x0040U); // NaN: keep it quiet
    const unsigned int roundingBias = 0x7FFFU + ((bits >> 16U) & 1U);
    return static_cast<unsigned short>((bits + roundingBias) >> 16U);
}

PS_HOST_DEVICE inline float bf16BitsToFloat(unsigned short half)
{
    const unsigned int bits = static_cast<unsigned int>(half) << 16U;
    float value = 0;
    memcpy(&value, &bits, sizeof value);
    return value;
}

// Dropout's keep decision for element `index` of a call seeded with `seed`: a counter-based hash
// (splitmix64), so any thread or GPU block decides any element without shared generator state and
// a recompute with the same seed draws the same mask. An element is kept when its 32 random bits
// reach `dropThreshold` = p * 2^32.
PS_HOST_DEVICE inline bool dropoutKeep(unsigned long long seed, unsigned long long index, unsigned int dropThreshold)
{
    unsigned long long z = seed + (index + 1ULL) * 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30U)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27U)) * 0x94D049BB133111EBULL;
    z ^= z >> 31U;
    return static_cast<unsigned int>(z >> 32U) >= dropThreshold;
}

// p * 2^32, saturated: the threshold dropoutKeep compares against.
PS_HOST_DEVICE inline unsigned int dropoutThreshold(double p)
{
    const double t = p * 4294967296.0;
    return t >= 4294967295.0 ? 4294967295U : t <= 0.0 ? 0U : static_cast<unsigned int>(t);
}

} // namespace ps::engine::math
