// `pipestudio scale`: tensor x pipeline x data parallel sizes for a GPT on a cluster of nodes
// (core/scale/scale_model.h): one configuration priced, or, with sizes left out, the search over
// them, fastest first, only those that fit.
#include "cli/commands.h"
#include "cli/device_options.h"
#include "cli/validators.h"
#include "scale/scale_export.h"
#include "scale/scale_model.h"
#include "scale/scale_sim.h"
#include "store/project_store.h"
#include "util/error.h"
#include "zoo/model_config.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <memory>

namespace ps::app {
namespace {

    struct ScaleOptions
    {
        std::string project;
        std::string model; // a zoo preset when no project
        std::int64_t layers = 0, hidden = 0, heads = 0, seq = 0, vocab = 0;
        int gpus = 0;
        std::string node = "dgx-a100-80gb";
        std::string nodeFile; // a JSON file of more node kinds (the catalog's "nodes" form)
        std::int64_t globalBatch = 0;
        int tensor = 0, pipeline = 0, data = 0;
        std::int64_t microBatch = 0;
        std::string schedule; // 1f1b | interleaved:V | kfkb:K | zb-h1
        std::string recompute; // none | selective | full
        int top = 10;
        std::string exportTo; // megatron | deepspeed: the configuration (given, or the search's best)
        ScaleFeatures features;
        bool json = false;
    };

    GptShape modelOf(const ScaleOptions& o)
    {
        ModelConfig c;
        if (!o.project.empty()) {
            const auto store = ProjectStore::open(o.project, ProjectStore::Access::ReadOnly);
            const auto info = store.loadGraph().info();
            if (info.family != "gpt2")
                throw Error("'" + o.project + "' holds a " + info.family + " model ('" + info.name
                    + "'); scale plans GPT decoders (a zoo gpt2 model, or --layers --hidden --heads --seq --vocab)");
            c = modelConfigFromJson(info.configJson);
        } else {
            c = zooPreset(o.model.empty() ? "gpt2-xl" : o.model);
            if (c.family != ModelFamily::Gpt2)
                throw Error("--model " + o.model + " is not a GPT; scale plans GPT decoders");
        }
        GptShape g { c.layers, c.hidden, c.heads, c.seq, c.vocab };
        g.layers = o.layers > 0 ? o.layers : g.layers;
        g.hidden = o.hidden > 0 ? o.hidden : g.hidden;
        g.heads = o.heads > 0 ? o.heads : g.heads;
        g.seq = o.seq > 0 ? o.seq : g.seq;
        g.vocab = o.vocab > 0 ? o.vocab : g.vocab;
        if (g.hidden % g.heads != 0)
            throw Error("hidden " + std::to_string(g.hidden) + " is not divisible by heads " + std::to_string(g.heads));
        return g;
    }

    std::vector<double> stageGiB(const ScaleEstimate& e)
    {
        std::vector<double> out;
        for (const double bytes : e.stagePeakBytes)
            out.push_back(bytes / (1 << 30));
        return out;
    }

    nlohmann::ordered_json estimateJson(const ScaleEstimate& e)
    {
        const auto& c = e.config;
        return { { "tensor_parallel", c.tensor }, { "pipeline_parallel", c.pipeline }, { "data_parallel", c.data },
            { "micro_batch", c.microBatch }, { "micro_batches", c.microBatches() }, { "schedule", c.scheduleText() },
            { "simulated", e.simulated }, { "recompute", std::string(toString(c.recompute)) },
            { "sequence_parallel", c.sequenceParallel }, { "zero1", c.zero1 },
            { "overlap_grad_reduce", c.overlapGradientReduce }, { "iteration_s", e.iterationSeconds },
            { "samples_per_s", e.samplesPerSecond }, { "tflops_per_gpu", e.tflopsPerGpu },
            { "peak_gib_per_gpu", e.peakBytes / (1 << 30) }, { "stage_peak_gib", stageGiB(e) }, { "fits", e.fits },
            { "seconds",
                { { "compute", e.computeSeconds }, { "tensor_parallel", e.tensorCommSeconds },
                    { "pipeline_sends", e.pipelineCommSeconds }, { "bubble", e.bubbleSeconds },
                    { "data_parallel", e.dataCommSeconds }, { "optimizer", e.optimizerSeconds } } } };
    }

