#include "gradcheck.h"

using namespace tfm;

TEST_CASE("smoke: matmul gradient", "[ops][smoke]") {
  Rng rng(1);
  testing::check_gradients([](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); },
                           {Tensor::randn({3, 4}, rng), Tensor::randn({4, 5}, rng)});
}
