#include "tfm/engine/tensor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <sstream>
#include <unordered_set>

#include "strided.h"
#include "tfm/engine/memory.h"

namespace tfm {

// ---------------------------------------------------------------------------------------------
// Shapes and storage

std::string shape_str(const Shape& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t first_nonfinite(const float* x, int64_t n) {
  return std::find_if(x, x + n, [](float v) { return !std::isfinite(v); }) - x;
}

const char* nonfinite_name(float v) {
  return std::isnan(v) ? "NaN" : v > 0 ? "+Inf" : "-Inf";
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

Storage::Storage(size_t n) : data_(memory::acquire(n)), size_(n) {}
Storage::~Storage() {
  memory::release(data_, size_);
}

// ---------------------------------------------------------------------------------------------
// Factories

Tensor Tensor::empty(const Shape& shape) {
  for (int64_t d : shape) TFM_CHECK(d >= 0, "Tensor::empty", "negative size in shape ", shape_str(shape));
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(static_cast<size_t>(shape_numel(shape)));
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  return Tensor(std::move(impl));
}

Tensor Tensor::full(const Shape& shape, float value) {
  Tensor t = empty(shape);
  float* p = t.data();
  const int64_t n = t.numel();
  // Gradient buffers start as zeros of activation size: fill them on every thread.
#pragma omp parallel for simd if (n > (1 << 20))
  for (int64_t i = 0; i < n; ++i) p[i] = value;
  return t;
}
Tensor Tensor::zeros(const Shape& shape) {
  return full(shape, 0.0f);
}
Tensor Tensor::ones(const Shape& shape) {
  return full(shape, 1.0f);
}

Tensor Tensor::arange(int64_t n) {
  Tensor t = empty({n});
  for (int64_t i = 0; i < n; ++i) t.data()[i] = static_cast<float>(i);
  return t;
}

Tensor Tensor::randn(const Shape& shape, Rng& rng, float mean, float std) {
  Tensor t = empty(shape);
  float* p = t.data();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = mean + std * rng.normal();
  return t;
}

Tensor Tensor::uniform(const Shape& shape, Rng& rng, float low, float high) {
  Tensor t = empty(shape);
  float* p = t.data();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = low + (high - low) * rng.uniform();
  return t;
}

Tensor Tensor::from_vector(const std::vector<float>& values, const Shape& shape) {
  TFM_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape), "Tensor::from_vector", "got ",
            values.size(), " values for shape ", shape_str(shape), " (", shape_numel(shape), " elements)");
  Tensor t = empty(shape);
  std::copy(values.begin(), values.end(), t.data());
  return t;
}

Tensor Tensor::view_of(std::shared_ptr<Storage> storage, const Shape& shape, int64_t offset) {
  TFM_CHECK(offset >= 0 && offset + shape_numel(shape) <= static_cast<int64_t>(storage->size()),
            "Tensor::view_of", "shape ", shape_str(shape), " at offset ", offset,
            " does not fit in storage of ", storage->size(), " floats");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->offset = offset;
  return Tensor(std::move(impl));
}

// ---------------------------------------------------------------------------------------------
// Metadata and values

namespace {
const TensorImpl& need(const TensorImpl* impl) {
  TFM_CHECK(impl != nullptr, "Tensor", "use of an undefined tensor");
  return *impl;
}
}  // namespace

const Shape& Tensor::shape() const {
  return need(impl_.get()).shape;
}
const Shape& Tensor::strides() const {
  return need(impl_.get()).strides;
}
int64_t Tensor::offset() const {
  return need(impl_.get()).offset;
}
namespace {
// Recomputes released values (see Tensor::release_values) into fresh storage.
void materialize(TensorImpl& impl) {
  TFM_CHECK(impl.recompute != nullptr, "Tensor", "values of a ", shape_str(impl.shape),
            " tensor were released and it has no recipe to recompute them");
  auto storage = std::make_shared<Storage>(static_cast<size_t>(shape_numel(impl.shape)));
  impl.recompute(storage->data());
  impl.storage = std::move(storage);
}
}  // namespace

const std::shared_ptr<Storage>& Tensor::storage() const {
  TensorImpl& impl = const_cast<TensorImpl&>(need(impl_.get()));
  if (!impl.storage) materialize(impl);
  return impl.storage;
}
float* Tensor::data() const {
  return storage()->data() + offset();
}

void Tensor::release_values() const {
  TensorImpl& impl = const_cast<TensorImpl&>(need(impl_.get()));
  if (impl.recompute && impl.storage) impl.storage.reset();
}
bool Tensor::values_released() const {
  return !need(impl_.get()).storage;
}
int64_t Tensor::numel() const {
  return shape_numel(shape());
}

int64_t Tensor::size(int64_t d) const {
  const int64_t n = dim();
  TFM_CHECK(d >= -n && d < n, "Tensor::size", "dimension ", d, " out of range for shape ",
            shape_str(shape()));
  return shape()[d < 0 ? d + n : d];
}

bool Tensor::is_contiguous() const {
  const Shape& sh = shape();
  const Shape& st = strides();
  int64_t expected = 1;
  for (size_t i = sh.size(); i-- > 0;) {
    if (sh[i] != 1 && st[i] != expected) return false;
    expected *= sh[i];
  }
  return true;
}

float Tensor::item() const {
  TFM_CHECK(numel() == 1, "Tensor::item", "expected a tensor with one element, got shape ",
            shape_str(shape()));
  return *data();
}

float Tensor::at(std::initializer_list<int64_t> idx) const {
  TFM_CHECK(static_cast<int64_t>(idx.size()) == dim(), "Tensor::at", "got ", idx.size(),
            " indices for shape ", shape_str(shape()));
  int64_t off = 0, d = 0;
  for (int64_t i : idx) {
    TFM_CHECK(i >= 0 && i < shape()[d], "Tensor::at", "index ", i, " out of range for dimension ", d,
              " of shape ", shape_str(shape()));
    off += i * strides()[d++];
  }
  return data()[off];
}

std::vector<float> Tensor::to_vector() const {
  Tensor c = contiguous_values(*this);
  return std::vector<float>(c.data(), c.data() + c.numel());
}

Tensor Tensor::clone() const {
  Tensor out = empty(shape());
  out.copy_from(*this);
  return out;
}

void Tensor::fill_(float value) {
  if (is_contiguous()) {
    std::fill_n(data(), numel(), value);
    return;
  }
  strided::for_each<1>(shape(), {strides().data()}, {data()}, [&](float** p) { *p[0] = value; });
}

void Tensor::copy_from(const Tensor& src) {
  TFM_CHECK(src.shape() == shape(), "Tensor::copy_from", "shape ", shape_str(src.shape()), " does not match ",
            shape_str(shape()));
  if (is_contiguous() && src.is_contiguous()) {
    std::memmove(data(), src.data(), sizeof(float) * numel());
    return;
  }
  strided::for_each<2>(shape(), {strides().data(), src.strides().data()}, {data(), src.data()},
                       [](float** p) { *p[0] = *p[1]; });
}

std::string Tensor::str(int64_t max_per_dim) const {
  if (!defined()) return "Tensor(undefined)";
  std::ostringstream os;
  os << std::setprecision(4);
  const Tensor c = contiguous_values(*this);
  const Shape& sh = shape();
  const Shape st = contiguous_strides(sh);
  // Long dims show `half` values from each end; at least one, so max_per_dim < 2 never indexes past
  // the end.
  const int64_t half = std::max<int64_t>(1, max_per_dim / 2);
  std::function<void(size_t, int64_t)> rec = [&](size_t d, int64_t off) {
    if (d == sh.size()) {
      os << c.data()[off];
      return;
    }
    os << "[";
    const int64_t n = sh[d];
    for (int64_t i = 0; i < n; ++i) {
      if (n > 2 * half && i == half) {
        os << "..., ";
        i = n - half;
      }
      rec(d + 1, off + i * st[d]);
      if (i + 1 < n) os << (d + 1 == sh.size() ? ", " : ",\n" + std::string(d + 8, ' '));
    }
    os << "]";
  };
  os << "tensor(";
  rec(0, 0);
  os << ", shape=" << shape_str(sh);
  if (requires_grad()) os << ", requires_grad";
  os << ")";
  return os.str();
}

// ---------------------------------------------------------------------------------------------
// Autograd

namespace {
thread_local bool g_grad_enabled = true;
}

bool grad_enabled() {
  return g_grad_enabled;
}
NoGradGuard::NoGradGuard() : previous_(g_grad_enabled) {
  g_grad_enabled = false;
}
NoGradGuard::~NoGradGuard() {
  g_grad_enabled = previous_;
}

namespace {
// t's gradient slot, created on first use.
GradSlot& slot_of(const Tensor& t) {
  TensorImpl& impl = const_cast<TensorImpl&>(need(t.impl()));
  if (!impl.autograd) {
    impl.autograd = std::make_shared<GradSlot>();
    impl.autograd->shape = impl.shape;
  }
  return *impl.autograd;
}
const GradSlot* slot_if_any(const Tensor& t) {
  return need(t.impl()).autograd.get();
}
}  // namespace

bool Tensor::requires_grad() const {
  const GradSlot* s = slot_if_any(*this);
  return s && s->requires_grad;
}
Tensor& Tensor::set_requires_grad(bool on) {
  TFM_CHECK(is_leaf() || on, "Tensor::set_requires_grad", "cannot turn off gradients of a non-leaf tensor");
  slot_of(*this).requires_grad = on;
  return *this;
}
bool Tensor::is_leaf() const {
  const GradSlot* s = slot_if_any(*this);
  return !s || (!s->grad_fn && !s->freed_op);
}
const std::shared_ptr<Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<Node> none;
  const GradSlot* s = slot_if_any(*this);
  return s ? s->grad_fn : none;
}

