// Training options shared by the tests that call tfm::train() directly.
#pragma once
#include "tfm/training/trainer.h"

namespace tfm_test {

// Nothing on the console (DIR/train.log is still written).
inline tfm::TrainOptions quiet() {
  tfm::TrainOptions o;
  o.console = false;
  return o;
}

}  // namespace tfm_test