    void printEstimate(const ScaleEstimate& e)
    {
        const double it = e.iterationSeconds;
        fmt::print("  {}: {:.2f} s per iteration{}, {:.1f} samples/s, {:.1f} TFLOP/s per GPU (Eq. 3), peak {:.1f} "
                   "GiB per GPU{}\n",
            e.config.text(), it, e.simulated ? " (simulated)" : "", e.samplesPerSecond, e.tflopsPerGpu,
            e.peakBytes / (1 << 30), e.fits ? "" : " (does not fit)");
        fmt::print("    compute {:.1f}%, tensor-parallel all-reduce {:.1f}%, pipeline sends {:.1f}%, bubble {:.1f}%, "
                   "data-parallel all-reduce {:.1f}%, optimizer {:.1f}%\n",
            100 * e.computeSeconds / it, 100 * e.tensorCommSeconds / it, 100 * e.pipelineCommSeconds / it,
            100 * e.bubbleSeconds / it, 100 * e.dataCommSeconds / it, 100 * e.optimizerSeconds / it);
        if (e.stagePeakBytes.size() > 1) {
            const auto least = std::min_element(e.stagePeakBytes.begin(), e.stagePeakBytes.end());
            fmt::print("    memory per GPU by stage: first {:.1f} GiB, last {:.1f} GiB, least {:.1f} GiB (stage {})\n",
                e.stagePeakBytes.front() / (1 << 30), e.stagePeakBytes.back() / (1 << 30), *least / (1 << 30),
                least - e.stagePeakBytes.begin());
        }
    }

    // The configuration as the engines that run it take it, on stdout (redirect it to a file).
    // Megatron-LM and DeepSpeed run 1F1B (Megatron also interleaved), not kFkB or ZB-H1.
    bool engineRuns(const ScaleConfig& c)
    {
        return c.group == 1 && !c.zeroBubble;
    }

    int exportConfiguration(const ScaleOptions& o, const GptShape& model, const ScaleEstimate& e, const NodeSpec& node)
    {
        if (!engineRuns(e.config))
            throw Error(e.config.text() + ": " + o.exportTo + " runs 1F1B"
                + (o.exportTo == "megatron" ? " and interleaved" : "") + " schedules, not " + e.config.scheduleText());
        if (o.exportTo == "deepspeed" && e.config.chunks > 1)
            throw Error(e.config.text() + ": DeepSpeed's pipeline engine has no interleaved schedule");
        if (!e.fits)
            fmt::print(stderr, "warning: {} is predicted not to fit: {}\n", e.config.text(), e.reason);
        if (o.exportTo == "megatron")
            fmt::print("{}", megatronLaunch(model, e.config, node));
        else
            fmt::print("{}", deepspeedConfig(e.config));
        return 0;
    }

    // The node kind --node names: one of --node-file's, else a built-in one.
    NodeSpec nodeOf(const ScaleOptions& o)
    {
        if (o.nodeFile.empty())
            return findNode(o.node);
        const auto fileNodes = nodesFromJson(readFile(o.nodeFile), "'" + o.nodeFile + "'", DeviceCatalog::builtin());
        for (const auto& n : fileNodes) {
            if (n.id == o.node)
                return n;
        }
        if (std::none_of(
                builtinNodes().begin(), builtinNodes().end(), [&](const NodeSpec& n) { return n.id == o.node; }))
            throw Error("unknown node kind '" + o.node + "': neither built in nor in '" + o.nodeFile + "'");
        return findNode(o.node);
    }

