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

void TokenData::sample(std::mt19937_64& rng, std::int64_t batch, std::int64_t seq, std::int64_t* ids,
    std::int64_t* labels, std::int64_t contextLength, std::int64_t* context) const
{
    const auto window = contextLength + seq + 1;
    if (size() < window)
        throw Error("the data (" + m_source + ") has " + std::to_string(size()) + " tokens, fewer than one window of "
            + std::to_string(window)
            + (contextLength > 0 ? " (the encoder's " + std::to_string(contextLength) + " before the decoder's "
                        + std::to_string(seq + 1) + ")"
                                 : std::string()));
    std::uniform_int_distribution<std::int64_t> offset(contextLength, size() - seq - 1);
    for (std::int64_t b = 0; b < batch; ++b) {
        const auto o = offset(rng);
        for (std::int64_t c = 0; c < contextLength; ++c)
            context[b * contextLength + c] = m_tokens[static_cast<std::size_t>(o - contextLength + c)];
        for (std::int64_t t = 0; t < seq; ++t) {
            ids[b * seq + t] = m_tokens[static_cast<std::size_t>(o + t)];
            labels[b * seq + t] = m_tokens[static_cast<std::size_t>(o + t + 1)];
        }
    }
}

namespace {

    // What reads each input: an embedding's ids (their range), a cross-entropy's labels (classes);
    // and which inputs are the token ids and the labels.
    struct InputReaders
    {
        std::vector<std::int64_t> embeddingRows; // by tensor index
        std::vector<TensorId> table; // the embedding table reading each input
        std::vector<std::int64_t> classes;
        std::vector<char> aligned; // by tensor index: reaches the loss's logits row for row
        TensorId ids, labels;
    };

    // The tensors that reach `logits` row for row: walking back from the logits through every
    // operand but the right one of a MatMul or Einsum and an Attention's keys and values. An
    // encoder's memory reaches a decoder's rows only through those (cross-attention's keys and
    // values), so of an encoder-decoder's two token inputs only the decoder's is reached.
    std::vector<char> rowAligned(const Graph& g, TensorId logits)
    {
        std::vector<char> seen(g.tensorCount(), 0);
        std::vector<TensorId> stack { logits };
        while (!stack.empty()) {
            const auto t = stack.back();
            stack.pop_back();
            if (seen[t.index()] != 0)
                continue;
            seen[t.index()] = 1;
            const auto& tensor = g.tensor(t);
            if (!tensor.producer.valid())
                continue;
            const auto& n = g.node(tensor.producer);
            for (std::size_t i = 0; i < n.inputs.size(); ++i) {
                const bool right = (n.op == OpType::MatMul || n.op == OpType::Einsum) && i == 1;
                const bool memory = n.op == OpType::Attention && (i == 1 || i == 2);
                if (!right && !memory)
                    stack.push_back(n.inputs[i]);
            }
        }
        return seen;
    }

    InputReaders readersOf(const Graph& graph)
    {
        InputReaders r;
        r.embeddingRows.assign(graph.tensorCount(), 0);
        r.table.assign(graph.tensorCount(), TensorId());
        r.classes.assign(graph.tensorCount(), 0);
        for (const auto& n : graph.nodes()) {
            if (n.op == OpType::Embedding) {
                r.embeddingRows[n.inputs[0].index()] = graph.tensor(n.inputs[1]).shape.at(0);
                r.table[n.inputs[0].index()] = n.inputs[1];
            }
            if (n.op == OpType::CrossEntropy) {
                r.classes[n.inputs[1].index()] = graph.tensor(n.inputs[0]).shape.back();
                r.aligned = rowAligned(graph, n.inputs[0]);
            }
        }
        r.aligned.resize(graph.tensorCount(), 0);
        for (const auto& t : graph.tensors()) {
            if (t.kind == TensorKind::Input && t.shape.size() == 2 && r.classes[t.id.index()] > 0)
                r.labels = t.id;
        }
        // The token ids: of the inputs shaped as the labels that index a table, one that reaches the
        // logits row for row (an encoder-decoder's decoder, not its encoder), and of those the one
        // whose table is the vocabulary (the most rows; BERT's token types and a position input
        // index smaller ones); of two over one shared table, the later (a decoder's after its
        // encoder's).
        for (const auto& t : graph.tensors()) {
            if (!r.labels.valid() || t.kind != TensorKind::Input || r.embeddingRows[t.id.index()] == 0
                || t.shape != graph.tensor(r.labels).shape)
                continue;
            const auto i = t.id.index();
            if (!r.ids.valid()) {
                r.ids = t.id;
                continue;
            }
            const auto best = r.ids.index();
            if (r.aligned[i] != r.aligned[best]) {
                if (r.aligned[i] != 0)
                    r.ids = t.id;
                continue;
            }
            if (r.embeddingRows[i] > r.embeddingRows[best]
                || (r.embeddingRows[i] == r.embeddingRows[best] && r.table[i] == r.table[best]))
                r.ids = t.id;
        }
        if (!r.ids.valid())
            r.labels = TensorId();
        return r;
    }

