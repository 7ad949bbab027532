// Building gpt2-xl's graph and saving/loading it as a project.
//   build/release/tests/bench/core_bench
#include "cluster/cluster.h"
#include "cost/profile.h"
#include "graph/graph_summary.h"
#include "onnx/onnx_import.h"
#include "plan/partition.h"
#include "plan/plan_editor.h"
#include "plan/planner.h"
#include "schedule/schedule_validate.h"
#include "sim/simulator.h"
#include "store/project_store.h"
#include "zoo/model_config.h"

#include <benchmark/benchmark.h>

#include <filesystem>
#include <fstream>
#include <onnx/onnx_pb.h>
#include <unistd.h>

namespace {

std::filesystem::path benchFile()
{
    return std::filesystem::temp_directory_path() / ("ps_bench_" + std::to_string(::getpid()) + ".pstudio");
}

void BM_BuildGraph(benchmark::State& state, const char* model)
{
    const auto config = ps::zooPreset(model);
    for (auto _ : state)
        benchmark::DoNotOptimize(ps::buildZooModel(config));
}
BENCHMARK_CAPTURE(BM_BuildGraph, gpt2_xl, "gpt2-xl")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_BuildGraph, t5_3b, "t5-3b")->Unit(benchmark::kMillisecond);

void BM_Summarize_Gpt2Xl(benchmark::State& state)
{
    const auto graph = ps::buildZooModel(ps::zooPreset("gpt2-xl"));
    for (auto _ : state)
        benchmark::DoNotOptimize(ps::summarizeGraph(graph));
}
BENCHMARK(BM_Summarize_Gpt2Xl)->Unit(benchmark::kMillisecond);

void BM_SaveProject_Gpt2Xl(benchmark::State& state)
{
    const auto graph = ps::buildZooModel(ps::zooPreset("gpt2-xl"));
    const auto path = benchFile();
    for (auto _ : state)
        ps::writeNewProject(path, graph, true);
    std::filesystem::remove(path);
    state.counters["nodes"] = static_cast<double>(graph.nodeCount());
}
BENCHMARK(BM_SaveProject_Gpt2Xl)->Unit(benchmark::kMillisecond);

void BM_LoadProject_Gpt2Xl(benchmark::State& state)
{
    const auto path = benchFile();
    ps::writeNewProject(path, ps::buildZooModel(ps::zooPreset("gpt2-xl")), true);
    for (auto _ : state) {
        const auto store = ps::ProjectStore::open(path, ps::ProjectStore::Access::ReadOnly);
        benchmark::DoNotOptimize(store.loadGraph());
    }
    std::filesystem::remove(path);
}
BENCHMARK(BM_LoadProject_Gpt2Xl)->Unit(benchmark::kMillisecond);

} // namespace

namespace {

// Simulator throughput: gpt2-xl on 8 x A100-40GB, 64 micro-batches. "events" counts the actions
// executed (compute, send, receive), the unit of the 5 M events/s goal.
void BM_Simulate_Gpt2Xl(benchmark::State& state, const char* scheduleText)
{
    const auto graph = ps::buildZooModel(ps::zooPreset("gpt2-xl"));
    const auto& a100 = ps::DeviceCatalog::builtin().find("a100-40gb");
    const auto profile = ps::estimateProfile(graph, a100, {});
    std::vector<double> cost;
    for (const auto& n : profile.nodes)
        cost.push_back(n.forwardNs.at(1) + n.backwardNs.at(1));
    const auto partition = ps::computeBalancedPartition(cost, 8);
    const auto stages = ps::computeStageCosts(graph, profile, partition, 1);
    const auto spec = ps::parseScheduleSpec(scheduleText, 8, 64);
    const auto schedule = ps::withCommunication(ps::generateSchedule(spec));
    const auto cluster = ps::makeCluster(a100, spec.devices());
    const ps::SimulationInput input { schedule, stages, cluster, {}, 1, {}, {} };
    std::size_t actions = 0;
    for (auto _ : state) {
        auto result = ps::simulate(input);
        actions += schedule.actionCount();
        benchmark::DoNotOptimize(result);
    }
    state.counters["events/s"] = benchmark::Counter(static_cast<double>(actions), benchmark::Counter::kIsRate);
    state.counters["actions"] = static_cast<double>(schedule.actionCount());
}
BENCHMARK_CAPTURE(BM_Simulate_Gpt2Xl, 1f1b, "1f1b")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Simulate_Gpt2Xl, kfkb4, "kfkb:4")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Simulate_Gpt2Xl, zb_h1, "zb-h1")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Simulate_Gpt2Xl, interleaved2, "interleaved:2")->Unit(benchmark::kMicrosecond);

