// `pipestudio reproduce`'s sections: the paper's numbers come from the shipped JSON and sit beside
// ours with their ratio; our numbers come from the planner, not from the paper.
#include "report/reproduction.h"
#include "util/error.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

using namespace ps;

TEST(Reproduction, PaperNumbersShipWithTheBuild)
{
    const auto j = nlohmann::json::parse(paperNumbersJson());
    EXPECT_EQ(j.at("dawnpiper").at("table1_sync").size(), 16U);
    EXPECT_EQ(j.at("dawnpiper").at("table2_async").size(), 10U);
    EXPECT_EQ(j.at("adagrouper").at("global_batch").get<int>(), 192);
}

TEST(Reproduction, DawnPiperQuickTablesPutThePapersCellsBesideOurs)
{
    ReproduceOptions options;
    options.quick = true;
    const auto r = reproducePaper("dawnpiper", options);
    EXPECT_EQ(r.paper, "dawnpiper");
    // Table 1, 4 GPUs, BERT: DPiper-S with S+R is 160 in the paper; ZeRO-2 is 64.
    EXPECT_NE(r.markdown.find("| S+R | DPiper-S | "), std::string::npos) << r.markdown;
    const auto row = r.markdown.substr(r.markdown.find("| S+R | DPiper-S | "));
    const auto cells = row.substr(0, row.find('\n'));
    EXPECT_NE(cells.find("| 160 |"), std::string::npos) << cells;
    const auto ours = std::stod(cells.substr(std::string("| S+R | DPiper-S | ").size()));
    EXPECT_GT(ours, 0) << cells;
    char ratio[32];
    std::snprintf(ratio, sizeof ratio, "| %.2fx |", ours / 160);
    EXPECT_NE(cells.find(ratio), std::string::npos) << cells;
    // Swap and recompute never fit less than no memory optimization.
    const auto none = r.markdown.substr(r.markdown.find("| None | DPiper-S | "));
    EXPECT_GE(ours, std::stod(none.substr(std::string("| None | DPiper-S | ").size()))) << none.substr(0, 80);
    ASSERT_EQ(r.figures.size(), 2U);
    EXPECT_EQ(r.figures[0].file, "dawnpiper-sync.png");
    EXPECT_FALSE(r.figures[0].series.empty());
    EXPECT_NE(r.markdown.find("![DawnPiper Table 1"), std::string::npos);
}

TEST(Reproduction, AdaGrouperQuickRanksKAgainst1F1BAndRunsTheController)
{
    ReproduceOptions options;
    options.quick = true;
    const auto r = reproducePaper("adagrouper", options);
    EXPECT_NE(r.markdown.find("| 1 | "), std::string::npos) << r.markdown;
    EXPECT_NE(r.markdown.find("| 1.000 |"), std::string::npos) << "1F1B is the baseline: " << r.markdown;
    EXPECT_NE(r.markdown.find("+10% to +25%"), std::string::npos) << r.markdown;
    ASSERT_EQ(r.figures.size(), 2U);
    const auto& timeline = r.figures[1];
    ASSERT_EQ(timeline.series.size(), 2U);
    EXPECT_EQ(timeline.x.size(), timeline.series[0].values.size());
    EXPECT_EQ(timeline.x.size(), 40U);
}

TEST(Reproduction, UnknownPaperNamesTheKnownOnes)
{
    try {
        (void)reproducePaper("megatron", {});
        FAIL() << "expected an error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("dawnpiper, adagrouper"), std::string::npos) << e.what();
    }
}

TEST(Reproduction, ReportJoinsTheSectionsUnderOneTitle)
{
    const auto md = reportMarkdown({ { "a", "## A\n", {} }, { "b", "## B\n", {} } }, "pipestudio 9");
    EXPECT_EQ(md.rfind("# PipeStudio reproduces its papers", 0), 0U);
    EXPECT_LT(md.find("## A"), md.find("## B"));
    EXPECT_NE(md.find("pipestudio 9"), std::string::npos);
}
