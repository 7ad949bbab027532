// The CUPTI Activity API as the device profiler's tracer (device_profiler.h): concurrent-kernel,
// memcpy, memset and external-correlation records into buffers CUPTI fills on its own thread;
// push/pop map to cuptiActivityPush/PopExternalCorrelationId (CUSTOM0). libcupti is opened by
// name through the engine's CUDA loader, so nothing links CUPTI. One tracer at a time per process
// (CUPTI's activity callbacks are global).
// Depends on: device_profiler.h; CUPTI's headers only in cupti_tracer.cpp.
#pragma once

#include "device_profiler.h"

#include <memory>

namespace ps::profiler::cupti {

// Starts recording. Throws ps::Error saying why CUPTI cannot be used (a build without CUPTI's
// headers, libcupti missing, a CUPTI call failing, another tracer active).
[[nodiscard]] std::unique_ptr<ActivityTracer> makeCuptiTracer();

} // namespace ps::profiler::cupti