void BM_GenerateAndValidate(benchmark::State& state)
{
    for (auto _ : state) {
        const auto schedule = ps::withCommunication(ps::generateSchedule({ ps::ScheduleKind::OneFOneB, 8, 64, 1, 1 }));
        benchmark::DoNotOptimize(ps::validateSchedule(schedule));
    }
}
BENCHMARK(BM_GenerateAndValidate)->Unit(benchmark::kMicrosecond);

} // namespace

namespace {

// Times `algorithm` on `model`; returns its plan and, untimed, the plan of `reference`.
std::pair<ps::Plan, ps::Plan> timePlan(
    benchmark::State& state, const ps::StageModel& model, ps::PlanAlgorithm algorithm, ps::PlanAlgorithm reference)
{
    ps::PlannerOptions o;
    o.algorithm = algorithm;
    ps::Plan plan;
    for (auto _ : state)
        plan = ps::findPlan(model, o);
    o.algorithm = reference;
    return { plan, ps::findPlan(model, o) };
}

// Partition search on gpt2-xl, 8 stages, 1F1B with 16 micro-batches of 4 on 8 x A100-40GB.
// "quality" is the slowest stage of the plan over DawnPiper's (1.0 = as good).
void BM_Plan_Gpt2Xl(benchmark::State& state, ps::PlanAlgorithm algorithm)
{
    static const auto graph = ps::buildZooModel(ps::zooPreset("gpt2-xl"));
    const auto& a100 = ps::DeviceCatalog::builtin().find("a100-40gb");
    static const auto profile = ps::estimateProfile(graph, a100, {});
    const auto cluster = ps::makeCluster(a100, 8);
    const ps::StageModel model(graph, profile, { ps::ScheduleKind::OneFOneB, 8, 16, 1, 1 }, cluster, 4, {});
    const auto [plan, reference] = timePlan(state, model, algorithm, ps::PlanAlgorithm::DawnPiper);
    state.counters["quality"] = plan.slowestStageNs / reference.slowestStageNs;
    state.counters["feasible"] = plan.feasible ? 1 : 0;
}
BENCHMARK_CAPTURE(BM_Plan_Gpt2Xl, dawnpiper, ps::PlanAlgorithm::DawnPiper)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Plan_Gpt2Xl, pipedream, ps::PlanAlgorithm::PipeDream)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Plan_Gpt2Xl, pipedream_mem, ps::PlanAlgorithm::PipeDreamMemory)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Plan_Gpt2Xl, gpipe, ps::PlanAlgorithm::GPipe)->Unit(benchmark::kMillisecond);

// Where the exhaustive search finishes: gpt2 with 2 blocks (about 70 nodes), 3 stages.
void BM_Plan_SmallGpt2(benchmark::State& state, ps::PlanAlgorithm algorithm)
{
    auto c = ps::zooPreset("gpt2-small");
    c.layers = 2;
    c.seq = 512;
    c.microBatch = 8;
    static const auto graph = ps::buildZooModel(c);
    const auto& a100 = ps::DeviceCatalog::builtin().find("a100-40gb");
    static const auto profile = ps::estimateProfile(graph, a100, {});
    const auto cluster = ps::makeCluster(a100, 3);
    const ps::StageModel model(graph, profile, { ps::ScheduleKind::OneFOneB, 3, 6, 1, 1 }, cluster, 8, {});
    const auto [plan, exact] = timePlan(state, model, algorithm, ps::PlanAlgorithm::Exhaustive);
    state.counters["vs_exhaustive"] = plan.slowestStageNs / exact.slowestStageNs;
    state.counters["nodes"] = static_cast<double>(graph.nodeCount());
}
BENCHMARK_CAPTURE(BM_Plan_SmallGpt2, dawnpiper, ps::PlanAlgorithm::DawnPiper)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Plan_SmallGpt2, pipedream, ps::PlanAlgorithm::PipeDream)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Plan_SmallGpt2, exhaustive, ps::PlanAlgorithm::Exhaustive)->Unit(benchmark::kMillisecond);

} // namespace

