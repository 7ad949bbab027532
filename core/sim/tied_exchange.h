// The runtime's exchange of tied gradients (engine/runtime/pipeline_runner.cpp, TiedGradients),
// priced where the runtime does it: on each holder's device, as part of its first optimizer step.
// When a device's backwards are done it copies every tied gradient of its stages to host memory
// (the hand-in); once all holders have handed in, each stage adds the other holders' copies to its
// own gradient, in stage order (a GPU uploads each copy first; a CPU device adds it where it lies).
// Depends on: cluster/device_catalog.h, plan/partition.h.
#pragma once

#include "cluster/device_catalog.h"
#include "plan/partition.h"

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

namespace ps::sim {

// A copy of `bytes` from the device's memory to the host's: over its host link, or, where its
// memory is the host's (link kind "memory": a CPU device), a copy that reads and writes each byte.
[[nodiscard]] double hostCopyNs(const DeviceSpec& device, double bytes);

// One stage's hand-in: each of its tied gradients copied to the host.
[[nodiscard]] double tiedHandInNs(const DeviceSpec& device, const std::vector<TiedParameter>& tied);

// One stage's sum: per tied parameter and other holder, the copy uploaded (a GPU) and added (reads
// two arrays, writes one). `holders`: each tied tensor's holding stages.
[[nodiscard]] double tiedSumNs(const DeviceSpec& device, const std::vector<TiedParameter>& tied,
    const std::map<std::uint32_t, std::vector<std::size_t>>& holders);

} // namespace ps::sim
