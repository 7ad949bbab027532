// `pipestudio export`: a stored plan as files for PyTorch (a torchrun runner), PyTorch pipelining's
// schedule CSV, DeepSpeed and Megatron-LM. The files are written into a temporary directory first
// and renamed into place, so a failure leaves nothing half-written.
#include "cli/commands.h"
#include "export/plan_export.h"
#include "graph/graph_summary.h"
#include "store/project_store.h"
#include "util/error.h"

#include <fmt/core.h>

#include <filesystem>
#include <fstream>
#include <random>

namespace ps::app {
namespace {

    namespace fs = std::filesystem;

    struct ExportOptions
    {
        std::string project;
        std::int64_t plan = 0;
        std::string format = "torchrun";
        std::string output;
        int dataParallel = 1; // torchrun: replicas of the pipeline
        int nodes = 1; // torchrun: machines the processes spread over
    };

    std::string shellQuote(const std::string& text)
    {
        std::string out = "'";
        for (char c : text)
            out += c == '\'' ? std::string("'\\''") : std::string(1, c);
        return out + "'";
    }

    // How to start the runner: one process per stage and replica, on one machine or spread evenly
    // over --nodes machines (torchrun's rendezvous).
    void printTorchrunLaunch(const ExportOptions& o, int stages, const std::string& runner)
    {
        const auto world = static_cast<std::int64_t>(stages) * o.dataParallel;
        fmt::print("Run it with one process per stage and replica ({} stage(s) x {} replica(s); build_model: see the "
                   "runner's docstring):\n",
            stages, o.dataParallel);
        const std::string args = runner + " --model your_package.your_module:build_model --steps 100";
        if (o.nodes == 1) {
            fmt::print("  torchrun --nproc_per_node {} {}\n", world, args);
            return;
        }
        fmt::print("  on each of the {} machines (NODE_RANK 0..{}, HOST: machine 0):\n  torchrun --nnodes {} "
                   "--nproc_per_node {} --node_rank $NODE_RANK --rdzv_backend c10d --rdzv_endpoint $HOST:29500 {}\n",
            o.nodes, o.nodes - 1, o.nodes, world / o.nodes, args);
    }

    ProjectStore::PlanRow findPlan(const ProjectStore& store, std::int64_t id)
    {
        std::string ids;
        for (const auto& p : store.loadPlans()) {
            if (p.id == id)
                return p;
            ids += (ids.empty() ? "" : ", ") + std::to_string(p.id);
        }
        throw Error("'" + store.path().string() + "' has no plan " + std::to_string(id)
            + (ids.empty() ? " (it has none: run `pipestudio plan` first)" : " (its plans: " + ids + ")"));
    }

    fs::path uniqueName(const fs::path& directory, const std::string& stem)
    {
        std::random_device rd;
        return directory / (stem + std::to_string(rd()));
    }

    void writeFile(const fs::path& path, const std::string& content)
    {
        std::ofstream out(path, std::ios::binary);
        out << content;
        out.close();
        if (!out)
            throw Error("cannot write '" + path.string() + "'");
    }

    // Writes `files` into `directory` (created when missing) through a temporary directory beside
    // or inside it; returns nothing until every file is complete.
    void writeAtomically(const fs::path& directory, const std::vector<ExportFile>& files)
    {
        std::error_code ec;
        const bool exists = fs::exists(directory, ec);
        if (exists && !fs::is_directory(directory, ec))
            throw Error("'" + directory.string() + "' exists and is not a directory");
        const auto parent = directory.has_parent_path() ? directory.parent_path() : fs::path(".");
        const auto staging = exists ? uniqueName(directory, ".pipestudio-export-")
                                    : uniqueName(parent, "." + directory.filename().string() + ".tmp-");
        if (!fs::create_directory(staging, ec) || ec)
            throw Error("cannot write to '" + (exists ? directory : parent).string()
                + "': " + (ec ? ec.message() : std::string("cannot create a directory there")));
        try {
            for (const auto& f : files)
                writeFile(staging / f.name, f.content);
            if (!exists) {
                fs::rename(staging, directory);
                return;
            }
            for (const auto& f : files)
                fs::rename(staging / f.name, directory / f.name);
            fs::remove(staging);
        } catch (const std::exception&) {
            fs::remove_all(staging, ec);
            throw;
        }
    }