Tensor Tensor::grad() const {
  const GradSlot* s = slot_if_any(*this);
  return Tensor(s ? s->grad : nullptr);
}

void Tensor::set_grad(const Tensor& g) {
  if (g.defined())
    TFM_CHECK(g.shape() == shape() && g.is_contiguous(), "Tensor::set_grad", "gradient of shape ",
              shape_str(g.shape()), " (contiguous: ", g.is_contiguous(), ") for a tensor of shape ",
              shape_str(shape()));
  slot_of(*this).grad = g.impl_ptr();
}

void Tensor::zero_grad() {
  const GradSlot* s = impl_ ? slot_if_any(*this) : nullptr;
  if (s && s->grad) Tensor(s->grad).fill_(0.0f);
}

Tensor Tensor::detach() const {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = storage();
  impl->shape = shape();
  impl->strides = strides();
  impl->offset = offset();
  return Tensor(std::move(impl));
}

void record(Tensor& out, const char* name, const std::vector<Tensor>& inputs,
            std::function<void(const Tensor&)> backward) {
  if (!g_grad_enabled) return;
  auto node = std::make_shared<Node>();
  for (const Tensor& t : inputs)
    if (GradRef r = grad_ref(t)) node->inputs.push_back(std::move(r));
  if (node->inputs.empty()) return;
  node->name = name;
  node->backward = std::move(backward);
  GradSlot& s = slot_of(out);
  s.requires_grad = true;
  s.grad_fn = std::move(node);
}

