// Modules and the flat parameter buffers.
#include "tfm/nn/module.h"

#include <algorithm>

namespace tfm {

void Module::register_parameter(const std::string& name, Tensor* slot, const Shape& shape) {
  *slot = Tensor::zeros(shape);
  entries_.push_back({name, slot, nullptr});
}

void Module::register_module(const std::string& name, Module* module) {
  entries_.push_back({name, nullptr, module});
}

void Module::collect(const std::string& prefix, std::vector<std::pair<std::string, Tensor*>>& out) {
  for (Entry& e : entries_) {
    const std::string name = e.name.empty() ? prefix : prefix + e.name;
    if (e.parameter)
      out.emplace_back(name, e.parameter);
    else
      e.module->collect(e.name.empty() ? prefix : name + ".", out);
  }
}

std::vector<Module*> Module::modules() {
  std::vector<Module*> out = {this};
  for (Entry& e : entries_)
    if (e.module)
      for (Module* m : e.module->modules()) out.push_back(m);
  return out;
}

std::vector<std::pair<std::string, Tensor*>> Module::named_parameters() {
  std::vector<std::pair<std::string, Tensor*>> out;
  collect("", out);
  return out;
}

int64_t Module::parameter_count() {
  int64_t n = 0;
  for (auto& [name, t] : named_parameters()) n += t->numel();
  return n;
}

void Module::set_training(bool on) {
  training_ = on;
  for (Entry& e : entries_)
    if (e.module) e.module->set_training(on);
}

void Module::set_rng(Rng* rng) {
  rng_ = rng;
  for (Entry& e : entries_)
    if (e.module) e.module->set_rng(rng);
}

ParameterBuffers flatten_parameters(Module& root) {
  ParameterBuffers buf;
  auto params = root.named_parameters();
  for (auto& [name, t] : params) {
    buf.offsets.push_back(buf.size);
    buf.size += t->numel();
  }
  buf.values = std::make_shared<Storage>(static_cast<size_t>(buf.size));
  buf.grads = std::make_shared<Storage>(static_cast<size_t>(buf.size));
  std::fill_n(buf.grads->data(), buf.size, 0.0f);
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor& t = *params[i].second;
    Tensor value = flat_parameter(buf.values, buf.grads, t.shape(), buf.offsets[i]);
    value.copy_from(t);
    t = value;
  }
  return buf;
}

Tensor flat_parameter(const std::shared_ptr<Storage>& values, const std::shared_ptr<Storage>& grads,
                      const Shape& shape, int64_t offset) {
  Tensor value = Tensor::view_of(values, shape, offset);
  value.set_requires_grad(true);
  value.set_grad(Tensor::view_of(grads, shape, offset));
  return value;
}

}  // namespace tfm
