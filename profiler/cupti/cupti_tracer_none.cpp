// cupti_tracer.h for builds without CUPTI's headers (PS_WITH_CUDA=OFF or no toolkit).
#include "cupti/cupti_tracer.h"
#include "util/error.h"

namespace ps::profiler::cupti {

std::unique_ptr<ActivityTracer> makeCuptiTracer()
{
    throw Error("this build has no CUPTI profiler (reconfigure with PS_WITH_CUDA=ON where CUPTI's headers are)");
}

} // namespace ps::profiler::cupti
