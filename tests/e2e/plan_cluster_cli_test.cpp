// `plan`, `search` and `maxbatch` on the user's own cluster (`--cluster`): the plans are made and
// simulated on its devices and links, so on a slow link the dawnpiper portfolio's 1F1B cuts, which
// charge each stage its boundary's round trip, simulate faster than Algorithm 1's, which leave the
// transfers out; a cluster too small for the stages is refused by name.
#include "cli_support.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

using ps::e2e::runCli;

namespace {
class PlanClusterCli : public ps::e2e::ScratchTest
{
};

double iterationMs(const nlohmann::json& plans, const std::string& algorithm)
{
    for (const auto& p : plans) {
        if (p["algorithm"] == algorithm && p.contains("simulation"))
            return p["simulation"]["iteration_ms"].get<double>();
    }
    ADD_FAILURE() << "no simulated " << algorithm << " plan in " << plans.dump();
    return 0;
}
} // namespace

TEST_F(PlanClusterCli, PlansAreMadeAndSimulatedOnTheGivenCluster)
{
    const auto p = file("g.pstudio");
    ASSERT_EQ(runCli("new -m gpt2-medium --layers 8 -o " + p).exitCode, 0);
    // Four V100 machines, one GPU each, over 100 Gb/s (Ada-Grouper's setting).
    const auto slow = file("slow.json");
    std::ofstream(slow) << R"({"name": "four-v100", "device": "v100-32gb", "nodes": 4, "devices_per_node": 1,
        "inter_node": {"kind": "roce-100g", "bandwidth": 12.5e9, "latency": 5e-6}})";
    const std::string args = " --cluster " + slow + " -s 4 -m 32 --precision fp16 --no-save --json";
    const auto r = runCli("plan " + p + " -a dawnpiper,dawnpiper-paper -b 6" + args);
    ASSERT_EQ(r.exitCode, 0) << r.output;
    const auto plans = nlohmann::json::parse(r.output);
    EXPECT_LT(iterationMs(plans, "dawnpiper"), 0.9 * iterationMs(plans, "dawnpiper-paper")) << plans.dump(1);
    // Planned on the default cluster instead (four V100s in one node, NVLink), the portfolio's plan
    // simulates faster: the cluster given reached the planner and the simulation.
    const auto local = runCli("plan " + p
        + " -a dawnpiper -d v100-32gb -s 4 -m 32 -b 6 --precision fp16 --no-save "
          "--json");
    ASSERT_EQ(local.exitCode, 0) << local.output;
    EXPECT_LT(iterationMs(nlohmann::json::parse(local.output), "dawnpiper"), iterationMs(plans, "dawnpiper"));

    const auto search = runCli("search " + p + " --schedules 1f1b,kfkb:2 --micro-batch-sizes 6" + args);
    ASSERT_EQ(search.exitCode, 0) << search.output;
    EXPECT_FALSE(nlohmann::json::parse(search.output).empty());
    const auto maxbatch = runCli("maxbatch " + p + " -a dawnpiper --cluster " + slow + " -s 4 --json");
    ASSERT_EQ(maxbatch.exitCode, 0) << maxbatch.output;
    EXPECT_GT(nlohmann::json::parse(maxbatch.output)[0]["max_micro_batch"].get<int>(), 0);

    const auto empty = file("empty.json");
    std::ofstream(empty) << R"({"device": "v100-32gb", "nodes": 0})";
    const auto none = runCli("plan " + p + " --cluster " + empty + " --no-save");
    EXPECT_NE(none.exitCode, 0);
    EXPECT_NE(none.output.find("--cluster '" + empty + "': "), std::string::npos) << none.output;
    const auto small = runCli("plan " + p + " --cluster " + slow + " -s 8 --no-save");
    EXPECT_NE(small.exitCode, 0);
    EXPECT_NE(small.output.find("--cluster '" + slow + "' has 4 devices; 8 are needed"), std::string::npos)
        << small.output;
}
