// SIMD versions of expf, erff and exp for `#pragma omp simd` loops.
//
// glibc's libmvec (2.35+) has vector expf/erff (16 lanes on AVX-512) and exp (8) but math.h declares
// them only under -ffast-math, whose other assumptions (no NaN, no infinity) we cannot make: attention
// masks are -inf. Redeclaring just these functions with the simd attribute lets GCC call the vector
// versions from simd loops and nothing else changes. Accuracy: within 4 ulp (glibc's manual); the
// double exp sums softmax denominators in double, where 4 ulp (1e-15) is far below the float they
// are rounded to.
#pragma once

#if defined(__GNUC__) && !defined(__clang__)  // Clang has no simd attribute: it calls the scalar ones
extern "C" {
float expf(float) noexcept __attribute__((simd("notinbranch")));
float erff(float) noexcept __attribute__((simd("notinbranch")));
double exp(double) noexcept __attribute__((simd("notinbranch")));
}
#endif
