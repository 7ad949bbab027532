// Training data for language models: a token stream and random (input, next-token label) windows.
//
// Sources: any text file as bytes (vocabulary 256), uint16/uint32 token files (nanoGPT's .bin
// layout), or uniformly random tokens for throughput runs. The default corpus is Debian's
// /usr/share/common-licenses, present on every Debian system.
// Depends on: the standard library; no Qt, no CUDA.
#pragma once

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

} // namespace ps::engine
