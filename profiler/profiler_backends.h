// Which measurement backends this machine offers: CPU timers always; CUPTI when libcupti loads
// and a CUDA GPU is present.
//
// CUPTI is loaded with dlopen, so the binary starts on machines without the CUDA toolkit.
// Depends on: engine (device discovery), core; no CUDA headers.
#pragma once

#include <string>
#include <vector>

namespace ps::profiler {

struct BackendInfo
{
    std::string name; // "cpu-timers", "cupti"
    bool available = false;
    std::string detail; // version, or why it is unavailable
};

[[nodiscard]] std::vector<BackendInfo> availableBackends();

} // namespace ps::profiler
