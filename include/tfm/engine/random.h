// A seeded random number generator of our own (xoshiro256**, seeded through splitmix64), so that
// runs are reproducible across platforms and its state can be saved in a checkpoint.
#pragma once
#include <array>
#include <cstdint>

namespace tfm {

class Rng {
 public:
  explicit Rng(uint64_t seed = 1337) { seed_with(seed); }
  void seed_with(uint64_t seed);
  uint64_t next_u64() {  // inline: samplers and initialisers draw one per element
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  // Uniform in [0, 1): the top 24 bits, so every value is an exact float.
  float uniform() { return static_cast<float>(next_u64() >> 40) * (1.0f / 16777216.0f); }
  // Uniform integer in [0, n); n = 0 throws tfm::Error (there is none).
  uint64_t below(uint64_t n);
  // Standard normal (Box-Muller, both values used).
  float normal();

  using State = std::array<uint64_t, 5>;  // 4 words of xoshiro + the cached normal (bit pattern)
  State state() const;
  void set_state(const State& s);

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  std::array<uint64_t, 4> s_{};
  bool has_spare_ = false;
  float spare_ = 0.0f;
};

// The seed of rank r's stream (data parallel: batches, dropout): rank 0's is exactly what a single
// process uses after the salt, so `mpirun -np 1` equals a plain run; the others are offset by a
// golden-ratio step.
uint64_t rank_seed(uint64_t seed, int rank);

}  // namespace tfm
