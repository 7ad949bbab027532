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

    // `batch` windows of `seq` tokens at random offsets: ids[b, t] = x[o + t], labels = x[o + t + 1];
    // with `contextLength` > 0 also the text before each window, context[b, c] = x[o - L + c]
    // (an encoder-decoder's encoder reads what precedes the text its decoder continues).
    void sample(std::mt19937_64& rng, std::int64_t batch, std::int64_t seq, std::int64_t* ids, std::int64_t* labels,
        std::int64_t contextLength = 0, std::int64_t* context = nullptr) const;

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

// The vocabulary of a language model as BatchSource feeds it: the rows of the embedding table that
// its token ids read (the ids input shaped like the labels a CrossEntropy reads, the one with the
// most rows), or the CrossEntropy's classes where fewer (the labels are the same tokens); 0 for a
// graph the trainer does not feed tokens.
[[nodiscard]] std::int64_t tokenVocabulary(const Graph& graph);

// One micro-batch of a graph's inputs on the host, by input name.
struct HostBatch
{
    std::vector<std::pair<std::string, std::vector<std::int64_t>>> inputs;
    std::vector<std::pair<std::string, std::vector<float>>> floatInputs;
};

// Makes the micro-batches a graph with a scalar loss trains on. A language model (an int64
// (B, T) input read by an Embedding, and int64 labels of the same shape read by CrossEntropy:
// the zoo's models, an imported GPT with `import --loss cross-entropy`) samples windows of the
// token data: ids x[o..o+T), labels x[o+1..o+T]. Any other graph gets generated inputs, stated as
// such by describe(): floats N(0, 1), ids uniform over the rows of the embedding reading them,
// class labels uniform over the classes of the CrossEntropy reading them, other integers 1 (a
// padding mask that keeps every position).
class BatchSource
{
public:
    // Throws ps::Error naming the model when it has no scalar loss output or an input of another
    // type, or naming the data when its vocabulary is larger than the model's embedding.
    BatchSource(const Graph& graph, TokenData data, std::uint64_t seed);

    [[nodiscard]] HostBatch next();
    // A source feeding `graph` (the same model at another micro-batch size: Ada-Grouper's
    // controller switching b) that continues this one's data stream; throws as the constructor does.
    [[nodiscard]] BatchSource reshaped(const Graph& graph) const;
    [[nodiscard]] bool samplesTokens() const
    {
        return m_ids.valid();
    }
    // Tokens (B x T) per micro-batch for a language model, samples (B) otherwise.
    [[nodiscard]] std::int64_t itemsPerBatch() const
    {
        return m_items;
    }
    [[nodiscard]] std::string describe() const;
    // Of an encoder-decoder language model, what its encoder reads ("src: the 10 tokens before each
    // window"); empty for other models.
    [[nodiscard]] std::string encoderContext() const;
    [[nodiscard]] const TokenData& data() const
    {
        return m_data;
    }

private:
    enum class Fill : std::uint8_t { Tokens, Labels, Context, Normal, Uniform, Ones };
    struct Input
    {
        std::string name;
        Shape shape;
        Fill fill = Fill::Ones;
        std::int64_t range = 0; // Uniform: [0, range)
        bool isFloat = false;
    };

    TokenData m_data;
    std::mt19937_64 m_rng;
    std::vector<Input> m_inputs;
    TensorId m_ids; // the token input of a language model
    TensorId m_labels;
    std::int64_t m_items = 0;
    std::string m_model;
};

// Linear warm-up to `peak` over `warmupSteps`, then cosine decay to peak * minRatio at
// `decaySteps` (constant when decaySteps <= warmupSteps). Steps count from 1.
[[nodiscard]] double scheduledLearningRate(
    double peak, std::int64_t step, std::int64_t warmupSteps, std::int64_t decaySteps, double minRatio);

} // namespace ps::engine
