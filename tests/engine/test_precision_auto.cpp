// train.precision "auto": bf16 only where oneDNN runs bf16 matmuls on native instructions (engine/gemm.h).
#include <catch2/catch.hpp>
#include <string>

#include "tfm/engine/gemm.h"

using namespace tfm;

TEST_CASE("precision auto: bf16 with AVX512_BF16 or AMX-BF16 under oneDNN, else fp32", "[gemm][precision]") {
  const CpuBf16 none{}, avx512{true, false}, amx{false, true}, both{true, true};
  const auto auto_on = [](GemmBackend b, const CpuBf16& cpu) {
    return resolve_precision(PrecisionChoice::Auto, b, cpu);
  };
  CHECK(auto_on(GemmBackend::OneDnn, none).precision == Precision::Fp32);
  CHECK_THAT(auto_on(GemmBackend::OneDnn, none).reason, Catch::Contains("no avx512_bf16"));
  CHECK(auto_on(GemmBackend::OneDnn, avx512).precision == Precision::Bf16);
  CHECK(auto_on(GemmBackend::OneDnn, avx512).reason == "avx512_bf16");
  CHECK(auto_on(GemmBackend::OneDnn, amx).precision == Precision::Bf16);
  CHECK(auto_on(GemmBackend::OneDnn, both).reason == "amx_bf16");
  // OpenBLAS has no bf16 kernels: fp32 whatever the CPU.
  CHECK(auto_on(GemmBackend::OpenBlas, both).precision == Precision::Fp32);
  CHECK_THAT(auto_on(GemmBackend::OpenBlas, both).reason, Catch::Contains("openblas"));
  // A named precision stays itself.
  for (const CpuBf16& cpu : {none, both}) {
    CHECK(resolve_precision(PrecisionChoice::Fp32, GemmBackend::OneDnn, cpu).precision == Precision::Fp32);
    CHECK(resolve_precision(PrecisionChoice::Bf16, GemmBackend::OneDnn, cpu).precision == Precision::Bf16);
  }
  // This machine: native bf16 only with AVX-512 bf16 instructions, which oneDNN then has kernels for.
  const CpuBf16 here = cpu_bf16();
  if (here.avx512_bf16 || here.amx_bf16) CHECK(onednn_bf16_matmul_available());
  CHECK(resolve_precision(PrecisionChoice::Auto, GemmBackend::OneDnn).precision ==
        auto_on(GemmBackend::OneDnn, here).precision);
}
