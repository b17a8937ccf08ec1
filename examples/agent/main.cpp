// A minimal libtorch program: proves that an fdlenv environment compiles,
// links and runs C++ against its locked libtorch.
//
// Prints the libtorch version it was compiled against and the result of a
// small tensor computation, so a reader can check both by eye.

#include <torch/torch.h>
#include <torch/version.h>

#include <iostream>

int main() {
  std::cout << "libtorch " << TORCH_VERSION << std::endl;

  // [[1, 2, 3], [4, 5, 6]] @ [[1, 0], [0, 1], [1, 1]] = [[4, 5], [10, 11]]
  torch::Tensor a = torch::arange(1, 7, torch::kFloat32).reshape({2, 3});
  torch::Tensor b = torch::tensor({1.f, 0.f, 0.f, 1.f, 1.f, 1.f}).reshape({3, 2});
  torch::Tensor c = torch::matmul(a, b);

  std::cout << "matmul(a, b) =\n" << c << std::endl;
  std::cout << "sum = " << c.sum().item<float>() << std::endl;

  // On a GPU variant with a visible device, the same product on the device.
  if (torch::cuda::is_available()) {
    torch::Tensor g = torch::matmul(a.to(torch::kCUDA), b.to(torch::kCUDA));
    std::cout << "cuda: " << static_cast<int>(torch::cuda::device_count()) << " device(s), sum on "
              << g.device() << " = " << g.sum().item<float>() << std::endl;
  }
  return 0;
}
