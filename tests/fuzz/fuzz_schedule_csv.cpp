// libFuzzer target: scheduleFromCsv (PyTorch pipelining's custom-schedule CSV), then the
// validator's abstract execution on what it accepted. A ps::Error is a clean rejection.
#include "fuzz_support.h"
#include "schedule/schedule_validate.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    try {
        const auto schedule = ps::scheduleFromCsv(ps::fuzz::asText(data, size), "fuzz.csv");
        (void)ps::validateSchedule(schedule);
        (void)ps::scheduleToCsv(schedule);
    } catch (const ps::Error&) {
    }
    return 0;
}
