// `pipestudio new` and `pipestudio info`.
#include "cli/commands.h"
#include "cli/report.h"
#include "cli/validators.h"
#include "graph/loss.h"
#include "onnx/model_import.h"
#include "store/project_store.h"
#include "util/error.h"
#include "zoo/model_config.h"

#include <fmt/core.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>

namespace ps::app {

namespace {

    // The imported initializers grouped by the rule that decided them, a few names each.
    std::string initializerRulesText(const std::vector<InitializerRule>& rules)
    {
        std::map<std::string, std::vector<std::string>> byRule;
        for (const auto& r : rules)
            byRule[r.rule].push_back(r.name);
        std::string out;
        for (const auto& [rule, names] : byRule) {
            std::string shown;
            for (std::size_t i = 0; i < std::min<std::size_t>(names.size(), 4); ++i)
                shown += (i > 0 ? ", " : "") + names[i];
            if (names.size() > 4)
                shown += fmt::format(", and {} more", names.size() - 4);
            out += fmt::format("Initializers   {} ({}): {}\n", rule, names.size(), shown);
        }
        return out;
    }

} // namespace
namespace {

    // Options that override a zoo preset's configuration; unset ones keep the preset's value.
    struct ModelOverrides
    {
        std::string model;
        std::optional<std::int64_t> layers, decoderLayers, hidden, heads, headDim, ffn, seq, decoderSeq, vocab,
            maxPositions, microBatch;
        std::optional<double> dropout;
        bool fusedAttention = false;
    };

    void addModelOptions(CLI::App* cmd, ModelOverrides& o)
    {
        cmd->add_option("--model,-m", o.model,
               "Zoo model: gpt2-tiny|small|medium|large|xl, bert-base|large, "
               "t5-small|base|large|3b, mlp, resnet-tiny, resnet50|101|152, amoebanet-tiny, amoebanet-d")
            ->required();
        cmd->add_option("--layers", o.layers,
               "Transformer blocks (T5: encoder blocks; ResNet: depth 18, 34, 50, 101 or 152; AmoebaNet: normal "
               "cells, a multiple of 3)")
            ->check(CLI::Range(1, 4096));
        cmd->add_option("--decoder-layers", o.decoderLayers, "T5 decoder blocks")->check(CLI::Range(1, 4096));
        cmd->add_option("--hidden", o.hidden, "Hidden size (d_model; ResNet: the stem's width; AmoebaNet: filters D)")
            ->check(CLI::Range(1, 1 << 17));
        cmd->add_option("--heads", o.heads, "Attention heads")->check(CLI::Range(1, 4096));
        cmd->add_option("--head-dim", o.headDim, "Per-head dimension (default hidden/heads)")
            ->check(CLI::Range(1, 1 << 16));
        cmd->add_option("--ffn", o.ffn, "Feed-forward inner size (default 4*hidden)")->check(CLI::Range(1, 1 << 20));
        cmd->add_option("--seq", o.seq, "Sequence length (T5: encoder length; ResNet, AmoebaNet: image side in pixels)")
            ->check(CLI::Range(1, 1 << 17));
        cmd->add_option("--decoder-seq", o.decoderSeq, "T5 decoder length")->check(CLI::Range(1, 1 << 17));
        cmd->add_option("--vocab", o.vocab, "Vocabulary size (MLP, ResNet, AmoebaNet: classes)")
            ->check(CLI::Range(1, 1 << 24));
        cmd->add_option("--max-positions", o.maxPositions, "Learned position table size")
            ->check(CLI::Range(1, 1 << 17));
        cmd->add_option("--micro-batch,-b", o.microBatch, "Samples per micro-batch")->check(CLI::Range(1, 1 << 20));
        cmd->add_option("--dropout", o.dropout, "Dropout probability (0 removes dropout nodes)")
            ->check(numberIn(0, 0.999));
        cmd->add_flag("--fused-attention", o.fusedAttention,
            "Each attention as one Attention node that keeps no probabilities for backward (recomputed, as "
            "FlashAttention and scaled_dot_product_attention do; with dropout, its one-byte keep mask)");
    }

