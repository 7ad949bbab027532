// libFuzzer target: the cluster and device catalog JSON loaders (core/cluster). The first byte
// picks the loader so one corpus (catalogs, clusters, single devices) feeds all three; a
// ps::Error is a clean rejection.
#include "cluster/cluster.h"
#include "fuzz_support.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    if (size == 0)
        return 0;
    const auto text = ps::fuzz::asText(data + 1, size - 1);
    try {
        switch (data[0] % 3) {
        case 0: {
            const auto cluster = ps::clusterFromJson(text, "fuzz.json");
            cluster.check();
            (void)ps::clusterToJson(cluster);
            break;
        }
        case 1: {
            const auto catalog = ps::DeviceCatalog::fromJson(text, "fuzz.json");
            for (const auto& device : catalog.devices())
                (void)ps::deviceSpecToJson(device);
            break;
        }
        default:
            (void)ps::deviceSpecFromJson(text, "fuzz.json");
        }
    } catch (const ps::Error&) {
    }
    return 0;
}
