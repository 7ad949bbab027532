#include "cuda_libraries.h"

#include <array>
#include <cstdio>
#include <cstdlib>
#include <dlfcn.h>
#include <link.h>
#include <memory>

namespace ps::engine {
namespace {

    struct Wanted
    {
        const char* role;
        const char* soname;
    };

    constexpr std::array kWanted { Wanted { "driver", "libcuda.so.1" }, Wanted { "runtime", "libcudart.so.13" },
        Wanted { "cublas", "libcublas.so.13" }, Wanted { "cublasLt", "libcublasLt.so.13" },
        Wanted { "cudnn", "libcudnn.so.9" }, Wanted { "nccl", "libnccl.so.2" }, Wanted { "cupti", "libcupti.so.13" } };

    // site-packages of the python3 on PATH (pip's nvidia-* wheels), or empty.
    std::filesystem::path pythonSitePackages()
    {
        std::unique_ptr<FILE, int (*)(FILE*)> pipe(
            ::popen("python3 -c 'import site; print(site.getsitepackages()[0])' 2>/dev/null", "r"), ::pclose);
        if (!pipe)
            return {};
        std::array<char, 4096> line {};
        if (!std::fgets(line.data(), static_cast<int>(line.size()), pipe.get()))
            return {};
        std::string path(line.data());
        while (!path.empty() && (path.back() == '\n' || path.back() == '\r'))
            path.pop_back();
        return path;
    }

    // The file a handle came from.
    std::string originOf(void* handle, const char* soname)
    {
        link_map* map = nullptr;
        if (::dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && *map->l_name)
            return map->l_name;
        return soname;
    }

} // namespace

std::vector<std::filesystem::path> cudaLibrarySearchPath()
{
    std::vector<std::filesystem::path> dirs;
    std::error_code ec;
    const auto add = [&](const std::filesystem::path& d) {
        if (!d.empty() && std::filesystem::is_directory(d, ec))
            dirs.push_back(d);
    };
    if (const char* env = std::getenv("PS_CUDA_LIB_DIR"))
        add(env);
    add("/usr/local/cuda/lib64");
    add("/usr/local/cuda/lib");
    const auto site = pythonSitePackages();
    if (!site.empty() && std::filesystem::is_directory(site / "nvidia", ec)) {
        for (const auto& entry : std::filesystem::directory_iterator(site / "nvidia", ec))
            add(entry.path() / "lib");
    }
    return dirs;
}

std::vector<CudaLibrary> findCudaLibraries()
{
    const auto dirs = cudaLibrarySearchPath();
    const char* env = std::getenv("PS_CUDA_LIB_DIR");
    std::vector<CudaLibrary> out;
    for (const auto& w : kWanted) {
        CudaLibrary lib { w.role, w.soname, false, {}, {} };
        // $PS_CUDA_LIB_DIR first, then the default path, then the rest of the directories.
        std::vector<std::string> tries;
        if (env && *env)
            tries.push_back((std::filesystem::path(env) / w.soname).string());
        tries.emplace_back(w.soname);
        for (const auto& d : dirs) {
            if (!env || d != std::filesystem::path(env))
                tries.push_back((d / w.soname).string());
        }
        for (const auto& t : tries) {
            void* handle = ::dlopen(t.c_str(), RTLD_LAZY | RTLD_LOCAL);
            if (!handle) {
                const char* err = ::dlerror();
                if (t == w.soname) // the loader's own path: its message names the library alone
                    lib.detail = std::string(err ? err : "not found") + "; also not in "
                        + std::to_string(tries.size() - 1) + " CUDA folder(s) searched";
                continue;
            }
            lib.found = true;
            lib.path = originOf(handle, w.soname);
            lib.detail.clear();
            ::dlclose(handle);
            break;
        }
        if (!lib.found && std::string(w.role) == "driver")
            lib.detail = "no NVIDIA driver (" + lib.detail + ")";
        out.push_back(std::move(lib));
    }
    return out;
}

} // namespace ps::engine