namespace {

// A boundary drag in the partition editor: move, re-run the memory optimizer and the simulator.
// gpt2-shaped graph of about 5,000 nodes (166 blocks), 8 stages, 32 micro-batches (goal < 16 ms).
void BM_EditorMoveBoundary_5000Nodes(benchmark::State& state)
{
    auto c = ps::zooPreset("gpt2-small");
    c.layers = 166;
    c.seq = 512;
    static const auto graph = ps::buildZooModel(c);
    const auto& a100 = ps::DeviceCatalog::builtin().find("a100-40gb");
    static const auto profile = ps::estimateProfile(graph, a100, {});
    ps::PlanEditor editor(graph, profile, a100, { ps::ScheduleKind::OneFOneB, 8, 32, 1, 1 }, 1);
    const auto home = editor.partition().stageStarts[4];
    int step = 0;
    for (auto _ : state)
        editor.moveBoundary(4, home + ((++step % 2) != 0 ? 7 : 0));
    state.counters["nodes"] = static_cast<double>(graph.nodeCount());
}
BENCHMARK(BM_EditorMoveBoundary_5000Nodes)->Unit(benchmark::kMillisecond);

} // namespace

namespace {

// A 10,000-node ONNX graph: 2,500 blocks of MatMul (64 x 64 weights) + bias Add + Relu + residual
// Add on a (8, 64) activation, written once, imported per iteration (goal: under 1 s).
std::filesystem::path tenThousandNodeOnnx()
{
    const auto path = std::filesystem::temp_directory_path() / ("ps_bench_10k_" + std::to_string(::getpid()) + ".onnx");
    onnx::ModelProto m;
    m.set_ir_version(8);
    m.add_opset_import()->set_version(17);
    auto* g = m.mutable_graph();
    auto* in = g->add_input();
    in->set_name("x");
    in->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
    for (int d : { 8, 64 })
        in->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(d);
    std::string x = "x";
    const auto node = [g](const char* op, std::vector<std::string> inputs, const std::string& out) {
        auto* n = g->add_node();
        n->set_op_type(op);
        n->set_name(out);
        for (auto& i : inputs)
            n->add_input(i);
        n->add_output(out);
    };
    const auto weight = [g](const std::string& name, std::vector<int> dims) {
        auto* t = g->add_initializer();
        t->set_name(name);
        t->set_data_type(onnx::TensorProto::FLOAT);
        int count = 1;
        for (int d : dims) {
            t->add_dims(d);
            count *= d;
        }
        t->mutable_raw_data()->assign(static_cast<std::size_t>(count) * 4, '\0');
    };
    for (int b = 0; b < 2500; ++b) {
        const auto p = "b" + std::to_string(b);
        weight(p + ".w", { 64, 64 });
        weight(p + ".bias", { 64 });
        node("MatMul", { x, p + ".w" }, p + ".mm");
        node("Add", { p + ".mm", p + ".bias" }, p + ".biased");
        node("Relu", { p + ".biased" }, p + ".relu");
        node("Add", { x, p + ".relu" }, p + ".out");
        x = p + ".out";
    }
    g->add_output()->set_name(x);
    std::ofstream(path, std::ios::binary) << m.SerializeAsString();
    return path;
}

void BM_ImportOnnx_10000Nodes(benchmark::State& state)
{
    static const auto path = tenThousandNodeOnnx();
    std::size_t nodes = 0;
    for (auto _ : state)
        nodes = ps::importOnnx(path).graph.nodeCount();
    state.counters["nodes"] = static_cast<double>(nodes);
}
BENCHMARK(BM_ImportOnnx_10000Nodes)->Unit(benchmark::kMillisecond)->Iterations(3);

} // namespace
