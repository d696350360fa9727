// Tensor: float32 values with a shape, strides and an offset over shared, pooled storage, and the
// reverse-mode autograd engine.
//
// A Tensor is a cheap handle (a shared pointer); copies share the same tensor. Views (reshape,
// transpose, permute, narrow) share storage and record how they index it. Every op that should be
// differentiable records a Node: its inputs' gradient slots and a closure that *adds* the inputs'
// gradients given the output's gradient. `backward()` sorts the graph topologically and walks it in
// reverse.
//
// The graph links gradient slots (GradSlot), never values: an activation stays alive only while some
// op's closure captured it because its backward reads it, and it goes back to the pool as soon as the
// last such closure has run. Ops capture `grad_ref(x)` for an input whose gradient they write but
// whose values they do not read.
//
// Gradients are always contiguous tensors of their tensor's shape. A tensor's gradient buffer may be
// placed by its owner (Module puts all parameter gradients in one flat buffer) with `set_grad`.
#pragma once
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "tfm/engine/error.h"
#include "tfm/engine/random.h"

namespace tfm {

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& shape);  // "[2, 3, 4]"
int64_t shape_numel(const Shape& shape);
Shape contiguous_strides(const Shape& shape);
// The index of the first NaN or infinity in x[0..n), or n when every value is finite.
int64_t first_nonfinite(const float* x, int64_t n);
// "NaN", "+Inf" or "-Inf": how an error names a value that is not finite.
const char* nonfinite_name(float v);

// A pooled float buffer shared by a tensor and its views.
class Storage {
 public:
  explicit Storage(size_t n);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  float* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  float* data_;
  size_t size_;
};

class Tensor;
struct Node;
struct TensorImpl;
struct GradSlot;
// A handle on a tensor's gradient slot, null for a tensor that needs no gradient.
using GradRef = std::shared_ptr<GradSlot>;

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // --- factories (values are contiguous) ---
  static Tensor empty(const Shape& shape);
  static Tensor zeros(const Shape& shape);
  static Tensor ones(const Shape& shape);
  static Tensor full(const Shape& shape, float value);
  static Tensor arange(int64_t n);  // [0, 1, ..., n-1]
  static Tensor randn(const Shape& shape, Rng& rng, float mean = 0.0f, float std = 1.0f);
  static Tensor uniform(const Shape& shape, Rng& rng, float low = 0.0f, float high = 1.0f);
  static Tensor from_vector(const std::vector<float>& values, const Shape& shape);
  // A tensor over existing storage (used for views into flat parameter buffers).
  static Tensor view_of(std::shared_ptr<Storage> storage, const Shape& shape, int64_t offset);

  // --- metadata ---
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  const Shape& strides() const;
  int64_t offset() const;
  int64_t dim() const { return static_cast<int64_t>(shape().size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t numel() const;
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const;
  // Pointer to the first element (storage + offset). Index with strides unless contiguous.
  float* data() const;

  // --- values ---
  float item() const;                                  // the single value of a 1-element tensor
  float at(std::initializer_list<int64_t> idx) const;  // bounds-checked element read
  std::vector<float> to_vector() const;                // values in row-major order
  Tensor clone() const;                                // a contiguous copy, detached
  void fill_(float value);                             // in place, not recorded
  void copy_from(const Tensor& src);                   // in place, same shape, not recorded
  std::string str(int64_t max_per_dim = 6) const;      // readable printing

  // --- autograd ---
  bool requires_grad() const;
  Tensor& set_requires_grad(bool on = true);
  Tensor grad() const;  // undefined until a backward pass reaches this tensor
  void set_grad(const Tensor& g);
  void zero_grad();  // zeros the gradient buffer in place (keeps it)
  bool is_leaf() const;
  const std::shared_ptr<Node>& grad_fn() const;
  Tensor detach() const;  // same storage, no history

  // --- recomputation ---
  // Drops the values of a tensor whose producing op attached a recipe (set_recompute); the next
  // read of data() recomputes them into fresh pooled storage. A layer calls it once the forward has
  // consumed a cheap-to-recompute activation that some backward saved, so the step keeps one copy
  // of the inputs instead of two. Without a recipe (or with gradients off) it does nothing.
  void release_values() const;
  bool values_released() const;
  // Backward from a 1-element tensor (seed 1) or with an explicit upstream gradient of this shape.
  // Unless retain_graph, the graph is freed as it is walked: intermediate gradients and closures
  // go back to the pool, so the next step reuses their memory. With retain_graph the intermediate
  // gradients stay readable until the next backward over the graph, which starts them from zero.
  // A backward that reaches a tensor whose graph an earlier backward freed (the same loss twice, or a
  // second loss computed from an intermediate of the first) throws before any gradient changes.
  void backward(bool retain_graph = false) const;
  void backward(const Tensor& upstream, bool retain_graph = false) const;

  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

// The autograd side of a tensor: whether it needs a gradient, where the gradient accumulates, and
// the op that produced it. Kept apart from the values so that the graph does not hold them.
struct GradSlot {
  Shape shape;  // of the tensor, and so of its gradient
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;
  std::shared_ptr<Node> grad_fn;
  // The op that made the tensor, once a backward without retain_graph has released its grad_fn: the
  // tensor is still no leaf, and a backward that reaches it again is refused, as its graph is gone.
  const char* freed_op = nullptr;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;  // null while released values await recomputation
  Shape shape, strides;
  int64_t offset = 0;
  std::shared_ptr<GradSlot> autograd;         // created when the tensor first takes part in autograd
  std::function<void(float* dst)> recompute;  // fills contiguous values (see release_values)
};

// A recorded op: its inputs' gradient slots (the graph's edges) and the closure that accumulates
// their gradients.
struct Node {
  const char* name;
  std::vector<GradRef> inputs;
  std::function<void(const Tensor& grad_out)> backward;
};

// --- helpers for writing ops (see ops.cpp) ---
bool grad_enabled();
// Records `out` as produced by op `name` from `inputs` when grad mode is on and any input needs a
// gradient; `backward` receives out's gradient and adds into the inputs' gradients. The closure
// should capture only what it reads: values its formula needs, and grad_ref() for the rest.
void record(Tensor& out, const char* name, const std::vector<Tensor>& inputs,
            std::function<void(const Tensor&)> backward);
// t's gradient slot when t needs a gradient, else null.
GradRef grad_ref(const Tensor& t);
// The gradient buffer of t (contiguous, t's shape), created zero-filled on first use.
float* grad_buffer(const Tensor& t);
float* grad_buffer(const GradRef& slot);
// For a backward that writes EVERY element of the slot's gradient: the buffer, and the beta to write
// it with. The first writer gets a new buffer that is not zero-filled and beta 0 (store); a later one
// gets the existing buffer and beta 1 (add). A partial writer must use grad_buffer().
struct GradTarget {
  float* data;
  float beta;
  bool overwrite() const { return beta == 0.0f; }
};
GradTarget grad_target(const GradRef& slot);
// Attaches the recipe that recomputes a contiguous op output after release_values(); only while
// gradients are recorded (outside a graph nothing is saved, so nothing is released).
void set_recompute(const Tensor& out, std::function<void(float* dst)> recipe);
// t's values in a contiguous tensor: t itself when already contiguous, else a copy (not recorded).
Tensor contiguous_values(const Tensor& t);

// Disables graph recording in its scope (evaluation, sampling, optimizer updates).
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace tfm
