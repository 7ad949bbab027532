// Exports of a stored plan for people who outgrow one machine: a PyTorch runner (torchrun), PyTorch
// pipelining's schedule CSV, DeepSpeed PipelineModule partition boundaries and Megatron-LM's
// pipeline layout flags.
//
// Owns: reading a stored plan's JSON back (cuts, schedule, per-stage memory decisions), the file
// contents of every format. Writing them to disk (atomically) is the CLI's job.
// Depends on: graph/, plan/, schedule/, export/scope_mapping.h. No Qt, no CUDA.
#pragma once

#include "graph/graph.h"
#include "plan/partition.h"
#include "schedule/schedule.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ps {

enum class ExportFormat { Torchrun, PipeliningCsv, DeepSpeed, Megatron };

// "torchrun", "pipelining-csv", "deepspeed", "megatron"; throws ps::Error listing them.
[[nodiscard]] ExportFormat parseExportFormat(std::string_view text);
[[nodiscard]] std::string_view toString(ExportFormat format);

// What the exports need from a plan stored by ProjectStore::savePlan (planToJson).
struct StoredPlan
{
    std::int64_t id = 0;
    std::string algorithm;
    ScheduleSpec schedule;
    Partition partition;
    double microBatch = 1;
    std::vector<std::vector<std::uint32_t>> recomputedTensors; // by stage
    std::vector<std::vector<std::uint32_t>> swappedTensors; // by stage
    std::vector<double> recomputedBytes; // by stage
    std::vector<double> swappedBytes; // by stage
};

// Throws ps::Error for a Mixed-pipe plan (its stages are cut in their own node order and send to
// non-adjacent stages, which none of the formats express) and for JSON that is not a plan.
[[nodiscard]] StoredPlan storedPlanFromJson(std::string_view json, std::int64_t id, std::size_t nodeCount);

struct ExportFile
{
    std::string name; // relative to the output directory
    std::string content;
};

// The files of one export. Throws ps::Error when the plan cannot be expressed in `format`.
[[nodiscard]] std::vector<ExportFile> exportPlan(const Graph& graph, const StoredPlan& plan, ExportFormat format);

// The pieces, for tests and for the files above.
[[nodiscard]] std::string torchrunPlanJson(const Graph& graph, const StoredPlan& plan);
// PyTorch pipelining's CSV: the plan's compute actions without OPT_STEP, which PyTorch's grammar lacks.
[[nodiscard]] std::string pipeliningCsv(const StoredPlan& plan);
[[nodiscard]] Schedule pipeliningSchedule(const ScheduleSpec& spec);
[[nodiscard]] std::string deepspeedJson(const Graph& graph, const StoredPlan& plan);
[[nodiscard]] std::string megatronArguments(const Graph& graph, const StoredPlan& plan);

// The runner template (resources/export/run_pipeline.py, compiled in).
[[nodiscard]] std::string_view pipelineRunnerScript();

} // namespace ps