    void printNextSteps(const ExportOptions& o, const StoredPlan& plan, const Graph& graph)
    {
        const auto dir = fs::path(o.output);
        switch (parseExportFormat(o.format)) {
        case ExportFormat::Torchrun:
            for (std::size_t s = 0; s < plan.swappedBytes.size(); ++s) {
                if (plan.swappedBytes[s] > 0)
                    fmt::print("note: the plan swaps {} of stage {}'s activations to host memory; the runner keeps "
                               "them on the device\n",
                        formatBytes(plan.swappedBytes[s]), s);
            }
            printTorchrunLaunch(o, plan.schedule.stages, shellQuote((dir / "run_pipeline.py").string()));
            break;
        case ExportFormat::PipeliningCsv:
            fmt::print("Load it with PyTorch pipelining's _PipelineScheduleRuntime._load_csv({}) (compute actions; "
                       "the runtime adds the sends and receives)\n",
                shellQuote((dir / "schedule.csv").string()));
            break;
        case ExportFormat::DeepSpeed:
            fmt::print("PipelineModule boundaries for {} transformer blocks: {}\n", graph.info().name,
                shellQuote((dir / "deepspeed_pipeline.py").string()));
            break;
        case ExportFormat::Megatron:
            fmt::print("Megatron-LM flags: {}\n", shellQuote((dir / "megatron_args.txt").string()));
            break;
        }
    }

    int exportCommand(const ExportOptions& o)
    {
        const auto format = parseExportFormat(o.format);
        const auto store = ProjectStore::open(o.project, ProjectStore::Access::ReadOnly);
        const auto graph = store.loadGraph();
        const auto row = findPlan(store, o.plan);
        const auto plan = storedPlanFromJson(row.json, row.id, graph.nodeCount());
        if (const auto world = static_cast<std::int64_t>(plan.schedule.stages) * o.dataParallel;
            format == ExportFormat::Torchrun && world % o.nodes != 0)
            throw Error(fmt::format("--nodes {}: the {} processes ({} stage(s) x {} replica(s)) do not spread evenly",
                o.nodes, world, plan.schedule.stages, o.dataParallel));
        const auto files = exportPlan(graph, plan, format);
        writeAtomically(o.output, files);
        std::string names;
        for (const auto& f : files)
            names += (names.empty() ? "" : ", ") + f.name;
        fmt::print("Exported plan {} ({}) as {}: {} in {}\n", row.id, row.name, o.format, names, shellQuote(o.output));
        printNextSteps(o, plan, graph);
        return 0;
    }

} // namespace

void addExportCommand(CLI::App& app, Action& action)
{
    auto o = std::make_shared<ExportOptions>();
    auto* cmd = app.add_subcommand("export",
        "Write a stored plan for PyTorch and friends: torchrun (plan.json + run_pipeline.py, torch.fx split, "
        "PipeStudio's schedule over torch.distributed), pipelining-csv, deepspeed, megatron");
    cmd->add_option("project", o->project, "Project file (.pstudio)")->required()->check(CLI::ExistingFile);
    cmd->add_option("--plan", o->plan, "A stored plan's id (`pipestudio plan --json` prints plan_id)")->required();
    cmd->add_option("--format,-f", o->format, "torchrun | pipelining-csv | deepspeed | megatron");
    cmd->add_option("--data-parallel", o->dataParallel,
           "torchrun: replicas of the pipeline, each on a shard of every batch (the launch line's process count)")
        ->check(CLI::Range(1, 1 << 16));
    cmd->add_option("--nodes", o->nodes, "torchrun: machines the stages x replicas processes spread over")
        ->check(CLI::Range(1, 1 << 16));
    cmd->add_option("--output,-o", o->output, "Output directory (created if missing; files in it are replaced)")
        ->required();
    cmd->callback([&action, o] { action = [o] { return exportCommand(*o); }; });
}

} // namespace ps::app