    std::string vocabularyMismatch(const TokenData& data, std::int64_t rows)
    {
        return "the data (" + data.source() + ") has a vocabulary of " + std::to_string(data.vocab())
            + " tokens but the model's embedding has " + std::to_string(rows)
            + " rows: train on random tokens, which are drawn from the model's vocabulary (`train "
              "--data-format random`, Run > Launch > Random tokens), or on a u16/u32 token file whose ids are "
              "below "
            + std::to_string(rows) + " (`--data-format u16 --vocab " + std::to_string(rows) + "`)";
    }

} // namespace

std::int64_t tokenVocabulary(const Graph& graph)
{
    const auto r = readersOf(graph);
    if (!r.ids.valid())
        return 0;
    // The ids' windows are also the labels: a token must be a row of the table and a class too.
    return std::min(r.embeddingRows[r.ids.index()], r.classes[r.labels.index()]);
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
            throw Error(vocabularyMismatch(data, rows));
        break;
    }
    return { ids->shape[0], ids->shape[1] };
}

BatchSource::BatchSource(const Graph& graph, TokenData data, std::uint64_t seed)
    : m_data(std::move(data))
    , m_rng(seed)
    , m_model(graph.info().name)
{
    if (graph.outputs().empty() || !graph.tensor(graph.outputs().front()).shape.empty())
        throw Error("model '" + m_model
            + "' has no scalar loss output to train on (an imported model needs `pipestudio import --loss "
              "cross-entropy|mse`)");
    const auto reads = readersOf(graph);
    const auto& embeddingRows = reads.embeddingRows;
    const auto& classes = reads.classes;
    m_ids = reads.ids;
    m_labels = reads.labels;
    bool context = false; // one encoder input reads the text before the windows
    // An encoder's token ids: over the decoder's table, or over a table of its own (as many rows as
    // the text's vocabulary at least) where the decoder's ids reach the loss row for row and these
    // do not.
    const auto encoderIds = [&](TensorId t) {
        const auto i = t.index();
        return reads.table[i] == reads.table[m_ids.index()]
            || (reads.embeddingRows[i] >= m_data.vocab() && reads.aligned[i] == 0 && reads.aligned[m_ids.index()] != 0);
    };
    for (const auto& t : graph.tensors()) {
        if (t.kind != TensorKind::Input)
            continue;
        Input in { t.name, t.shape };
        in.isFloat = t.dtype == DType::F32 || t.dtype == DType::F64 || t.dtype == DType::F16 || t.dtype == DType::BF16;
        if (!in.isFloat && t.dtype != DType::I64 && t.dtype != DType::I32 && t.dtype != DType::Bool)
            throw Error("model '" + m_model + "' input '" + t.name + "' is " + std::string(toString(t.dtype))
                + "; the engine feeds float, int64, int32 and bool inputs");
        if (t.id == m_ids) {
            in.fill = Fill::Tokens;
            if (m_data.vocab() > embeddingRows[t.id.index()])
                throw Error(vocabularyMismatch(m_data, embeddingRows[t.id.index()]));
        } else if (t.id == m_labels) {
            in.fill = Fill::Labels;
        } else if (m_ids.valid() && !context && !in.isFloat && t.shape.size() == 2
            && t.shape[0] == graph.tensor(m_ids).shape[0] && encoderIds(t.id)) {
            // An encoder's ids (the decoder's table, or its own of the text's vocabulary at least):
            // the text before the decoder's.
            in.fill = Fill::Context;
            context = true;
        } else if (in.isFloat) {
            in.fill = Fill::Normal;
        } else if (embeddingRows[t.id.index()] > 0 || classes[t.id.index()] > 0) {
            in.fill = Fill::Uniform;
            in.range = std::max(embeddingRows[t.id.index()], classes[t.id.index()]);
        }
        m_inputs.push_back(std::move(in));
    }
    const auto& first = m_ids.valid() ? graph.tensor(m_ids) : graph.tensor(graph.outputs().front());
    m_items = m_ids.valid() ? numElements(first.shape) : 0;
    if (!m_ids.valid()) { // samples: the leading dimension every input shares
        for (const auto& in : m_inputs)
            m_items = std::max<std::int64_t>(m_items, in.shape.empty() ? 1 : in.shape.front());
    }
}

