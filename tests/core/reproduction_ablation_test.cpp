// The DawnPiper report's ablations (core/report/dawnpiper_ablations.h, dawnpiper_figures.h) run on
// their own: each table's cells and the sentence under it agree.
#include "cluster/device_catalog.h"
#include "markdown_rows.h"
#include "report/dawnpiper_ablations.h"
#include "report/dawnpiper_figures.h"
#include "report/reproduction.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

using namespace ps;
using ps::test::rowCells;

namespace {
// DawnPiper's paper numbers, GPU and link, as its report reads them.
struct DawnPiperSetup
{
    nlohmann::json all = nlohmann::json::parse(paperNumbersJson());
    const nlohmann::json& paper = all.at("dawnpiper");
    const DeviceSpec& device = DeviceCatalog::builtin().find(paper.at("device").get<std::string>());
    LinkSpec link { paper.at("link").at("kind").get<std::string>(), paper.at("link").at("bandwidth").get<double>(), 0 };
};
} // namespace

// The GPT-2 asynchronous headline against memory held back on every GPU: the whole-GPU row is
// Table 2's cells, and holding memory back never fits a larger batch.
TEST(Reproduction, DawnPiperAsyncHeadlineAgainstAMemoryReserve)
{
    const DawnPiperSetup d;
    std::string md;
    ps::detail::addAsyncReserve(d.paper, d.device, d.link, { 4 }, {}, md);
    std::vector<double> baseline;
    std::vector<double> dawn;
    for (const auto* reserve : { "| 0 GB |", "| 2 GB |", "| 4 GB |", "| 6 GB |" }) {
        const auto row = rowCells(md, reserve);
        ASSERT_EQ(row.size(), 4U) << md;
        baseline.push_back(std::stod(row[1]));
        dawn.push_back(std::stod(row[2]));
        EXPECT_NE(row[3].find("(paper 5.0)"), std::string::npos) << row[3];
    }
    for (std::size_t i = 1; i < baseline.size(); ++i) {
        EXPECT_LE(baseline[i], baseline[i - 1]);
        EXPECT_LE(dawn[i], dawn[i - 1]);
    }
    EXPECT_GT(dawn.back(), baseline.back());
}

// BERT's memory waste against the batch and under PipeDream: each a share of the largest stage
// peak, and the sentence says what the table shows.
TEST(Reproduction, DawnPiperBertMemoryWasteAgainstBatchAndPipeline)
{
    const DawnPiperSetup d;
    std::string md;
    ps::detail::addBertMemoryWaste(d.paper, d.device, d.link, {}, md);
    for (const auto& row : { rowCells(md, "| GPipe |"), rowCells(md, "| PipeDream |") }) {
        ASSERT_EQ(row.size(), 4U) << md;
        const double waste = std::stod(row[2]);
        EXPECT_GE(waste, 0.0);
        EXPECT_LT(waste, 100.0);
    }
    const auto at = md.find("(100% of its largest)");
    ASSERT_NE(at, std::string::npos) << md;
    const double gpipeLargest = std::stod(rowCells(md.substr(md.rfind("| GPipe |", at)), "| GPipe |")[2]);
    const double pipedream = std::stod(rowCells(md, "| PipeDream |")[2]);
    EXPECT_NE(md.find(pipedream > gpipeLargest ? "weight versions raise it" : "weight versions do not raise it"),
        std::string::npos)
        << md;
    EXPECT_EQ(rowCells(md, "| GPipe |")[3], "28% (Fig. 2)");
}

// The S+R cells with one kind of memory action each: neither alone fits more than both, and the
// sentence counts the cells recomputation alone carries.
TEST(Reproduction, DawnPiperSplitsSwapAndRecompute)
{
    const DawnPiperSetup d;
    std::string md;
    ps::detail::addSwapRecomputeSplit(d.paper, d.device, d.link, { "bert" }, { 4 }, {}, md);
    int carried = 0;
    for (const auto* row : { "| bert | sync | 4 | DPiper-S |", "| bert | async | 4 | DPiper-AS |" }) {
        const auto cells = rowCells(md, row);
        ASSERT_EQ(cells.size(), 9U) << md;
        const double both = std::stod(cells[4]);
        EXPECT_GE(both, std::stod(cells[5])) << row;
        EXPECT_GE(both, std::stod(cells[6])) << row;
        carried += cells[6] == cells[4] ? 1 : 0;
    }
    EXPECT_EQ(rowCells(md, "| bert | sync | 4 | DPiper-S |")[7], "160");
    EXPECT_NE(md.find("gives the S+R cell in " + std::to_string(carried) + " of 2 cells"), std::string::npos) << md;
}
