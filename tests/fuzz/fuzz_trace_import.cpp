// libFuzzer target: profiler/trace_import.h (Nsight Systems SQLite exports and PyTorch profiler
// JSON, detected from the content) mapped onto a small MLP whose node names the seeds use.
// A ps::Error is a clean rejection.
#include "fuzz_support.h"
#include "trace_import.h"
#include "util/error.h"
#include "zoo/model_config.h"

namespace {

const ps::Graph& tinyMlp()
{
    static const ps::Graph graph = [] {
        ps::ModelConfig c = ps::zooPreset("mlp");
        c.layers = 2;
        c.hidden = 16;
        c.vocab = 4;
        c.microBatch = 4;
        c.dropout = 0;
        return ps::buildZooModel(c);
    }();
    return graph;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    const auto& graph = tinyMlp();
    const ps::fuzz::InputFile file(data, size, ".trace");
    try {
        const auto trace = ps::profiler::importTrace(graph, file.path());
        (void)ps::profiler::toImportedProfile(graph, trace, "cpu", 4);
    } catch (const ps::Error&) {
    }
    return 0;
}
