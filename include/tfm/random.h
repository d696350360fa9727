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
  uint64_t next_u64();
  // Uniform in [0, 1).
  float uniform();
  // Uniform integer in [0, n).
  uint64_t below(uint64_t n);
  // Standard normal (Box-Muller, both values used).
  float normal();

  using State = std::array<uint64_t, 5>;  // 4 words of xoshiro + the cached normal (bit pattern)
  State state() const;
  void set_state(const State& s);

 private:
  std::array<uint64_t, 4> s_{};
  bool has_spare_ = false;
  float spare_ = 0.0f;
};

}  // namespace tfm
