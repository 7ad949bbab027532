#include "cupti/cupti_tracer.h"

#include "cuda_libraries.h"
#include "cupti/cupti_records.h"
#include "util/error.h"

#include <cupti.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>

namespace ps::profiler::cupti {
namespace {

    // CUPTI entry points, resolved by name from the library the loader found.
    struct Api
    {
        decltype(&cuptiActivityRegisterCallbacks) registerCallbacks = nullptr;
        decltype(&cuptiActivityEnable) enable = nullptr;
        decltype(&cuptiActivityDisable) disable = nullptr;
        decltype(&cuptiActivityFlushAll) flushAll = nullptr;
        decltype(&cuptiActivityGetNextRecord) nextRecord = nullptr;
        decltype(&cuptiActivityGetNumDroppedRecords) droppedRecords = nullptr;
        decltype(&cuptiActivityPushExternalCorrelationId) pushId = nullptr;
        decltype(&cuptiActivityPopExternalCorrelationId) popId = nullptr;
        decltype(&cuptiGetResultString) resultString = nullptr;
        decltype(&cuptiGetVersion) version = nullptr;
        decltype(&cuptiGetTimestamp) timestamp = nullptr;
    };

    template <typename F> void resolve(F& f, const char* name)
    {
        f = reinterpret_cast<F>(engine::cudaSymbol("cupti", name));
    }

    const Api& api()
    {
        static const Api a = [] {
            Api x;
            resolve(x.registerCallbacks, "cuptiActivityRegisterCallbacks");
            resolve(x.enable, "cuptiActivityEnable");
            resolve(x.disable, "cuptiActivityDisable");
            resolve(x.flushAll, "cuptiActivityFlushAll");
            resolve(x.nextRecord, "cuptiActivityGetNextRecord");
            resolve(x.droppedRecords, "cuptiActivityGetNumDroppedRecords");
            resolve(x.pushId, "cuptiActivityPushExternalCorrelationId");
            resolve(x.popId, "cuptiActivityPopExternalCorrelationId");
            resolve(x.resultString, "cuptiGetResultString");
            resolve(x.version, "cuptiGetVersion");
            resolve(x.timestamp, "cuptiGetTimestamp");
            return x;
        }();
        return a;
    }

    void check(CUptiResult result, const char* what)
    {
        if (result == CUPTI_SUCCESS)
            return;
        const char* text = nullptr;
        if (api().resultString == nullptr || api().resultString(result, &text) != CUPTI_SUCCESS || text == nullptr)
            text = "unknown CUPTI error";
        throw Error(
            std::string("CUPTI: ") + what + " failed: " + text + " (" + std::to_string(static_cast<int>(result)) + ")");
    }

    // What the completion callback (CUPTI's thread) fills.
    std::mutex gMutex;
    ActivityBatch gBatch;
    std::atomic<bool> gActive { false };

    constexpr std::size_t kBufferBytes = std::size_t { 8 } << 20;
    constexpr std::size_t kAlign = 8;

    void CUPTIAPI bufferRequested(uint8_t** buffer, size_t* size, size_t* maxNumRecords)
    {
        *buffer = static_cast<uint8_t*>(std::aligned_alloc(kAlign, kBufferBytes));
        *size = *buffer != nullptr ? kBufferBytes : 0;
        *maxNumRecords = 0; // as many as fit
    }

    void CUPTIAPI bufferCompleted(
        CUcontext context, uint32_t streamId, uint8_t* buffer, size_t /*size*/, size_t validSize)
    {
        {
            const std::lock_guard lock(gMutex);
            CUpti_Activity* record = nullptr;
            while (api().nextRecord(buffer, validSize, &record) == CUPTI_SUCCESS)
                (void)appendRecord(record, gBatch);
            size_t dropped = 0;
            if (api().droppedRecords(context, streamId, &dropped) == CUPTI_SUCCESS)
                gBatch.droppedRecords += dropped;
        }
        std::free(buffer);
    }

    // CUPTI writes an external-correlation record only in front of an API record, so the runtime
    // and driver API kinds are on as well (cuBLAS and cuDNN launch through the driver API); their
    // records carry nothing else the profile uses and are skipped (seen on an H200: with neither
    // on, no kernel could be attributed to a node).
    constexpr CUpti_ActivityKind kKinds[] = { CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
        CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION, CUPTI_ACTIVITY_KIND_RUNTIME,
        CUPTI_ACTIVITY_KIND_DRIVER };

    class CuptiTracer final : public ActivityTracer
    {
    public:
        CuptiTracer()
        {
            if (gActive.exchange(true))
                throw Error("CUPTI: another profiling session is active in this process");
            try {
                check(api().registerCallbacks(bufferRequested, bufferCompleted), "cuptiActivityRegisterCallbacks");
                for (const auto kind : kKinds)
                    check(api().enable(kind), "cuptiActivityEnable");
            } catch (...) {
                gActive = false;
                throw;
            }
        }
        ~CuptiTracer() override
        {
            for (const auto kind : kKinds) {
                if (m_collecting)
                    (void)api().disable(kind);
            }
            (void)api().flushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
            const std::lock_guard lock(gMutex);
            gBatch = {};
            gActive = false;
        }
        CuptiTracer(const CuptiTracer&) = delete;
        CuptiTracer& operator=(const CuptiTracer&) = delete;

        void push(std::uint64_t externalId) override
        {
            check(api().pushId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, externalId),
                "cuptiActivityPushExternalCorrelationId");
        }
        void pop() override
        {
            std::uint64_t last = 0;
            check(api().popId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last), "cuptiActivityPopExternalCorrelationId");
        }
        // Disabling the kinds stops CUPTI's per-launch work (its records and the API callbacks'
        // bookkeeping); what it recorded before stays in its buffers for collect().
        void setCollecting(bool on) override
        {
            if (on == m_collecting)
                return;
            for (const auto kind : kKinds)
                check(
                    on ? api().enable(kind) : api().disable(kind), on ? "cuptiActivityEnable" : "cuptiActivityDisable");
            m_collecting = on;
        }
        [[nodiscard]] ActivityBatch collect() override
        {
            // Forced: the buffers still being filled are delivered too (the caller synchronized).
            check(api().flushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
            const std::lock_guard lock(gMutex);
            auto out = std::move(gBatch);
            gBatch = {};
            return out;
        }
        // The clock of the records' start and end (CUPTI's own timestamp).
        [[nodiscard]] std::uint64_t timestampNs() const override
        {
            std::uint64_t now = 0;
            check(api().timestamp(&now), "cuptiGetTimestamp");
            return now;
        }

    private:
        bool m_collecting = true; // the constructor enabled every kind
    };

} // namespace

std::unique_ptr<ActivityTracer> makeCuptiTracer()
{
    // A missing libcupti or symbol is reported before anything starts, and so is a library whose
    // record layouts may differ from the headers this build read them with.
    std::uint32_t version = 0;
    check(api().version(&version), "cuptiGetVersion");
    if (version / 10000 != CUPTI_API_VERSION / 10000 || version < CUPTI_API_VERSION)
        throw Error("CUPTI: the library loaded has API version " + std::to_string(version)
            + ", this build reads records " + "of version " + std::to_string(CUPTI_API_VERSION) + " ("
            + "use the CUPTI of the same CUDA major release, " + "or set PS_CUDA_LIB_DIR to its folder)");
    return std::make_unique<CuptiTracer>();
}

} // namespace ps::profiler::cupti
