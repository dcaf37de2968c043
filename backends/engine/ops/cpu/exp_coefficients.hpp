// Cephes expf constants shared by the vector exp of every fast path:
// exp(x) = 2^n * p(r), n = round(x / ln 2), r = x - n ln 2 (split in two for
// accuracy), p(r) = 1 + r + r^2 (c0 + c1 r + ... + c5 r^5) in Horner form
// (highest coefficient first below). ~1 ulp on [-87, 88].
#pragma once

namespace midtune::engine::exp_coefficients {

inline constexpr float kMin = -87.3f;
inline constexpr float kMax = 88.3f;
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2High = 0.693359375f;
inline constexpr float kLn2Low = -2.12194440e-4f;
inline constexpr float kPoly[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                   4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

}  // namespace midtune::engine::exp_coefficients
