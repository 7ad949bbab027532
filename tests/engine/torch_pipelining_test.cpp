// The exported PyTorch schedule CSV (`pipestudio export --format pipelining-csv`) run by PyTorch's own
// pipeline runtime (torch.distributed.pipelining's _PipelineScheduleRuntime, torch 2.4 or newer) on
// two gloo CPU ranks gives the engine's losses: same zoo GPT-2 weights, micro-batches and AdamW, for
// every schedule a plan exports (GPipe, 1F1B, kFkB, zero-bubble's split backward). The losses of
// every correct schedule are the same; what the check proves is that PyTorch loads each CSV, runs it
// to the end (no missing or misordered action deadlocks or fails its validation), and computes the
// engine's gradients and updates from it.
// tests/engine/torch_pipelining.py is the PyTorch side; PS_TORCH2_PYTHON names a Python with such a
// torch (a venv: Debian's python3-torch 1.13 has no pipelining runtime), else the test skips saying so.
#include "data.h"
#include "export/plan_export.h"
#include "pipeline_support.h"
#include "runtime/training_run.h"
#include "schedule/schedule_validate.h"
#include "zoo/model_config.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <unistd.h>

using namespace ps;
using namespace ps::engine;
namespace fs = std::filesystem;

namespace {

struct Shell
{
    int status = -1;
    std::string output;
};

Shell shell(const std::string& command)
{
    Shell r;
    FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
    if (pipe == nullptr)
        return r;
    char buf[512];
    while (std::fgets(buf, sizeof buf, pipe))
        r.output += buf;
    r.status = ::pclose(pipe);
    return r;
}

// The run's initial parameters and every step's micro-batches (stacked) in torch_pipelining.py's
// manifest format.
void writeInputs(const fs::path& dir, const TrainingRun& run, const ModelConfig& c, TokenData data, int steps,
    const StageOptimizerConfig& opt)
{
    nlohmann::json manifest;
    manifest["model"] = { { "layers", c.layers }, { "hidden", c.hidden }, { "heads", c.heads } };
    manifest["micro_batches"] = run.config().schedule.microBatches;
    manifest["steps"] = steps;
    manifest["optimizer"] = { { "lr", opt.lr }, { "beta1", opt.beta1 }, { "beta2", opt.beta2 }, { "eps", opt.eps },
        { "weight_decay", opt.weightDecay } };
    std::ofstream bin(dir / "input.bin", std::ios::binary);
    std::int64_t offset = 0;
    const auto put = [&](const std::string& name, const char* dtype, const Shape& shape, const void* bytes,
                         std::int64_t size) {
        bin.write(static_cast<const char*>(bytes), size);
        manifest["tensors"].push_back(
            { { "name", name }, { "dtype", dtype }, { "shape", shape }, { "offset", offset } });
        offset += size;
    };
    for (const auto& [id, bytes] : run.checkpoint().parameters) {
        const auto& t = run.graph().tensor(id);
        put(t.name, "f32", t.shape, bytes.data(), static_cast<std::int64_t>(bytes.size()));
    }
    BatchSource mirror(run.graph(), std::move(data), run.config().seed + 1); // TrainingRun's sampler
    const auto m = run.config().schedule.microBatches;
    for (int s = 0; s < steps; ++s) {
        std::map<std::string, std::vector<std::int64_t>> stacked;
        for (int k = 0; k < m; ++k) {
            for (const auto& [name, values] : mirror.next().inputs)
                stacked[name].insert(stacked[name].end(), values.begin(), values.end());
        }
        for (const auto& [name, values] : stacked)
            put(name + "_" + std::to_string(s), "i64", { m * c.microBatch, c.seq }, values.data(),
                static_cast<std::int64_t>(values.size() * sizeof(std::int64_t)));
    }
    std::ofstream(dir / "manifest.json") << manifest.dump(1);
}

} // namespace

TEST(TorchPipelining, ExportedScheduleCsvRunsOnPyTorchsRuntimeWithTheEnginesLosses)
{
    const char* python = std::getenv("PS_TORCH2_PYTHON");
    if (python == nullptr || *python == '\0')
        GTEST_SKIP() << "PS_TORCH2_PYTHON is not set: name a Python whose torch (2.4 or newer) has "
                        "torch.distributed.pipelining (python3 -m venv v && v/bin/pip install torch numpy)";
    const auto probe = shell(std::string(python)
        + " -c 'import numpy, torch.distributed.pipelining.schedules as s; "
          "s._PipelineScheduleRuntime._load_csv'");
    if (probe.status != 0)
        GTEST_SKIP() << python << " has no torch with the pipelining runtime: " << probe.output;
    ModelConfig c = zooPreset("gpt2-tiny"); // 2 layers, 64 wide, byte vocabulary, no dropout
    c.seq = 16;
    c.microBatch = 2;
    const auto graph = buildZooModel(c);
    constexpr int kSteps = 3;
    constexpr int kMicroBatches = 4;
    const auto base = fs::temp_directory_path() / ("ps_torch_pipelining_" + std::to_string(::getpid()));
    for (const std::string schedule : { "gpipe", "1f1b", "kfkb:2", "zb-h1" }) {
        SCOPED_TRACE(schedule);
        RunConfig rc;
        rc.schedule = parseScheduleSpec(schedule, 2, kMicroBatches);
        rc.partition = ps::engine::testing::evenCuts(graph, 2);
        rc.seed = 5;
        // One window of tokens: every micro-batch of every step is the same, so the loss falls by what
        // the optimizer steps learn, and a gradient or update that differs shows in steps 2 and 3.
        const auto data = [&c] { return TokenData::random(256, c.seq + 1, 11); };
        TrainingRun run(graph, data(), makeDevices("cpu:2", 0), rc);
        const auto dir = base / schedule.substr(0, schedule.find(':'));
        fs::create_directories(dir);
        writeInputs(dir, run, c, data(), kSteps, rc.optimizer);
        std::ofstream(dir / "schedule.csv") << scheduleToCsv(pipeliningSchedule(rc.schedule));
        std::vector<double> ours;
        for (int s = 0; s < kSteps; ++s)
            ours.push_back(run.step().loss);

        const auto torch = shell("cd " + dir.string() + " && OMP_NUM_THREADS=1 " + python
            + " -m torch.distributed.run --standalone --nnodes 1 --nproc_per_node 2 " PS_SOURCE_DIR
              "/tests/engine/torch_pipelining.py "
            + dir.string());
        ASSERT_EQ(torch.status, 0) << torch.output;
        const auto theirs =
            nlohmann::json::parse(std::ifstream(dir / "losses.json"))["losses"].get<std::vector<double>>();
        ASSERT_EQ(theirs.size(), ours.size()) << torch.output;
        for (std::size_t s = 0; s < ours.size(); ++s)
            EXPECT_NEAR(theirs[s], ours[s], 2e-5) << "step " << s + 1;
        EXPECT_LT(ours.back(), ours.front() - 1e-3) << "the model learns the batch";
        std::printf("[ NOTE ] %-7s engine %.6f %.6f %.6f, PyTorch pipelining %.6f %.6f %.6f\n", schedule.c_str(),
            ours[0], ours[1], ours[2], theirs[0], theirs[1], theirs[2]);
    }
    fs::remove_all(base);
}