    ModelConfig resolveConfig(const ModelOverrides& o)
    {
        auto c = zooPreset(o.model);
        const auto apply = [](auto& field, const auto& value) {
            if (value)
                field = *value;
        };
        apply(c.layers, o.layers);
        apply(c.decoderLayers, o.decoderLayers);
        apply(c.hidden, o.hidden);
        apply(c.heads, o.heads);
        apply(c.headDim, o.headDim);
        apply(c.ffn, o.ffn);
        apply(c.seq, o.seq);
        apply(c.decoderSeq, o.decoderSeq);
        apply(c.vocab, o.vocab);
        apply(c.maxPositions, o.maxPositions);
        apply(c.microBatch, o.microBatch);
        apply(c.dropout, o.dropout);
        c.fusedAttention = c.fusedAttention || o.fusedAttention;
        // A sequence longer than the preset's position table grows the table, as a user would.
        if (o.seq && !o.maxPositions && c.maxPositions > 0 && c.seq > c.maxPositions)
            c.maxPositions = c.seq;
        return c;
    }

    // The folder a new project goes into must exist: say so, rather than fail on a temporary file.
    void checkOutputFolder(const std::string& output)
    {
        const auto folder = std::filesystem::absolute(output).parent_path();
        std::error_code ec;
        if (!std::filesystem::is_directory(folder, ec))
            throw Error("--output '" + output + "': " + folder.string()
                + (std::filesystem::exists(folder, ec) ? " is not a folder" : " does not exist"));
    }

    // writeNewProject, with errors that name the project being written (not its temporary file).
    void writeProject(const std::string& output, const Graph& graph, bool force)
    {
        try {
            writeNewProject(output, graph, force);
        } catch (const std::exception& e) {
            const std::string what = e.what();
            if (what.find("'" + output + "'") != std::string::npos)
                throw;
            throw Error("cannot write '" + output + "': " + what);
        }
    }

    // Runs left "running" by a process that no longer exists (killed, crashed) become "interrupted",
    // as the GUI does when it opens the project. Opens for writing only when such a run may exist;
    // a file or folder that cannot be written is reported as it is.
    void markStaleRuns(const std::string& path)
    {
        try {
            {
                const auto store = ProjectStore::open(path, ProjectStore::Access::ReadOnly);
                const auto runs = store.schemaVersion() == kProjectSchemaVersion ? store.loadRuns()
                                                                                 : std::vector<ProjectStore::RunRow>();
                if (std::none_of(runs.begin(), runs.end(), [](const auto& r) { return r.status == "running"; }))
                    return;
            }
            ProjectStore::open(path).markStaleRunsInterrupted();
        } catch (const Error&) { // NOLINT(bugprone-empty-catch): the read-only open below reports the file
        }
    }

} // namespace

void addNewCommand(CLI::App& app, Action& action)
{
    auto* cmd = app.add_subcommand("new", "Create a project from a zoo model");
    auto options = std::make_shared<ModelOverrides>();
    auto output = std::make_shared<std::string>();
    auto force = std::make_shared<bool>(false);
    addModelOptions(cmd, *options);
    cmd->add_option("-o,--output", *output, "Project file to write (.pstudio)")->required();
    cmd->add_flag("--force", *force, "Replace the output file if it exists");
    cmd->callback([&action, options, output, force] {
        action = [options, output, force] {
            checkOutputFolder(*output);
            const auto config = resolveConfig(*options);
            const auto graph = buildZooModel(config);
            writeProject(*output, graph, *force);
            fmt::print("Created {}: {} with {} nodes, {} parameters\n", *output, config.name, graph.nodeCount(),
                formatCount(static_cast<double>(graph.parameterCount())));
            return 0;
        };
    });
}

void addInfoCommand(CLI::App& app, Action& action)
{
    auto* cmd = app.add_subcommand("info", "Summarize a project: nodes, parameters, FLOPs, memory, ops");
    auto path = std::make_shared<std::string>();
    auto json = std::make_shared<bool>(false);
    cmd->add_option("project", *path, "Project file (.pstudio)")->required();
    cmd->add_flag("--json", *json, "Print JSON instead of text");
    cmd->callback([&action, path, json] {
        action = [path, json] {
            markStaleRuns(*path);
            const auto store = ProjectStore::open(*path, ProjectStore::Access::ReadOnly);
            const auto graph = store.loadGraph();
            const auto summary = summarizeGraph(graph);
            const auto dims = inputDimsFromJson(graph.info().configJson);
            const auto rules = initializerRulesFromJson(graph.info().configJson);
            const auto runs =
                store.schemaVersion() == kProjectSchemaVersion ? store.loadRuns() : std::vector<ProjectStore::RunRow>();
            if (*json) {
                auto j = nlohmann::ordered_json::parse(summaryJson(summary, *path, store.schemaVersion()));
                if (!dims.empty())
                    j["input_dims"] = nlohmann::ordered_json::parse(inputDimsToJson(dims))["input_dims"];
                if (!rules.empty()) {
                    j["initializers"] = nlohmann::ordered_json::array();
                    for (const auto& r : rules)
                        j["initializers"].push_back({ { "name", r.name },
                            { "kind", r.parameter ? "parameter" : "constant" }, { "rule", r.rule } });
                }
                j["runs"] = nlohmann::ordered_json::array();
                for (const auto& r : runs)
                    j["runs"].push_back({ { "id", r.id }, { "status", r.status }, { "steps", r.steps } });
                fmt::print("{}\n", j.dump(2));
                return 0;
            }
            fmt::print("{}", summaryText(summary, *path, store.schemaVersion()));
            fmt::print("{}", inputDimsText(dims, "Input          "));
            fmt::print("{}", initializerRulesText(rules));
            if (!runs.empty())
                fmt::print("Runs: {} (newest: run {}, {}, {} step(s) stored)\n", runs.size(), runs.front().id,
                    runs.front().status, runs.front().steps);
            return 0;
        };
    });
}

} // namespace ps::app

