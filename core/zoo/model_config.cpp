#include "zoo/model_config.h"

#include "graph/attention_fusion.h"
#include "util/error.h"
#include "zoo/zoo_builders.h"

#include <nlohmann/json.hpp>

#include <array>

namespace ps {
namespace {

    // A preset's name, family and size; each family's factory sets the rest.
    ModelConfig preset(
        std::string name, ModelFamily family, std::int64_t layers, std::int64_t hidden, std::int64_t heads)
    {
        ModelConfig c;
        c.name = std::move(name);
        c.family = family;
        c.layers = layers;
        c.hidden = hidden;
        c.heads = heads;
        return c;
    }

    ModelConfig gpt2(std::string name, std::int64_t layers, std::int64_t hidden, std::int64_t heads)
    {
        ModelConfig c = preset(std::move(name), ModelFamily::Gpt2, layers, hidden, heads);
        c.vocab = 50257;
        c.maxPositions = 1024;
        c.seq = 1024;
        return c;
    }

    ModelConfig bert(std::string name, std::int64_t layers, std::int64_t hidden, std::int64_t heads)
    {
        ModelConfig c = gpt2(std::move(name), layers, hidden, heads);
        c.family = ModelFamily::Bert;
        c.vocab = 30522;
        c.maxPositions = 512;
        c.seq = 512;
        return c;
    }

    // T5 v1.0 sizes (Raffel et al., table 14 / the released configs): d_model, heads, d_kv, d_ff.
    ModelConfig t5(std::string name, std::int64_t layers, std::int64_t hidden, std::int64_t heads, std::int64_t headDim,
        std::int64_t ffn)
    {
        ModelConfig c = preset(std::move(name), ModelFamily::T5, layers, hidden, heads);
        c.decoderLayers = layers;
        c.headDim = headDim;
        c.ffn = ffn;
        c.vocab = 32128;
        c.seq = 512;
        c.maxPositions = 0;
        return c;
    }

    ModelConfig mlp()
    {
        ModelConfig c = preset("mlp", ModelFamily::Mlp, 8, 1024, 1);
        c.vocab = 10;
        c.seq = 1;
        c.maxPositions = 0;
        c.microBatch = 64;
        return c;
    }

    // ResNet at torchvision's sizes (224-pixel images, 1000 classes); resnet-tiny (depth 18, 8
    // wide, 32-pixel images, 10 classes) trains on a CPU in seconds.
    ModelConfig resnet(
        std::string name, std::int64_t depth, std::int64_t width, std::int64_t image, std::int64_t classes)
    {
        ModelConfig c = preset(std::move(name), ModelFamily::ResNet, depth, width, 1);
        c.seq = image;
        c.vocab = classes;
        c.maxPositions = 0;
        c.microBatch = 32;
        c.dropout = 0;
        return c;
    }

    // AmoebaNet-D (L normal cells, D filters; zoo/amoebanet.cpp) on 224-pixel images and 1000
    // classes as GPipe trains it; amoebanet-tiny (3 cells, 32 filters, 32-pixel images, 10 classes)
    // trains on a CPU in seconds.
    ModelConfig amoebanet(
        std::string name, std::int64_t cells, std::int64_t filters, std::int64_t image, std::int64_t classes)
    {
        ModelConfig c = resnet(std::move(name), cells, filters, image, classes);
        c.family = ModelFamily::AmoebaNet;
        return c;
    }

    // A byte-level GPT (vocabulary 256) small enough to train on a CPU in seconds: the engine's
    // demo, its convergence and PyTorch reference tests.
    ModelConfig gpt2Tiny()
    {
        ModelConfig c = gpt2("gpt2-tiny", 2, 64, 4);
        c.vocab = 256;
        c.maxPositions = 64;
        c.seq = 64;
        c.microBatch = 8;
        c.dropout = 0;
        return c;
    }

    std::vector<ModelConfig> presets()
    {
        return {
            gpt2Tiny(),
            gpt2("gpt2-small", 12, 768, 12),
            gpt2("gpt2-medium", 24, 1024, 16),
            gpt2("gpt2-large", 36, 1280, 20),
            gpt2("gpt2-xl", 48, 1600, 25),
            bert("bert-base", 12, 768, 12),
            bert("bert-large", 24, 1024, 16),
            t5("t5-small", 6, 512, 8, 64, 2048),
            t5("t5-base", 12, 768, 12, 64, 3072),
            t5("t5-large", 24, 1024, 16, 64, 4096),
            t5("t5-3b", 24, 1024, 32, 128, 16384),
            mlp(),
            resnet("resnet-tiny", 18, 8, 32, 10),
            resnet("resnet50", 50, 64, 224, 1000),
            resnet("resnet101", 101, 64, 224, 1000),
            resnet("resnet152", 152, 64, 224, 1000),
            amoebanet("amoebanet-tiny", 3, 32, 32, 10),
            amoebanet("amoebanet-d", 18, 208, 224, 1000),
        };
    }

    constexpr std::array kFamilyNames = { "gpt2", "bert", "t5", "mlp", "resnet", "amoebanet" };

