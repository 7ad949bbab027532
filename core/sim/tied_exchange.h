// The exchange of tied gradients priced where it happens.
//
// On a device whose memory is the host's (link kind "memory": a CPU device), as the runtime does it
// (engine/runtime/tied_gradients.h), on each holder's device inside its first optimizer step: once
// the device's backwards are done it copies every tied gradient of its stages to host buffers (the
// hand-in); once all holders have handed in, each stage adds the other holders' copies to its own
// gradient, where they lie, in stage order.
//
// On a GPU the simulator keeps pricing it as a transfer to the sum and back over the link between
// the holders' devices (what an NCCL all-reduce between the GPUs does, and how planned GPU
// clusters are predicted); these functions return 0 there. The engine's CUDA path deposits through
// host memory too; no GPU has measured it yet.
// Depends on: cluster/device_catalog.h, plan/partition.h.
#pragma once

#include "cluster/device_catalog.h"
#include "plan/partition.h"

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

namespace ps::sim {

// Whether the device's memory is the host's (a CPU device): its tied gradients are exchanged by
// copies in memory, priced below, not over a link.
[[nodiscard]] bool memoryIsHosts(const DeviceSpec& device);

// A GPU's exchange with one other holder: to the sum and back over the link between them; 0 where
// the device's memory is the host's.
[[nodiscard]] double tiedLinkNs(const DeviceSpec& device, const LinkSpec& link, double gradientBytes);

// One stage's hand-in: each of its tied gradients copied within memory (read and written).
[[nodiscard]] double tiedHandInNs(const DeviceSpec& device, const std::vector<TiedParameter>& tied);

// One stage's sum: per tied parameter and other holder, an add that reads two arrays and writes
// one. `holders`: each tied tensor's holding stages.
[[nodiscard]] double tiedSumNs(const DeviceSpec& device, const std::vector<TiedParameter>& tied,
    const std::map<std::uint32_t, std::vector<std::size_t>>& holders);

} // namespace ps::sim
