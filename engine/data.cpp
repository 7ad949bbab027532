#include "data.h"

#include "util/error.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>

namespace ps::engine {
namespace {

    std::vector<char> readAll(const std::filesystem::path& path)
    {
        std::error_code ec;
        if (std::filesystem::is_directory(path, ec)) // a stream opens it, then fails on the first read
            throw Error("data file '" + path.string() + "' is a directory");
        std::ifstream in(path, std::ios::binary);
        if (!in)
            throw Error("data file '" + path.string() + "' cannot be read");
        return { std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>() };
    }

} // namespace

TokenData TokenData::fromTextFile(const std::filesystem::path& path)
{
    const auto bytes = readAll(path);
    TokenData d;
    d.m_tokens.reserve(bytes.size());
    for (char c : bytes)
        d.m_tokens.push_back(static_cast<unsigned char>(c));
    d.m_vocab = 256;
    d.m_source = path.string() + " (bytes)";
    if (d.m_tokens.size() < 2)
        throw Error("data file '" + path.string() + "' has fewer than two bytes");
    return d;
}

TokenData TokenData::fromTokenFile(const std::filesystem::path& path, int bytesPerToken, std::int64_t vocab)
{
    if (bytesPerToken != 2 && bytesPerToken != 4)
        throw Error("token files hold uint16 or uint32 tokens, not " + std::to_string(bytesPerToken) + "-byte ones");
    const auto bytes = readAll(path);
    if (bytes.size() % static_cast<std::size_t>(bytesPerToken) != 0)
        throw Error("token file '" + path.string() + "' has " + std::to_string(bytes.size())
            + " bytes, not a multiple of " + std::to_string(bytesPerToken));
    TokenData d;
    d.m_vocab = vocab;
    d.m_source = path.string() + " (uint" + std::to_string(bytesPerToken * 8) + " tokens)";
    for (std::size_t i = 0; i < bytes.size(); i += static_cast<std::size_t>(bytesPerToken)) {
        std::uint32_t t = 0;
        for (int b = bytesPerToken - 1; b >= 0; --b) // little endian
            t = (t << 8) | static_cast<unsigned char>(bytes[i + static_cast<std::size_t>(b)]);
        if (t >= vocab)
            throw Error("token file '" + path.string() + "': token " + std::to_string(t) + " at position "
                + std::to_string(i / static_cast<std::size_t>(bytesPerToken)) + " is outside the vocabulary of "
                + std::to_string(vocab));
        d.m_tokens.push_back(t);
    }
    if (d.m_tokens.size() < 2)
        throw Error("token file '" + path.string() + "' has fewer than two tokens");
    return d;
}

TokenData TokenData::random(std::int64_t vocab, std::int64_t tokens, std::uint64_t seed)
{
    TokenData d;
    d.m_vocab = vocab;
    d.m_source = "random tokens";
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<std::uint32_t> u(0, static_cast<std::uint32_t>(vocab - 1));
    d.m_tokens.resize(static_cast<std::size_t>(std::max<std::int64_t>(tokens, 2)));
    for (auto& t : d.m_tokens)
        t = u(rng);
    return d;
}

TokenData TokenData::defaultCorpus()
{
    const std::filesystem::path dir = "/usr/share/common-licenses";
    std::vector<std::filesystem::path> files;
    if (std::filesystem::is_directory(dir)) {
        for (const auto& e : std::filesystem::directory_iterator(dir)) {
            if (e.is_regular_file())
                files.push_back(e.path());
        }
    }
    std::sort(files.begin(), files.end());
    TokenData d;
    for (const auto& f : files) {
        for (char c : readAll(f))
            d.m_tokens.push_back(static_cast<unsigned char>(c));
    }
    if (d.m_tokens.size() < 2)
        throw Error("no default corpus: " + dir.string() + " is missing; pass --data FILE");
    d.m_source = dir.string() + " (bytes)";
    return d;
}

void TokenData::sample(
    std::mt19937_64& rng, std::int64_t batch, std::int64_t seq, std::int64_t* ids, std::int64_t* labels) const
{
    if (size() < seq + 1)
        throw Error("the data (" + m_source + ") has " + std::to_string(size()) + " tokens, fewer than one window of "
            + std::to_string(seq + 1));
    std::uniform_int_distribution<std::int64_t> offset(0, size() - seq - 1);
    for (std::int64_t b = 0; b < batch; ++b) {
        const auto o = offset(rng);
        for (std::int64_t t = 0; t < seq; ++t) {
            ids[b * seq + t] = m_tokens[static_cast<std::size_t>(o + t)];
            labels[b * seq + t] = m_tokens[static_cast<std::size_t>(o + t + 1)];
        }
    }
}

TokenShape languageModelShape(const Graph& graph, const TokenData& data)
{
    const auto input = [&](const std::string& name) -> const Tensor* {
        for (const auto& t : graph.tensors()) {
            if (t.kind == TensorKind::Input && t.name == name)
                return &t;
        }
        return nullptr;
    };
    const auto* ids = input("input_ids");
    const auto* labels = input("labels");
    if (!ids || !labels || ids->shape.size() != 2 || labels->shape != ids->shape)
        throw Error("model '" + graph.info().name
            + "' is not a language model the trainer can feed: it needs int64 inputs 'input_ids' and 'labels' of "
              "shape (batch, sequence)");
    if (graph.outputs().empty() || !graph.tensor(graph.outputs().front()).shape.empty())
        throw Error("model '" + graph.info().name + "' has no scalar loss output to train on");
    for (const auto& n : graph.nodes()) { // the embedding table that reads the ids
        if (n.op != OpType::Embedding || n.inputs[0] != ids->id)
            continue;
        const auto rows = graph.tensor(n.inputs[1]).shape[0];
        if (data.vocab() > rows)
            throw Error("the data (" + data.source() + ") has a vocabulary of " + std::to_string(data.vocab())
                + " tokens but the model's embedding has " + std::to_string(rows) + " rows");
        break;
    }
    return { ids->shape[0], ids->shape[1] };
}

double scheduledLearningRate(
    double peak, std::int64_t step, std::int64_t warmupSteps, std::int64_t decaySteps, double minRatio)
{
    if (step <= warmupSteps)
        return peak * static_cast<double>(step) / static_cast<double>(warmupSteps);
    if (decaySteps <= warmupSteps)
        return peak;
    const double progress =
        std::min(1.0, static_cast<double>(step - warmupSteps) / static_cast<double>(decaySteps - warmupSteps));
    const double floor = peak * minRatio;
    return floor + 0.5 * (peak - floor) * (1.0 + std::cos(3.141592653589793 * progress));
}

} // namespace ps::engine
