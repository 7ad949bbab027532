#include "cuda_libraries.h"

#include "util/error.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <dlfcn.h>
#include <link.h>
#include <map>
#include <memory>
#include <mutex>

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

namespace {

    // Opens `w` in the documented order; the handle stays open when `keep`, else it is closed.
    CudaLibrary openLibrary(const Wanted& w, const std::vector<std::filesystem::path>& dirs, void** keep)
    {
        const char* env = std::getenv("PS_CUDA_LIB_DIR");
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
            if (keep != nullptr)
                *keep = handle;
            else
                ::dlclose(handle);
            break;
        }
        if (!lib.found && std::string(w.role) == "driver")
            lib.detail = "no NVIDIA driver (" + lib.detail + ")";
        return lib;
    }

} // namespace

std::vector<CudaLibrary> findCudaLibraries()
{
    const auto dirs = cudaLibrarySearchPath();
    std::vector<CudaLibrary> out;
    for (const auto& w : kWanted)
        out.push_back(openLibrary(w, dirs, nullptr));
    return out;
}

void* openCudaLibrary(std::string_view role)
{
    static std::mutex mutex;
    static std::map<std::string, void*, std::less<>> opened;
    const std::lock_guard lock(mutex);
    if (const auto it = opened.find(role); it != opened.end())
        return it->second;
    const auto* w = std::find_if(kWanted.begin(), kWanted.end(), [&](const Wanted& x) { return x.role == role; });
    if (w == kWanted.end())
        throw Error("internal: no CUDA library has the role '" + std::string(role) + "'");
    void* handle = nullptr;
    const auto lib = openLibrary(*w, cudaLibrarySearchPath(), &handle);
    if (!lib.found)
        throw Error(std::string(w->soname) + " (" + w->role + ") could not be loaded: " + lib.detail
            + "; set PS_CUDA_LIB_DIR to the folder that holds it");
    opened.emplace(std::string(role), handle);
    return handle;
}

void* cudaSymbol(std::string_view role, const char* name)
{
    void* handle = openCudaLibrary(role);
    ::dlerror();
    void* symbol = ::dlsym(handle, name);
    if (symbol == nullptr)
        throw Error("the " + std::string(role) + " library has no symbol '" + name
            + "' (a CUDA 13 library is needed; `pipestudio devices` shows which file was loaded)");
    return symbol;
}

} // namespace ps::engine
