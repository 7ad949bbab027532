#include "cupti/cupti_records.h"

#include <cstring>

namespace ps::profiler::cupti {
namespace {

    const char* copyName(std::uint8_t kind)
    {
        switch (kind) {
        case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
            return "memcpy HtoD";
        case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
            return "memcpy DtoH";
        case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
            return "memcpy DtoD";
        case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP:
            return "memcpy PtoP";
        default:
            return "memcpy";
        }
    }

} // namespace

// Each record is copied into its struct (the buffer holds bytes; no type punning).
bool appendRecord(const CUpti_Activity* record, ActivityBatch& batch)
{
    CUpti_ActivityKind kind {};
    std::memcpy(&kind, record, sizeof kind);
    const auto read = [record]<typename T>(T& out) { std::memcpy(&out, record, sizeof out); };
    switch (kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        CUpti_ActivityKernel10 k {};
        read(k);
        batch.activities.push_back(
            { ActivityKind::Kernel, k.name ? k.name : "", k.start, k.end, k.correlationId, k.streamId, k.deviceId, 0 });
        return true;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
        CUpti_ActivityMemcpy6 m {};
        read(m);
        batch.activities.push_back({ ActivityKind::Memcpy, copyName(m.copyKind), m.start, m.end, m.correlationId,
            m.streamId, m.deviceId, m.bytes });
        return true;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
        CUpti_ActivityMemset4 m {};
        read(m);
        batch.activities.push_back(
            { ActivityKind::Memset, "memset", m.start, m.end, m.correlationId, m.streamId, m.deviceId, m.bytes });
        return true;
    }
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
        CUpti_ActivityExternalCorrelation c {};
        read(c);
        batch.correlations.push_back({ c.correlationId, c.externalId });
        return true;
    }
    default:
        return false;
    }
}

} // namespace ps::profiler::cupti
