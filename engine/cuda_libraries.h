// Where this machine's CUDA libraries are, found the way the GPU half loads them (dlopen, so the
// same binary starts where none is installed): the driver, the runtime, cuBLAS/cuBLASLt, cuDNN,
// NCCL and CUPTI. Search order (docs GPU.md): $PS_CUDA_LIB_DIR, the loader's default path,
// /usr/local/cuda/lib64, /usr/local/cuda/lib, then the pip layout of the `python3` on PATH
// (site-packages/nvidia/*/lib, where PyTorch users keep cuDNN and NCCL). `pipestudio devices`
// prints the file each library came from, or why it was not found.
// Depends on: the standard library and dlopen; no CUDA headers.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace ps::engine {

struct CudaLibrary
{
    std::string role; // "driver", "runtime", "cublas", "cublasLt", "cudnn", "nccl", "cupti"
    std::string soname; // "libcublas.so.13"
    bool found = false;
    std::string path; // the file loaded, when found
    std::string detail; // the loader's error for the last place tried, when not found
};

// The directories searched after the loader's default path, in order (existing ones only).
[[nodiscard]] std::vector<std::filesystem::path> cudaLibrarySearchPath();

// Finds every library of the GPU half; each is loaded and released again (nothing stays loaded).
[[nodiscard]] std::vector<CudaLibrary> findCudaLibraries();

// The one loader of the GPU half: the library of `role` ("cublas", "cudnn", "nccl", "cupti", ...)
// opened in the order above and kept open for the process. Throws ps::Error naming the library
// and why it could not be loaded.
[[nodiscard]] void* openCudaLibrary(std::string_view role);
// A function of that library by name, to be cast to its declared type; throws ps::Error when
// the library or the symbol is missing.
[[nodiscard]] void* cudaSymbol(std::string_view role, const char* name);

} // namespace ps::engine