GradRef grad_ref(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return nullptr;
  return t.impl()->autograd;
}

float* grad_buffer(const GradRef& slot) {
  TFM_CHECK(slot != nullptr, "grad_buffer", "tensor does not require grad");
  if (!slot->grad) slot->grad = Tensor::zeros(slot->shape).impl_ptr();
  return Tensor(slot->grad).data();
}
GradTarget grad_target(const GradRef& slot) {
  TFM_CHECK(slot != nullptr, "grad_target", "tensor does not require grad");
  if (slot->grad) return {Tensor(slot->grad).data(), 1.0f};
  // Zero-filling it only for the first writer to add into it was 4% of a small model's step.
  slot->grad = Tensor::empty(slot->shape).impl_ptr();
  return {Tensor(slot->grad).data(), 0.0f};
}
float* grad_buffer(const Tensor& t) {
  slot_of(t);
  return grad_buffer(t.impl()->autograd);
}

void set_recompute(const Tensor& out, std::function<void(float* dst)> recipe) {
  if (!g_grad_enabled) return;
  TFM_CHECK(out.is_contiguous() && out.offset() == 0, "set_recompute",
            "only a contiguous op output of its own "
            "storage can be recomputed, got shape ",
            shape_str(out.shape()));
  out.impl()->recompute = std::move(recipe);
}

