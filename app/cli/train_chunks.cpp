#include "cli/train_chunks.h"

#include "util/error.h"

#include <fmt/core.h>

namespace ps::app {
namespace {

    double mib(std::int64_t bytes)
    {
        return static_cast<double>(bytes) / (1024.0 * 1024.0);
    }

} // namespace

void addChunkOptions(CLI::App* cmd, ChunkCliOptions& options)
{
    cmd->add_flag("--chunks", options.enabled,
        "PatrickStar chunks: each stage packs its parameters, gradients and optimizer states into chunks; the "
        "first step runs them all from host memory and measures the device's non-model peak, then chunks move to "
        "the device while --device-memory has room. Host chunks are uploaded for the ops that read them "
        "(evicting the one used latest when the device is full) and updated by the optimizer on the host. "
        "Cuts are planned without the memory limit; synchronous schedules only");
    cmd->add_option("--chunk-elements", options.chunkElements,
           "Elements per chunk with --chunks (default per stage: the smallest size from its largest parameter to "
           "four times it that leaves at most 10% of the chunks unused)")
        ->check(CLI::Range(std::int64_t { 1 }, std::int64_t { 1 } << 34));
}

engine::ChunkOptions chunkOptions(const ChunkCliOptions& options)
{
    if (options.chunkElements > 0 && !options.enabled)
        throw Error("--chunk-elements sizes the chunks of --chunks; add --chunks");
    return { options.enabled, options.chunkElements };
}

nlohmann::json chunksJson(const engine::RunStepResult& r)
{
    auto out = nlohmann::json::array();
    for (const auto& c : r.deviceChunks) {
        out.push_back({ { "chunks", c.chunks }, { "host_chunks", c.hostChunks }, { "chunk_elements", c.chunkElements },
            { "device_chunk_bytes", c.deviceChunkBytes }, { "host_chunk_bytes", c.hostChunkBytes },
            { "uploads", c.uploads }, { "evictions", c.evictions }, { "bytes_up", c.bytesUp },
            { "bytes_down", c.bytesDown }, { "host_optimizer_elements", c.hostOptimizerElements },
            { "device_optimizer_elements", c.deviceOptimizerElements } });
    }
    return out;
}

std::string chunksText(const engine::RunStepResult& r, const std::vector<engine::RuntimeDevice>& devices)
{
    std::string out;
    for (std::size_t d = 0; d < r.deviceChunks.size() && d < devices.size(); ++d) {
        const auto& c = r.deviceChunks[d];
        out += fmt::format("  chunks {}: {}/{} on host ({:.2f} MiB host, {:.2f} MiB device), {} up {} down "
                           "({:.2f}/{:.2f} MiB), optimizer elements host {} device {}\n",
            devices[d].name, c.hostChunks, c.chunks, mib(c.hostChunkBytes), mib(c.deviceChunkBytes), c.uploads,
            c.evictions, mib(c.bytesUp), mib(c.bytesDown), c.hostOptimizerElements, c.deviceOptimizerElements);
    }
    return out;
}

} // namespace ps::app
