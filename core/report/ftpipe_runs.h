// FTPipe §5's runs, shared by its report (ftpipe_report.cpp) and built in ftpipe_runs.cpp: T5-3B on
// 8 RTX 2080 Ti, each dataset's Seq-pipe GPipe baseline and Mixed-pipe plans (sync and async, at the
// paper's L = 2P and at their own L) simulated, and the tables and Figure 9 they make.
// Depends on: cluster/, cost/, plan/, report/reproduction.h, zoo/.
#pragma once

#include "cluster/cluster.h"
#include "cost/profile.h"
#include "plan/planner.h"
#include "report/reproduction.h"
#include "zoo/model_config.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace ps::detail::ftpipe {

struct Setup
{
    Graph graph;
    Profile profile;
    Cluster cluster;
    PlannerLimits limits;
    int gpus = 8;
};

struct Run
{
    Plan plan;
    double samplesPerSecond = 0; // 0: infeasible
    double commBytes = 0; // activations and gradients between stages, per sample
    double searchSeconds = 0;
};

struct DatasetResult
{
    std::string name;
    // mixedSync/mixedAsync: Mixed-pipe at the paper's L = 2P (Table 2: two stages per GPU);
    // sameSync: mixedAsync's partition run synchronously (Table 3); asyncOnSync, where that does not
    // fit: mixedSync's partition run asynchronously instead; own*: Mixed-pipe's own L.
    // seqDp/seqUniform: the Seq-pipe baseline's two partitioners apart (seqSync is the better).
    Run seqSync, seqDp, seqUniform, dawnSync, mixedSync, mixedAsync, sameSync, asyncOnSync, ownSync, ownAsync;
    double paperSync = kNaN, paperAsync = kNaN, paperAsyncVsSync = kNaN, paperComm = kNaN;
    int gpipeM = 0, syncM = 0, ftpipeM = 0; // micro-batches: Seq-pipe GPipe, Mixed-pipe sync, async
    double batch = 0;
};

// A ratio, NaN where either side is missing; a cell with `decimals`, "-" for NaN.
[[nodiscard]] double ratioOf(double a, double b);
[[nodiscard]] std::string cell(double v, int decimals);
// One dataset of papers.json's "ftpipe" (its mini-batch and Table 4's micro-batch counts) on `s`.
[[nodiscard]] DatasetResult runDataset(const Setup& s, const nlohmann::json& d, bool quick);
// Table 2 and Table 3 with their figure; Figure 9 (returns the best L); Table 3's Seq-pipe rows.
void addTables(const std::vector<DatasetResult>& results, PaperReport& report);
int addBlockSweep(const Setup& s, const DatasetResult& r, bool quick, PaperReport& report);
// §5.3's communication ratio against L on every dataset (`setups[i]` runs `results[i]`); returns
// the sentence the headline claims say about it.
std::string addCommunicationSweep(const std::vector<const Setup*>& setups, const std::vector<DatasetResult>& results,
    bool quick, PaperReport& report);
// Table 3's async over sync on one partition: the async plan's, else the sync plan's; NaN where
// neither pipeline pair runs.
[[nodiscard]] double asyncOverSyncOnePartition(const DatasetResult& r);
void addSeqPipeRows(const nlohmann::json& paper, bool quick, PaperReport& report);
// The encoder length a dataset runs at (WiC: 64, an assumption; the others the paper's).
[[nodiscard]] std::int64_t encoderSeq(const std::string& dataset, std::int64_t paperSeq);
// The model at encoder length `seq` (quick: 6 + 6 layers), its profile with `optimizer`'s state
// bytes (SGD: Adafactor's factored moments taken as negligible), the 8 GPUs over PCIe 3.
[[nodiscard]] Setup makeSetup(const nlohmann::json& paper, bool quick, std::int64_t seq, ModelConfig& config,
    Optimizer optimizer = Optimizer::Sgd);

} // namespace ps::detail::ftpipe
