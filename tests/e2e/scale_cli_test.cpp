// `pipestudio scale` as a user runs it: one configuration priced, the search, a project's GPT, and
// the errors for sizes that cannot be.
#include "cli_support.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

using ps::e2e::runCli;

namespace {
class ScaleCli : public ps::e2e::ScratchTest
{
};
} // namespace

TEST_F(ScaleCli, PricesOneConfigurationOrSearchesThem)
{
    const std::string model = "scale --layers 48 --hidden 8192 --heads 64 --seq 2048 --vocab 51200 --gpus 512 "
                              "--global-batch 1536";
    const auto one = runCli(model + " --tp 8 --pp 2 --schedule interleaved:2 --json");
    ASSERT_EQ(one.exitCode, 0) << one.output;
    const auto j = nlohmann::json::parse(one.output)["configuration"];
    EXPECT_EQ(j["data_parallel"].get<int>(), 32); // 512 / (8 x 2)
    EXPECT_EQ(j["micro_batches"].get<int>(), 48); // 1536 / (32 x 1)
    EXPECT_EQ(j["schedule"], "interleaved:2");
    EXPECT_TRUE(j["fits"].get<bool>());
    EXPECT_GT(j["tflops_per_gpu"].get<double>(), 50);
    EXPECT_LT(j["tflops_per_gpu"].get<double>(), 312); // an A100's bf16 peak
    // Memory per stage: the first (embeddings, the most micro-batches in flight) is the peak.
    ASSERT_EQ(j["stage_peak_gib"].size(), 2U);
    EXPECT_DOUBLE_EQ(j["stage_peak_gib"][0].get<double>(), j["peak_gib_per_gpu"].get<double>());
    EXPECT_LT(j["stage_peak_gib"][1].get<double>(), j["stage_peak_gib"][0].get<double>());
    // A node kind of the user's own, from a JSON file in the catalog's form.
    const auto nodes = file("nodes.json");
    std::ofstream(nodes) << R"({"nodes": [{"id": "l4-box", "device": "l4", "gpus": 4, "nics": 2,
        "intra": {"kind": "pcie4x16", "bandwidth": 31.5e9}, "nic": {"kind": "eth-25g", "bandwidth": 3.1e9}}]})";
    const auto ownNode = runCli("scale -m gpt2-small --gpus 8 --global-batch 64 --node l4-box --node-file " + nodes);
    ASSERT_EQ(ownNode.exitCode, 0) << ownNode.output;
    EXPECT_NE(ownNode.output.find("2 nodes of l4-box"), std::string::npos) << ownNode.output;
    const auto unknown = runCli("scale -m gpt2-small --gpus 8 --global-batch 64 --node l5-box --node-file " + nodes);
    EXPECT_NE(unknown.exitCode, 0);
    EXPECT_NE(unknown.output.find("unknown node kind 'l5-box'"), std::string::npos) << unknown.output;
    double parts = 0;
    for (const auto& [name, seconds] : j["seconds"].items())
        parts += seconds.get<double>();
    EXPECT_NEAR(parts, j["iteration_s"].get<double>(), 1e-6 * parts);

    // kFkB and ZB-H1 priced by the event simulation like the others.
    for (const auto* schedule : { "kfkb:2", "zb-h1" }) {
        const auto priced = runCli(model + " --tp 8 --pp 2 --json --schedule " + schedule);
        ASSERT_EQ(priced.exitCode, 0) << priced.output;
        const auto c = nlohmann::json::parse(priced.output)["configuration"];
        EXPECT_EQ(c["schedule"], schedule);
        EXPECT_TRUE(c["simulated"].get<bool>());
        EXPECT_GT(c["samples_per_s"].get<double>(), 0);
    }

    const auto search = runCli(model + " --top 3 --json");
    ASSERT_EQ(search.exitCode, 0) << search.output;
    const auto s = nlohmann::json::parse(search.output);
    ASSERT_EQ(s["ranked"].size(), 3U);
    EXPECT_GT(s["evaluated"].get<int>(), 100);
    EXPECT_GE(s["ranked"][0]["samples_per_s"].get<double>(), s["ranked"][1]["samples_per_s"].get<double>());
    EXPECT_GE(s["ranked"][0]["samples_per_s"].get<double>(), j["samples_per_s"].get<double>() * (1 - 1e-9));

    // The search's best handed to Megatron-LM: a torchrun launch with its sizes.
    const auto megatron = runCli(model + " --export megatron");
    ASSERT_EQ(megatron.exitCode, 0) << megatron.output;
    const auto& best = s["ranked"][0];
    EXPECT_NE(
        megatron.output.find("--tensor-model-parallel-size " + std::to_string(best["tensor_parallel"].get<int>())),
        std::string::npos)
        << megatron.output;
    EXPECT_NE(megatron.output.find("pretrain_gpt.py"), std::string::npos);
    const auto deepspeed = runCli(model + " --tp 8 --pp 2 --export deepspeed");
    ASSERT_EQ(deepspeed.exitCode, 0) << deepspeed.output;
    EXPECT_EQ(nlohmann::json::parse(deepspeed.output)["gradient_accumulation_steps"].get<int>(), 48);

    // A project's GPT is scaled with its own sizes; another family is refused naming it.
    const auto gpt = file("g.pstudio");
    ASSERT_EQ(runCli("new -m gpt2-medium -o " + gpt).exitCode, 0);
    const auto mine = runCli("scale " + gpt + " --gpus 16 --global-batch 64 --top 1");
    ASSERT_EQ(mine.exitCode, 0) << mine.output;
    EXPECT_NE(mine.output.find("24 layers x 1024 wide"), std::string::npos) << mine.output;
    const auto cnn = file("r.pstudio");
    ASSERT_EQ(runCli("new -m resnet-tiny -o " + cnn).exitCode, 0);
    EXPECT_TRUE(failedSaying(runCli("scale " + cnn + " --gpus 8 --global-batch 64"), "holds a resnet model"));

    for (const auto& [args, why] : { std::pair { " --tp 3 --pp 1", "does not divide --gpus" },
             std::pair { " --tp 8 --pp 5", "does not divide --gpus" },
             std::pair { " --tp 8 --pp 2 --dp 4", "is 64 GPUs, not --gpus 512" },
             std::pair { " --tp 8 --pp 2 --schedule interleaved:5", "equal chunks" },
             std::pair { " --tp 8 --pp 2 --recompute some", "unknown recomputation" },
             std::pair { " --tp 8 --pp 2 --schedule interleaved:x", "1f1b, interleaved:V (V >= 2), kfkb:K" },
             std::pair { " --tp 8 --pp 2 --schedule kfkb:99", "more than the 48 micro-batches" },
             std::pair { " --tp 8 --pp 2 --schedule zb-h1 --export megatron",
                 "megatron runs 1F1B and interleaved schedules, not zb-h1" },
             std::pair { " --micro-batch 2", "fix one configuration" },
             std::pair { " --node dgx-z", "unknown node kind" } }) {
        const auto bad = runCli(model + args);
        EXPECT_NE(bad.exitCode, 0) << args;
        EXPECT_NE(bad.output.find(why), std::string::npos) << args << ": " << bad.output;
    }
}