BatchSource BatchSource::reshaped(const Graph& graph) const
{
    BatchSource next(graph, m_data, 0);
    next.m_rng = m_rng;
    return next;
}

HostBatch BatchSource::next()
{
    HostBatch batch;
    if (m_ids.valid()) {
        const Input* ids = nullptr;
        const Input* labels = nullptr;
        const Input* context = nullptr; // an encoder-decoder's encoder ids
        for (const auto& in : m_inputs) {
            ids = in.fill == Fill::Tokens ? &in : ids;
            labels = in.fill == Fill::Labels ? &in : labels;
            context = in.fill == Fill::Context ? &in : context;
        }
        std::vector<std::int64_t> x(static_cast<std::size_t>(numElements(ids->shape)));
        std::vector<std::int64_t> y(x.size());
        std::vector<std::int64_t> c(context ? static_cast<std::size_t>(numElements(context->shape)) : 0);
        m_data.sample(
            m_rng, ids->shape[0], ids->shape[1], x.data(), y.data(), context ? context->shape[1] : 0, c.data());
        batch.inputs.emplace_back(ids->name, std::move(x));
        batch.inputs.emplace_back(labels->name, std::move(y));
        if (context)
            batch.inputs.emplace_back(context->name, std::move(c));
    }
    for (const auto& in : m_inputs) {
        const auto n = static_cast<std::size_t>(numElements(in.shape));
        switch (in.fill) {
        case Fill::Tokens:
        case Fill::Labels:
        case Fill::Context:
            break;
        case Fill::Normal: {
            std::normal_distribution<float> normal(0.0F, 1.0F);
            std::vector<float> v(n);
            for (auto& x : v)
                x = normal(m_rng);
            batch.floatInputs.emplace_back(in.name, std::move(v));
            break;
        }
        case Fill::Uniform: {
            std::uniform_int_distribution<std::int64_t> uniform(0, in.range - 1);
            std::vector<std::int64_t> v(n);
            for (auto& x : v)
                x = uniform(m_rng);
            batch.inputs.emplace_back(in.name, std::move(v));
            break;
        }
        case Fill::Ones:
            if (in.isFloat)
                batch.floatInputs.emplace_back(in.name, std::vector<float>(n, 1.0F));
            else
                batch.inputs.emplace_back(in.name, std::vector<std::int64_t>(n, 1));
            break;
        }
    }
    return batch;
}

std::string BatchSource::encoderContext() const
{
    for (const auto& in : m_inputs) {
        if (in.fill == Fill::Context)
            return in.name + ": the " + std::to_string(in.shape[1]) + " tokens before each window";
    }
    return {};
}

std::string BatchSource::describe() const
{
    if (m_ids.valid()) {
        const auto context = encoderContext();
        return "token windows of " + m_data.source() + (context.empty() ? "" : " (" + context + ")");
    }
    std::string what;
    for (const auto& in : m_inputs) {
        const char* fill = in.fill == Fill::Normal ? "random N(0, 1)"
            : in.fill == Fill::Uniform             ? "random integers in [0, "
                                                   : "ones";
        what += (what.empty() ? "" : ", ") + in.name + " " + fill
            + (in.fill == Fill::Uniform ? std::to_string(in.range) + ")" : "");
    }
    return "generated inputs (" + what + ")";
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
