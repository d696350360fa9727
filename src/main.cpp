// Placeholder until the CLI lands.
#include <cstdio>
int main() {
  std::puts("tfm: the command-line interface is not built yet");
  return 0;
}
