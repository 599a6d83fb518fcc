// Builds against an installed Troupe: find_package(Troupe) + Troupe::troupe.
#include <troupe/troupe.h>

#include <iostream>

int main() {
  troupe::Tensor t = troupe::ones({2, 2});
  float s = t.sum().item<float>();
  std::cout << "sum = " << s << "\n";
  return s == 4.0f ? 0 : 1;
}
