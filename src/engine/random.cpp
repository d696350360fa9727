#include "tfm/engine/random.h"

#include <cmath>
#include <cstring>

#include "tfm/engine/error.h"

namespace tfm {
namespace {
uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
}  // namespace

void Rng::seed_with(uint64_t seed) {
  for (auto& w : s_) w = splitmix64(seed);
  has_spare_ = false;
  spare_ = 0.0f;
}

uint64_t Rng::below(uint64_t n) {
  TFM_CHECK(n > 0, "Rng::below", "expected n >= 1, got 0: no integer is in [0, 0)");
  // Lemire's multiply-shift with rejection: unbiased.
  uint64_t x = next_u64();
  __uint128_t m = static_cast<__uint128_t>(x) * n;
  uint64_t l = static_cast<uint64_t>(m);
  if (l < n) {
    const uint64_t threshold = -n % n;
    while (l < threshold) {
      x = next_u64();
      m = static_cast<__uint128_t>(x) * n;
      l = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

float Rng::normal() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  // u1 in (0, 1] so that log(u1) is finite.
  const double u1 = (static_cast<double>(next_u64() >> 11) + 1.0) * (1.0 / 9007199254740992.0);
  const double u2 = static_cast<double>(next_u64() >> 11) * (1.0 / 9007199254740992.0);
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double theta = 2.0 * M_PI * u2;
  spare_ = static_cast<float>(r * std::sin(theta));
  has_spare_ = true;
  return static_cast<float>(r * std::cos(theta));
}

Rng::State Rng::state() const {
  uint32_t bits = 0;
  std::memcpy(&bits, &spare_, sizeof bits);
  return {s_[0], s_[1], s_[2], s_[3], (has_spare_ ? (1ULL << 32) : 0ULL) | bits};
}

void Rng::set_state(const State& s) {
  for (int i = 0; i < 4; ++i) s_[i] = s[i];
  has_spare_ = (s[4] >> 32) & 1;
  const uint32_t bits = static_cast<uint32_t>(s[4]);
  std::memcpy(&spare_, &bits, sizeof bits);
}

namespace {
constexpr uint64_t kSamplerSalt = 0x53414D504C455231ULL;  // "SAMPLER1"
constexpr uint64_t kRankStride = 0x9E3779B97F4A7C15ULL;
}  // namespace

uint64_t rank_seed(uint64_t seed, int rank) {
  return (seed ^ kSamplerSalt) + static_cast<uint64_t>(rank) * kRankStride;
}

}  // namespace tfm