    int runScale(const ScaleOptions& o)
    {
        const auto model = modelOf(o);
        const auto node = nodeOf(o);
        const bool search = o.tensor == 0 && o.pipeline == 0 && o.data == 0;
        if (!search && (o.tensor == 0 || o.pipeline == 0))
            throw Error("give --tp and --pp (and optionally --dp), or none of them to search");
        if (search && (o.microBatch > 0 || !o.schedule.empty() || !o.recompute.empty()))
            throw Error("--micro-batch, --schedule and --recompute fix one configuration: give --tp and --pp too "
                        "(the search tries them all)");
        const auto header = fmt::format("{} layers x {} wide, {} heads, seq {}, vocab {} ({:.1f}B parameters) on {} "
                                        "GPUs ({} nodes of {}), global batch {}",
            model.layers, model.hidden, model.heads, model.seq, model.vocab, model.parameters() / 1e9, o.gpus,
            (o.gpus + node.gpus - 1) / node.gpus, node.id, o.globalBatch);
        if (!search) {
            ScaleConfig c;
            c.tensor = o.tensor;
            c.pipeline = o.pipeline;
            if (o.gpus % (o.tensor * o.pipeline) != 0)
                throw Error(fmt::format("--tp {} x --pp {} does not divide --gpus {}", o.tensor, o.pipeline, o.gpus));
            c.data = o.data > 0 ? o.data : o.gpus / (o.tensor * o.pipeline);
            if (c.gpus() != o.gpus)
                throw Error(fmt::format("--tp {} x --pp {} x --dp {} is {} GPUs, not --gpus {}", c.tensor, c.pipeline,
                    c.data, c.gpus(), o.gpus));
            c.microBatch = o.microBatch > 0 ? o.microBatch : 1;
            c.globalBatch = o.globalBatch;
            c.recompute = parseRecompute(o.recompute.empty() ? "full" : o.recompute);
            c.sequenceParallel = o.features.sequenceParallel && c.tensor > 1; // nothing to shard at t = 1
            c.zero1 = o.features.zero1;
            c.overlapGradientReduce = o.features.overlapGradientReduce;
            setScaleSchedule(c, o.schedule.empty() ? "1f1b" : o.schedule);
            const auto e = simulateScale(model, c, node);
            if (!e.valid)
                throw Error(c.text() + ": " + e.reason);
            if (!o.exportTo.empty())
                return exportConfiguration(o, model, e, node);
            if (o.json) {
                fmt::print("{}\n", nlohmann::ordered_json { { "configuration", estimateJson(e) } }.dump(2));
            } else {
                fmt::print("{}\n", header);
                printEstimate(e);
                if (!e.fits)
                    fmt::print("  does not fit: {}\n", e.reason);
            }
            return 0;
        }
        const auto s = searchScale(model, o.gpus, o.globalBatch, node, static_cast<std::size_t>(o.top), o.features);
        if (!o.exportTo.empty()) {
            if (s.ranked.empty())
                throw Error("nothing fits " + std::to_string(o.gpus) + " GPUs at global batch "
                    + std::to_string(o.globalBatch) + ": no configuration to export");
            // The fastest configuration the engine can run.
            for (const auto& e : s.ranked) {
                if (engineRuns(e.config) && (o.exportTo == "megatron" || e.config.chunks == 1))
                    return exportConfiguration(o, model, e, node);
            }
            throw Error("none of the " + std::to_string(s.ranked.size()) + " fastest configurations runs on "
                + o.exportTo + " (its schedules: 1F1B" + (o.exportTo == "megatron" ? ", interleaved" : "")
                + "); raise --top");
        }
        if (o.json) {
            nlohmann::ordered_json ranked = nlohmann::ordered_json::array();
            for (const auto& e : s.ranked)
                ranked.push_back(estimateJson(e));
            fmt::print("{}\n",
                nlohmann::ordered_json {
                    { "evaluated", s.evaluated }, { "simulated", s.simulated }, { "ranked", ranked } }
                    .dump(2));
            return 0;
        }
        fmt::print("{}\n{} configurations priced, the leaders simulated ({}), {} shown (fastest first, those that "
                   "fit):\n",
            header, s.evaluated, s.simulated, s.ranked.size());
        for (const auto& e : s.ranked)
            printEstimate(e);
        if (s.ranked.empty())
            fmt::print("  nothing fits: more GPUs, a smaller global batch or a smaller model\n");
        return 0;
    }

} // namespace

void addScaleCommand(CLI::App& app, Action& action)
{
    auto* cmd = app.add_subcommand("scale",
        "Tensor x pipeline x data parallel sizes for a GPT on a cluster (Megatron-LM's layout): one configuration "
        "priced, or the search over them when --tp/--pp are left out");
    auto o = std::make_shared<ScaleOptions>();
    cmd->add_option("project", o->project, "Project whose (GPT) model to scale")->check(CLI::ExistingFile);
    cmd->add_option("--model,-m", o->model, "Zoo GPT without a project (default gpt2-xl)");
    cmd->add_option("--layers", o->layers, "Transformer blocks")->check(CLI::Range(1, 1 << 16));
    cmd->add_option("--hidden", o->hidden, "Hidden size")->check(CLI::Range(1, 1 << 20));
    cmd->add_option("--heads", o->heads, "Attention heads")->check(CLI::Range(1, 1 << 14));
    cmd->add_option("--seq", o->seq, "Sequence length")->check(CLI::Range(1, 1 << 20));
    cmd->add_option("--vocab", o->vocab, "Vocabulary size")->check(CLI::Range(1, 1 << 24));
    cmd->add_option("--gpus", o->gpus, "GPUs in all")->required()->check(CLI::Range(1, 1 << 20));
    cmd->add_option("--node", o->node, "Node kind: dgx-a100-80gb, dgx-h100, pcie-workstation, or one of --node-file's");
    cmd->add_option("--node-file", o->nodeFile,
           "JSON file of node kinds, as the catalog's \"nodes\" (id, device, gpus, intra and nic links, nics)")
        ->check(CLI::ExistingFile);
    cmd->add_option("--global-batch", o->globalBatch, "Samples per iteration")
        ->required()
        ->check(CLI::Range(std::int64_t { 1 }, std::int64_t { 1 } << 30));
    cmd->add_option("--tp", o->tensor, "Tensor-parallel size (inside a node)")->check(CLI::Range(1, 1024));
    cmd->add_option("--pp", o->pipeline, "Pipeline-parallel size (stages)")->check(CLI::Range(1, 1 << 16));
    cmd->add_option("--dp", o->data, "Data-parallel size (default: GPUs / (tp x pp))")->check(CLI::Range(1, 1 << 20));
    cmd->add_option("--micro-batch", o->microBatch, "Samples per micro-batch (default 1)")
        ->check(CLI::Range(std::int64_t { 1 }, std::int64_t { 1 } << 20));
    cmd->add_option("--schedule", o->schedule, "1f1b, interleaved:V, kfkb:K or zb-h1 (default 1f1b)");
    cmd->add_option("--recompute", o->recompute, "none, selective or full (default full)");
    cmd->add_option("--top", o->top, "Searched configurations shown (default 10)")->check(CLI::Range(1, 100000));
    cmd->add_option("--export", o->exportTo,
           "Print the configuration (the one given, else the search's best) for the engine that runs it: megatron "
           "(a torchrun launch of Megatron-LM's pretrain_gpt.py on every node) or deepspeed (its JSON batch split)")
        ->check(CLI::IsMember(std::vector<std::string> { "megatron", "deepspeed" }));
    cmd->add_flag("--sequence-parallel", o->features.sequenceParallel,
        "Shard LayerNorm and dropout over the sequence in the tensor group (Korthikanti et al. 2022)");
    cmd->add_flag("--zero1", o->features.zero1, "Shard the optimizer states over the data-parallel group (ZeRO-1)");
    cmd->add_flag("--overlap-grad-reduce", o->features.overlapGradientReduce,
        "Overlap the data-parallel gradient reduction with the last micro-batch's backward");
    cmd->add_flag("--json", o->json, "Print JSON");
    cmd->callback([&action, o] { action = [o] { return runScale(*o); }; });
}

} // namespace ps::app
