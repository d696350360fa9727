// Modules: objects that own parameters and submodules, with the export names of docs/architecture.md.
//
// A module registers pointers to its own Tensor members and submodules (which never move: modules are
// neither copyable nor movable), so `named_parameters()` can hand out stable pointers and
// `flatten_parameters()` can re-seat every parameter as a view into one flat value buffer whose
// gradients are views into one flat gradient buffer.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tfm/engine/random.h"
#include "tfm/engine/tensor.h"

namespace tfm {

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Every parameter of this module and its submodules in registration order, with dotted names.
  std::vector<std::pair<std::string, Tensor*>> named_parameters();
  int64_t parameter_count();
  // This module and all its submodules, depth first in registration order.
  std::vector<Module*> modules();

  // Training mode (dropout active) and the generator dropout draws from; both reach all submodules.
  void set_training(bool on);
  bool training() const { return training_; }
  void set_rng(Rng* rng);
  Rng* rng() const { return rng_; }

 protected:
  // Registers a zero-filled parameter of `shape` held in `*slot` (a member of the module).
  void register_parameter(const std::string& name, Tensor* slot, const Shape& shape);
  // Registers a submodule; with an empty name its parameters appear without an extra prefix.
  void register_module(const std::string& name, Module* module);

 private:
  struct Entry {
    std::string name;
    Tensor* parameter = nullptr;
    Module* module = nullptr;
  };
  void collect(const std::string& prefix, std::vector<std::pair<std::string, Tensor*>>& out);
  std::vector<Entry> entries_;
  bool training_ = false;
  Rng* rng_ = nullptr;
};

// What a layer costs, worked out from its options and the shapes of one forward pass. Each layer
// states its own (a static cost() beside its constructor), and tests hold the formulas to the built
// layer: parameters to parameter_count(), FLOPs to the products gemm_flops() counts in a forward.
struct Cost {
  double parameters = 0;   // floats
  double flops = 0;        // the forward's matrix products, 2 per multiply-add (the FLOPs of MFU)
  double activations = 0;  // floats the forward keeps for the backward
  double transient = 0;    // floats of the backward's largest temporary (a maximum over layers, not a sum)
  Cost& operator+=(const Cost& o) {
    parameters += o.parameters, flops += o.flops, activations += o.activations;
    transient = transient > o.transient ? transient : o.transient;
    return *this;
  }
  // n copies of the layer, one after the other: the largest temporary stays one layer's.
  Cost times(double n) const { return {parameters * n, flops * n, activations * n, transient}; }
};

// A linear layer (in -> out, optional bias) applied to `rows` rows: its weights and its product.
inline Cost linear_cost(double in, double out, bool bias, double rows) {
  return {in * out + (bias ? out : 0.0), 2.0 * rows * in * out, 0.0, 0.0};
}

// The flat buffers behind a module's parameters: values and gradients, each one allocation.
struct ParameterBuffers {
  std::shared_ptr<Storage> values, grads;
  int64_t size = 0;
  std::vector<int64_t> offsets;  // per parameter, in named_parameters() order
};
// Moves every parameter of `root` (keeping its current values) into one value buffer and sets its
// gradient to the matching view of one zeroed gradient buffer.
ParameterBuffers flatten_parameters(Module& root);
// A parameter of `shape` at `offset` of the flat buffers: its value view into `values`, needing a
// gradient, which is the same view into `grads` (flatten_parameters, and replicas sharing weights).
Tensor flat_parameter(const std::shared_ptr<Storage>& values, const std::shared_ptr<Storage>& grads,
                      const Shape& shape, int64_t offset);

}  // namespace tfm