// `plan --tp T`: every stage a T-GPU tensor-parallel group split by Megatron's rule on the op graph;
// the split is reported, the plan priced on one GPU of the group, and such plans are not stored.
TEST_F(ScaleCli, PlanSplitsEachStageOverATensorParallelGroup)
{
    const auto project = file("t.pstudio");
    ASSERT_EQ(runCli("new -m gpt2-medium -o " + project).exitCode, 0);
    const std::string plan = "plan " + project + " --stages 4 --micro-batches 8 --device a100-40gb --algo dawnpiper";
    const auto whole = runCli(plan + " --json --no-save");
    ASSERT_EQ(whole.exitCode, 0) << whole.output;
    const auto split = runCli(plan + " --json --tp 4");
    ASSERT_EQ(split.exitCode, 0) << split.output;
    const auto w = nlohmann::json::parse(whole.output)[0];
    const auto s = nlohmann::json::parse(split.output)[0];
    EXPECT_EQ(s["tensor_parallel"]["size"], 4);
    EXPECT_EQ(s["tensor_parallel"]["column"], 2 * 24 + 1); // QKV and MLP-up per block, the LM head
    EXPECT_EQ(s["tensor_parallel"]["row"], 2 * 24);
    EXPECT_EQ(s["devices"], 16);
    EXPECT_EQ(s["tensor_parallel"]["nodes"]["h.0.attn.c_attn.matmul"], "column");
    EXPECT_EQ(s["tensor_parallel"]["nodes"]["h.0.mlp.c_proj.matmul"], "row");
    EXPECT_FALSE(s["tensor_parallel"]["nodes"].contains("h.0.ln_1")); // replicated
    EXPECT_FALSE(s.contains("plan_id"));
    EXPECT_LT(s["slowest_stage_ms"].get<double>(), w["slowest_stage_ms"].get<double>() / 2);
    const auto text = runCli(plan + " --tp 4");
    EXPECT_NE(text.output.find("tensor parallel 4: 49 column, 48 row"), std::string::npos) << text.output;
    EXPECT_NE(text.output.find("not stored"), std::string::npos) << text.output;
    const auto bad = runCli(plan + " --tp 3");
    EXPECT_NE(bad.exitCode, 0);
    EXPECT_NE(bad.output.find("node 'h.0.attn.q_heads' has 16 attention heads, not divisible by 3"), std::string::npos)
        << bad.output;
}
