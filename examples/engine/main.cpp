// The tensor engine alone: a product, an activation and a loss, differentiated by reverse-mode
// autograd, and the gradient checked against central differences (exit 1 if they disagree).
//   engine
#include <cmath>
#include <cstdio>

#include "tfm/engine/ops.h"
#include "tfm/engine/random.h"
#include "tfm/engine/tensor.h"

int main() {
  using namespace tfm;
  Rng rng(1337);
  Tensor w = Tensor::randn({4, 3}, rng).set_requires_grad();  // a leaf parameter (out, in)
  Tensor x = Tensor::randn({2, 3}, rng);                      // an input (batch, in)
  Tensor y = gelu(linear(x, w, Tensor()));                    // (2, 4): x w^T, then exact GELU
  Tensor loss = mean(y * y);                                  // a scalar
  loss.backward();                                            // w.grad() now holds dloss/dw

  // The same derivative by central differences, one weight at a time, without recording a graph.
  NoGradGuard no_grad;
  const auto loss_at = [&] {
    const Tensor z = gelu(linear(x, w, Tensor()));
    return mean(z * z).item();
  };
  const float eps = 1e-2f;
  double worst = 0.0;
  for (int64_t i = 0; i < w.numel(); ++i) {
    float& wi = w.data()[i];
    const float saved = wi;
    wi = saved + eps;
    const double up = loss_at();
    wi = saved - eps;
    const double down = loss_at();
    wi = saved;
    worst = std::fmax(worst, std::fabs((up - down) / (2 * eps) - w.grad().data()[i]));
  }
  std::printf("loss %.6f; dloss/dw: largest difference from central differences %.2e\n", loss.item(), worst);
  return worst < 1e-3 ? 0 : 1;
}
