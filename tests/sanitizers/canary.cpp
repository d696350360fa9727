// A program with one deliberate bug per argument, built only in sanitizer trees (TFM_SANITIZE) with
// their flags and runtimes: each ctest entry passes when the sanitizer names the bug. The suite's other
// tests pass when nothing is reported, which a tree whose sanitizers were silently lost would do too;
// these fail then.
#include <climits>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {
struct Base {
  virtual ~Base() = default;
};
struct Derived : Base {
  int value = 2;
  int get() const { return value; }
};
struct Other {
  virtual ~Other() = default;
  long payload[4] = {};
};
}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const std::string bug = argv[1];
  volatile int index = argc + 6;  // 8, which the compiler cannot see
  if (bug == "heap-buffer-overflow") {
    char* p = new char[8];
    std::memset(p, 0, static_cast<size_t>(index) + 1);  // one byte past the end
    const int v = p[0];
    delete[] p;
    return v;
  }
  if (bug == "heap-use-after-free") {
    int* p = new int[8];
    delete[] p;
    return p[index - 8];
  }
  if (bug == "leak") {
    void* volatile p = std::malloc(100);
    p = nullptr;
    return 0;
  }
  if (bug == "signed-integer-overflow") {
    volatile int x = INT_MAX - 8;
    return x + index + 1;
  }
  if (bug == "misaligned") {
    alignas(8) char bytes[16] = {};
    const int* p = reinterpret_cast<const int*>(bytes + index - 7);
    return *p;
  }
  if (bug == "vptr") {
    Base* b = reinterpret_cast<Base*>(new Other);
    const int v = static_cast<Derived*>(b)->get();  // an Other is no Derived
    delete reinterpret_cast<Other*>(b);
    return v;
  }
  return 2;
}