namespace ps::app {

namespace {

    // `pipestudio import`'s arguments as given.
    struct ImportArgs
    {
        std::string input;
        std::string output;
        bool force = false;
        bool noWeights = false;
        std::int64_t batch = 0;
        std::int64_t sequence = 0;
        int batchAxis = -1;
        std::string loss;
        std::string labelsShape;
        std::vector<std::string> parameters;
        std::vector<std::string> constants;
        std::vector<std::string> dims; // NAME=SIZE
    };

    ModelImportOptions importOptionsOf(const ImportArgs& a)
    {
        ModelImportOptions o;
        o.onnx.keepWeights = !a.noWeights;
        if (a.batch > 0)
            o.onnx.batch = a.batch;
        if (a.sequence > 0)
            o.onnx.sequence = a.sequence;
        if (a.batchAxis >= 0)
            o.onnx.batchAxis = a.batchAxis;
        o.onnx.parameters.insert(a.parameters.begin(), a.parameters.end());
        o.onnx.constants.insert(a.constants.begin(), a.constants.end());
        addDimSizes(a.dims, o.onnx);
        o.loss = a.loss;
        if (!a.labelsShape.empty())
            o.labelsShape = parseLabelsShape(a.labelsShape);
        return o;
    }

    void printImportSummary(const ImportArgs& a, const OnnxImport& imported)
    {
        const auto& r = imported.report;
        fmt::print("Imported {} (opset {}): {} ONNX nodes, {} Constant and {} shape-computation nodes folded, {} "
                   "graph nodes, {} parameters\n",
            a.input, r.opset, r.onnxNodes, r.foldedConstants, r.foldedShapeNodes, imported.graph.nodeCount(),
            formatCount(static_cast<double>(imported.graph.parameterCount())));
        fmt::print("  micro-batch {}\n", imported.graph.info().microBatch);
        if (r.tracedTrainableElements) {
            const auto own = static_cast<std::int64_t>(imported.graph.parameterCount());
            fmt::print("  the tracer's module trains {} parameters{}\n", *r.tracedTrainableElements,
                own == *r.tracedTrainableElements
                    ? " (the same)"
                    : fmt::format(", the import {} (see `info` for each initializer's rule)", own));
        }
        fmt::print("{}", inputDimsText(r.inputDims, "  input "));
        if (r.respecialisedConstants > 0)
            fmt::print(
                "  re-specialised from the exported sizes: {} shape constants rewritten\n", r.respecialisedConstants);
        if (a.sequence > 0 && std::none_of(r.inputDims.begin(), r.inputDims.end(), [](const OnnxInputDim& d) {
                return d.role == DimRole::Sequence;
            }))
            fmt::print("  note: --seq {} not used: no input has a sequence dimension\n", a.sequence);
        if (!r.frequencyTables.empty())
            fmt::print("  kept constant as frequency tables (positions through Sin/Cos; --parameters NAME trains "
                       "one): {}\n",
                fmt::join(r.frequencyTables, ", "));
        if (r.groupNorms + r.layerNorms + r.rmsNorms > 0)
            fmt::print("  normalizations written out by the exporter, each run as one node: {} GroupNorm/InstanceNorm, "
                       "{} LayerNorm, {} RMSNorm\n",
                r.groupNorms, r.layerNorms, r.rmsNorms);
        if (r.aliasedParameters > 0)
            fmt::print("  Identity aliases of initializers (stored once by the exporter, equal at export) imported as "
                       "separate parameters: {}\n",
                r.aliasedParameters);
        if (!a.loss.empty()) {
            const Tensor* labels = nullptr;
            for (const auto& t : imported.graph.tensors())
                labels = t.kind == TensorKind::Input ? &t : labels; // attachLoss adds it last
            fmt::print(
                "  loss: {} on the output, labels input '{}' {}\n", a.loss, labels->name, formatShape(labels->shape));
        }
        if (!r.opaqueOps.empty()) {
            std::string ops;
            for (const auto& [op, count] : r.opaqueOps)
                ops += fmt::format("{}{} x{}", ops.empty() ? "" : ", ", op, count);
            fmt::print("  costed from shapes only, not trainable by the engine yet: {}\n", ops);
        }
        fmt::print("Wrote {}\n", a.output);
    }

} // namespace

void addImportCommand(CLI::App& app, Action& action)
{
    auto* cmd = app.add_subcommand("import",
        "Create a project from an ONNX model (torch.onnx.export, opsets 13-25; weights in the file or beside it)");
    auto a = std::make_shared<ImportArgs>();
    cmd->add_option("model", a->input, "ONNX file")->required();
    cmd->add_option("-o,--output", a->output, "Project file to write (.pstudio)")->required();
    cmd->add_option("--batch,-b", a->batch,
           "Size of the batch dimension (default: the exported size of a fixed one, 1 for a dynamic one; another "
           "size re-specialises a model exported with fixed shapes)")
        ->check(CLI::Range(1, 1 << 20));
    cmd->add_option("--seq", a->sequence,
           "Size of sequence dimensions (default: the exported size of fixed ones, 128 for dynamic ones)")
        ->check(CLI::Range(1, 1 << 20));
    cmd->add_option("--dim", a->dims, "Size of another named dynamic dimension, NAME=SIZE (repeatable)")
        ->allow_extra_args(false);
    cmd->add_option("--batch-axis", a->batchAxis,
           "Which dimension of the inputs exported with fixed shapes is the batch (default: 0, or the one every "
           "input shares)")
        ->check(CLI::Range(0, 7));
    cmd->add_flag("--no-weights", a->noWeights, "Do not store initializer values in the project");
    cmd->add_option("--loss", a->loss,
           "Attach a loss to the model's first output so it trains: cross-entropy (int64 class labels over the "
           "last dimension) or mse (float targets of the output's shape)")
        ->check(CLI::IsMember({ "cross-entropy", "mse" }));
    cmd->add_option("--labels-shape", a->labelsShape,
        "Shape of the labels, e.g. 4,128 (default: the output's shape, without its last dimension for "
        "cross-entropy); needs --loss");
    cmd->add_option("--parameters", a->parameters,
           "Initializers to train whatever the importer's rules decide, comma-separated (floating point only)")
        ->delimiter(',')
        ->allow_extra_args(false);
    cmd->add_option("--constants", a->constants,
           "Initializers never to train (buffers the rules took for weights), comma-separated")
        ->delimiter(',')
        ->allow_extra_args(false);
    cmd->add_flag("--force", a->force, "Replace the output file if it exists");
    cmd->callback([&action, a] {
        if (!a->labelsShape.empty() && a->loss.empty())
            throw CLI::ValidationError("--labels-shape", "needs --loss");
        action = [a] {
            checkOutputFolder(a->output);
            const auto imported = importModel(a->input, importOptionsOf(*a));
            writeProject(a->output, imported.graph, a->force);
            printImportSummary(*a, imported);
            return 0;
        };
    });
}

} // namespace ps::app