    void requirePositive(std::int64_t value, const char* field)
    {
        if (value <= 0)
            throw Error(
                std::string("model configuration: ") + field + " must be positive, got " + std::to_string(value));
    }

} // namespace

std::string_view toString(ModelFamily family)
{
    return kFamilyNames[static_cast<std::size_t>(family)];
}

std::vector<std::string> zooModelNames()
{
    std::vector<std::string> names;
    for (const auto& p : presets())
        names.push_back(p.name);
    return names;
}

ModelConfig zooPreset(std::string_view name)
{
    for (auto& p : presets()) {
        if (p.name == name)
            return p;
    }
    std::string known;
    for (const auto& n : zooModelNames())
        known += (known.empty() ? "" : ", ") + n;
    throw Error("unknown zoo model '" + std::string(name) + "' (known: " + known + ")");
}

void checkModelConfig(const ModelConfig& c)
{
    requirePositive(c.layers, "layers");
    requirePositive(c.hidden, "hidden");
    requirePositive(c.heads, "heads");
    requirePositive(c.seq, "seq");
    requirePositive(c.vocab, "vocab");
    requirePositive(c.microBatch, "micro-batch");
    if (c.family == ModelFamily::Mlp || c.family == ModelFamily::ResNet || c.family == ModelFamily::AmoebaNet) {
        if (c.fusedAttention)
            throw Error("model configuration: fused attention asked for a model without attention");
        return;
    }
    if (c.headDim <= 0 && c.hidden % c.heads != 0)
        throw Error("model configuration: hidden " + std::to_string(c.hidden) + " is not divisible by heads "
            + std::to_string(c.heads));
    if ((c.family == ModelFamily::Gpt2 || c.family == ModelFamily::Bert) && c.seq > c.maxPositions)
        throw Error("model configuration: seq " + std::to_string(c.seq) + " exceeds the position table ("
            + std::to_string(c.maxPositions) + " positions)");
    if (c.family == ModelFamily::T5)
        requirePositive(c.decoderLayers, "decoder-layers");
    if (c.dropout < 0 || c.dropout >= 1)
        throw Error("model configuration: dropout must be in [0, 1), got " + std::to_string(c.dropout));
}

std::string modelConfigToJson(const ModelConfig& c)
{
    const nlohmann::ordered_json j = {
        { "name", c.name },
        { "family", std::string(toString(c.family)) },
        { "layers", c.layers },
        { "decoder_layers", c.decoderLayers },
        { "hidden", c.hidden },
        { "heads", c.heads },
        { "head_dim", c.effectiveHeadDim() },
        { "ffn", c.effectiveFfn() },
        { "seq", c.seq },
        { "decoder_seq", c.family == ModelFamily::T5 ? c.effectiveDecoderSeq() : 0 },
        { "vocab", c.vocab },
        { "max_positions", c.maxPositions },
        { "relative_buckets", c.relativeBuckets },
        { "micro_batch", c.microBatch },
        { "dropout", c.dropout },
        { "fused_attention", c.fusedAttention },
    };
    return j.dump();
}

ModelConfig modelConfigFromJson(std::string_view text)
{
    const auto j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object())
        throw Error("model configuration is not a JSON object");
    ModelConfig c;
    const auto family = j.value("family", std::string("gpt2"));
    const auto it = std::find(kFamilyNames.begin(), kFamilyNames.end(), family);
    if (it == kFamilyNames.end())
        throw Error("model configuration: unknown family '" + family + "'");
    c.family = static_cast<ModelFamily>(it - kFamilyNames.begin());
    c.name = j.value("name", c.name);
    c.layers = j.value("layers", c.layers);
    c.decoderLayers = j.value("decoder_layers", c.decoderLayers);
    c.hidden = j.value("hidden", c.hidden);
    c.heads = j.value("heads", c.heads);
    c.headDim = j.value("head_dim", c.headDim);
    c.ffn = j.value("ffn", c.ffn);
    c.seq = j.value("seq", c.seq);
    c.decoderSeq = j.value("decoder_seq", c.decoderSeq);
    c.vocab = j.value("vocab", c.vocab);
    c.maxPositions = j.value("max_positions", c.maxPositions);
    c.relativeBuckets = j.value("relative_buckets", c.relativeBuckets);
    c.microBatch = j.value("micro_batch", c.microBatch);
    c.dropout = j.value("dropout", c.dropout);
    c.fusedAttention = j.value("fused_attention", c.fusedAttention);
    return c;
}

namespace {

    Graph buildFamily(const ModelConfig& config)
    {
        switch (config.family) {
        case ModelFamily::Gpt2:
            return zoo::buildGpt2(config);
        case ModelFamily::Bert:
            return zoo::buildBert(config);
        case ModelFamily::T5:
            return zoo::buildT5(config);
        case ModelFamily::Mlp:
            return zoo::buildMlp(config);
        case ModelFamily::ResNet:
            return zoo::buildResNet(config);
        case ModelFamily::AmoebaNet:
            return zoo::buildAmoebaNet(config);
        }
        throw Error("unknown model family");
    }

} // namespace

Graph buildZooModel(const ModelConfig& config)
{
    checkModelConfig(config);
    auto graph = buildFamily(config);
    return config.fusedAttention ? fuseAttention(graph) : graph;
}

Graph buildAtMicroBatch(const Graph& graph, std::int64_t microBatch)
{
    if (microBatch == graph.info().microBatch)
        return graph;
    if (graph.info().family == "onnx")
        throw Error("the imported model '" + graph.info().name + "' was traced at micro-batch "
            + std::to_string(graph.info().microBatch) + "; import it again with --batch " + std::to_string(microBatch));
    auto config = modelConfigFromJson(graph.info().configJson);
    config.microBatch = microBatch;
    return buildZooModel(config);
}

} // namespace ps