Tensor contiguous_values(const Tensor& t) {
  if (t.is_contiguous()) return t;
  Tensor out = Tensor::empty(t.shape());
  out.copy_from(t);
  return out;
}

void Tensor::backward(bool retain_graph) const {
  TFM_CHECK(numel() == 1, "Tensor::backward", "a seed gradient is needed for a non-scalar tensor of shape ",
            shape_str(shape()));
  backward(Tensor::ones(shape()), retain_graph);
}

void Tensor::backward(const Tensor& upstream, bool retain_graph) const {
  TFM_CHECK(requires_grad(), "Tensor::backward",
            "tensor does not require grad (no input needs a gradient, "
            "or it was computed under NoGradGuard)");
  TFM_CHECK(upstream.shape() == shape(), "Tensor::backward", "upstream gradient shape ",
            shape_str(upstream.shape()), " does not match tensor shape ", shape_str(shape()));
  // Topological order by iterative depth-first search over gradient slots. The walk holds no
  // values: each closure frees what it saved as soon as its node has run.
  std::vector<GradRef> order;
  std::unordered_set<GradSlot*> seen;
  std::vector<std::pair<GradRef, size_t>> stack;
  GradRef root = grad_ref(*this);
  stack.push_back({root, 0});
  seen.insert(root.get());
  while (!stack.empty()) {
    auto& [t, next] = stack.back();
    // Its closure is gone: walking on would skip everything it was computed from, leaving the leaves'
    // gradients as they were without a word.
    if (t->freed_op)
      throw Error(detail::concat(
          "Tensor::backward: the graph through a tensor computed by ", t->freed_op,
          " was freed by an earlier backward(); pass retain_graph = true to that backward (backward(true)) "
          "to run backward through the graph again, or compute the tensor anew"));
    Node* node = t->grad_fn.get();
    if (node && next < node->inputs.size()) {
      const GradRef& in = node->inputs[next++];
      if (in->requires_grad && !seen.count(in.get())) {
        seen.insert(in.get());
        stack.push_back({in, 0});
      }
      continue;
    }
    order.push_back(std::move(t));
    stack.pop_back();
  }
  // Intermediate gradients left by an earlier pass over a retained graph are stale: they would be
  // added into again and pushed through the graph a second time. Only leaves accumulate.
  for (const auto& t : order)
    if (t->grad_fn) t->grad.reset();
  // Seed.
  float* g = grad_buffer(root);
  const Tensor up = contiguous_values(upstream);
  const float* pu = up.data();
  const int64_t n = numel();
  for (int64_t i = 0; i < n; ++i) g[i] += pu[i];
  // Reverse walk: a tensor comes after everything computed from it, so its gradient is complete when
  // its node runs.
  for (size_t i = order.size(); i-- > 0;) {
    GradSlot* t = order[i].get();
    if (!t->grad_fn) continue;
    if (t->grad) t->grad_fn->backward(Tensor(t->grad));
    if (!retain_graph) {
      t->freed_op = t->grad_fn->name;
      t->grad_fn.reset();  // frees the closure and the values it saved
      t->grad.reset();     // intermediate gradients are not kept (as in PyTorch)
    }
  }
}

}  // namespace tfm
