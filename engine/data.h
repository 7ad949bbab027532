// Training data for language models: a token stream and random (input, next-token label) windows.
//
// Sources: any text file as bytes (vocabulary 256), uint16/uint32 token files (nanoGPT's .bin
// layout), or uniformly random tokens for throughput runs. The default corpus is Debian's
// /usr/share/common-licenses, present on every Debian system.
// Also what the trainers share about feeding a language model: its token shape and the learning-
// rate schedule.
// Depends on: graph/graph.h; no Qt, no CUDA.
#pragma once

#include "graph/graph.h"

#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

namespace ps::engine {

class TokenData
{
public:
    // Throws ps::Error naming the file when it cannot be read or is too short for one window.
    static TokenData fromTextFile(const std::filesystem::path& path);
    static TokenData fromTokenFile(const std::filesystem::path& path, int bytesPerToken, std::int64_t vocab);
    static TokenData random(std::int64_t vocab, std::int64_t tokens, std::uint64_t seed);
    // Every file under /usr/share/common-licenses, concatenated in name order, as bytes.
    static TokenData defaultCorpus();

    [[nodiscard]] std::int64_t vocab() const
    {
        return m_vocab;
    }
    [[nodiscard]] std::int64_t size() const
    {
        return static_cast<std::int64_t>(m_tokens.size());
    }
    [[nodiscard]] const std::string& source() const
    {
        return m_source;
    }

    // `batch` windows of `seq` tokens at random offsets: ids[b, t] = x[o + t], labels = x[o + t + 1].
    void sample(
        std::mt19937_64& rng, std::int64_t batch, std::int64_t seq, std::int64_t* ids, std::int64_t* labels) const;

private:
    std::vector<std::uint32_t> m_tokens;
    std::int64_t m_vocab = 256;
    std::string m_source;
};

// The (batch, sequence) of a language model's int64 inputs 'input_ids' and 'labels'. Throws
// ps::Error naming the model when it has no such inputs or no scalar loss, or naming the data when
// its vocabulary is larger than the model's embedding table.
struct TokenShape
{
    std::int64_t batch = 0;
    std::int64_t sequence = 0;
};
[[nodiscard]] TokenShape languageModelShape(const Graph& graph, const TokenData& data);

// Linear warm-up to `peak` over `warmupSteps`, then cosine decay to peak * minRatio at
// `decaySteps` (constant when decaySteps <= warmupSteps). Steps count from 1.
[[nodiscard]] double scheduledLearningRate(
    double peak, std::int64_t step, std::int64_t warmupSteps, std::int64_t decaySteps, double minRatio);

} // namespace ps::engine
