// The ONNX importer on models it was not written against: torchvision's classifiers, nn.Transformer
// variants, GPT-2- and BERT-like models and an MLP, exported by torch at opset 13 and 17
// (tests/data/make_onnx_corpus.py). Every model must import with the manifest's parameter count,
// without opaque ops, with torch's output shapes, and run forward on the CPU engine to torch's
// output. Every model is checked and reported in one table, not only the first that fails.
#include "executor.h"
#include "graph/graph_summary.h"
#include "onnx/onnx_import.h"
#include "onnx_corpus_support.h"
#include "util/error.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

using namespace ps;
using namespace ps::engine;
namespace fs = std::filesystem;

namespace {

constexpr double kForwardTolerance = 1e-4; // max |diff| / max |expected|
constexpr std::size_t kMinModels = 25;

// One line of the table: what the import and the forward pass gave, and why the model failed.
struct CorpusRow
{
    std::string stem; // "<name>-op<opset>"
    std::size_t onnxNodes = 0;
    std::size_t irNodes = 0;
    std::int64_t parameters = -1;
    std::int64_t expectedParameters = 0;
    double importMs = -1;
    std::optional<double> relativeError;
    std::optional<double> ortError; // against onnxruntime, where it ran
    std::vector<std::string> failures; // in check order; the first is the table's reason
    std::string exportError; // the exporter failed: a finding, not a test failure
};

std::optional<fs::path> corpusDir()
{
    const char* dir = std::getenv("PS_ONNX_CORPUS");
    if (!dir)
        return std::nullopt;
    return fs::path(dir);
}

void fail(CorpusRow& row, const std::string& reason)
{
    ADD_FAILURE() << row.stem << ": " << reason;
    row.failures.push_back(reason);
}

std::string formatOpaque(const std::map<std::string, int>& ops)
{
    std::ostringstream s;
    for (const auto& [op, count] : ops)
        s << (s.tellp() > 0 ? " " : "") << op << "x" << count;
    return s.str();
}

// Reads the inputs (concatenated, in input order) into arrays of the executor's allocator.
void setInputs(GraphExecutor& executor, const nlohmann::json& entry, const fs::path& inBin)
{
    std::ifstream in(inBin, std::ios::binary);
    for (const auto& input : entry["inputs"]) {
        const bool tokens = input["dtype"] == "int64";
        auto a = NdArray::empty(executor.allocator(), input["shape"].get<Shape>(), tokens ? DType::I64 : DType::F32);
        in.read(tokens ? reinterpret_cast<char*>(a.i64()) : reinterpret_cast<char*>(a.f32()), a.bytes());
        if (!in)
            throw Error(inBin.string() + " is shorter than the inputs' shapes");
        executor.setInput(input["name"].get<std::string>(), a);
    }
}

double relativeMaxError(const NdArray& out, const std::vector<float>& expected)
{
    double diff = 0;
    double scale = 0;
    for (std::int64_t i = 0; i < out.numel(); ++i) {
        const double e = expected[static_cast<std::size_t>(i)];
        const double d = std::abs(static_cast<double>(out.f32()[i]) - e);
        diff = std::isnan(d) ? d : std::max(diff, d);
        scale = std::max(scale, std::abs(e));
    }
    return scale > 0 ? diff / scale : diff;
}

void checkShapes(CorpusRow& row, const Graph& graph, const nlohmann::json& entry)
{
    const auto expected = entry["output_shapes"].get<std::vector<Shape>>();
    if (graph.outputs().size() != expected.size()) {
        fail(row,
            "graph has " + std::to_string(graph.outputs().size()) + " outputs, torch "
                + std::to_string(expected.size()));
        return;
    }
    for (std::size_t i = 0; i < expected.size(); ++i) {
        const auto& got = graph.tensor(graph.outputs()[i]).shape;
        if (got != expected[i])
            fail(row,
                "output " + std::to_string(i) + " shape " + formatShape(got) + ", torch " + formatShape(expected[i]));
    }
}

void checkForward(CorpusRow& row, Graph graph, const nlohmann::json& entry, const fs::path& stem)
{
    try {
        GraphExecutor executor(std::move(graph), ExecutorOptions { 0, 0, false });
        setInputs(executor, entry, stem.string() + ".in.bin");
        (void)executor.forward();
        const auto& out = executor.value(executor.graph().outputs().front());
        if (out.dtype() != DType::F32) {
            fail(row, "forward: output is " + std::string(toString(out.dtype())) + ", torch's is float32");
            return;
        }
        std::vector<float> expected(static_cast<std::size_t>(out.numel()));
        std::ifstream file(stem.string() + ".out.bin", std::ios::binary);
        file.read(reinterpret_cast<char*>(expected.data()), out.bytes());
        if (!file || file.peek() != std::char_traits<char>::eof()) {
            fail(row, "forward: output has " + std::to_string(out.numel()) + " elements, torch's file differs");
            return;
        }
        row.relativeError = relativeMaxError(out, expected);
        if (!(*row.relativeError < kForwardTolerance)) {
            std::ostringstream s;
            s << "forward: relative max error " << *row.relativeError;
            fail(row, s.str());
        }
        // The second oracle, where tests/data/ort_reference.py ran onnxruntime on the same inputs.
        std::ifstream ort(stem.string() + ".ort.bin", std::ios::binary);
        if (ort) {
            std::vector<float> fromOrt(expected.size());
            ort.read(reinterpret_cast<char*>(fromOrt.data()), out.bytes());
            if (!ort || ort.peek() != std::char_traits<char>::eof()) {
                fail(row, "forward: onnxruntime's output has another element count");
                return;
            }
            row.ortError = relativeMaxError(out, fromOrt);
            if (!(*row.ortError < kForwardTolerance)) {
                std::ostringstream s;
                s << "forward: relative max error against onnxruntime " << *row.ortError;
                fail(row, s.str());
            }
        }
    } catch (const std::exception& e) {
        fail(row, std::string("forward: ") + e.what());
    }
}

CorpusRow checkModel(const fs::path& dir, const nlohmann::json& entry)
{
    CorpusRow row;
    row.stem = entry["name"].get<std::string>() + "-op" + std::to_string(entry["opset"].get<int>());
    SCOPED_TRACE(row.stem);
    if (entry.contains("error")) {
        row.exportError = entry["error"].get<std::string>();
        return row;
    }
    row.onnxNodes = entry["onnx_nodes"].get<std::size_t>();
    row.expectedParameters = entry["expected_parameters"].get<std::int64_t>();
    OnnxImport imported;
    try {
        const auto start = std::chrono::steady_clock::now();
        imported = importOnnx(dir / entry["file"].get<std::string>(), ps::testing::corpusImportOptions(entry));
        row.importMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    } catch (const std::exception& e) {
        fail(row, std::string("import: ") + e.what());
        return row;
    }
    row.irNodes = imported.graph.nodeCount();
    row.parameters = imported.graph.parameterCount();
    if (!imported.report.opaqueOps.empty())
        fail(row, "opaque ops: " + formatOpaque(imported.report.opaqueOps));
    if (row.parameters != row.expectedParameters)
        fail(row,
            "parameters " + std::to_string(row.parameters) + ", expected " + std::to_string(row.expectedParameters)
                + " (" + entry["expected_rule"].get<std::string>() + ")");
    checkShapes(row, imported.graph, entry);
    checkForward(row, std::move(imported.graph), entry, dir / row.stem);
    return row;
}

void printTable(const std::vector<CorpusRow>& rows)
{
    std::printf("%-42s %6s %6s %18s %9s  %s\n", "model", "onnx", "ir", "parameters", "import", "forward / reason");
    int passed = 0;
    for (const auto& r : rows) {
        if (!r.exportError.empty()) {
            std::printf("%-42s %6s %6s %18s %9s  export failed: %s\n", r.stem.c_str(), "-", "-", "-", "-",
                r.exportError.c_str());
            continue;
        }
        std::string result;
        if (!r.failures.empty())
            result = r.failures.front()
                + (r.failures.size() > 1 ? " (+" + std::to_string(r.failures.size() - 1) + " more)" : "");
        else {
            char ok[32];
            if (r.ortError)
                std::snprintf(ok, sizeof ok, "ok %.2e, ort %.2e", r.relativeError.value_or(0.0), *r.ortError);
            else
                std::snprintf(ok, sizeof ok, "ok %.2e", r.relativeError.value_or(0.0));
            result = ok;
            ++passed;
        }
        const auto params =
            (r.parameters < 0 ? "-" : std::to_string(r.parameters)) + "/" + std::to_string(r.expectedParameters);
        char ms[32] = "-";
        if (r.importMs >= 0)
            std::snprintf(ms, sizeof ms, "%.1fms", r.importMs);
        std::printf("%-42s %6zu %6zu %18s %9s  %s\n", r.stem.c_str(), r.onnxNodes, r.irNodes, params.c_str(), ms,
            result.c_str());
    }
    const auto exported = std::count_if(rows.begin(), rows.end(), [](const auto& r) { return r.exportError.empty(); });
    std::printf("%d of %td exported models pass (%zu exports failed)\n", passed, exported,
        rows.size() - static_cast<std::size_t>(exported));
}

} // namespace

TEST(OnnxCorpus, ImportsAndRunsEveryExportedModel)
{
    const auto dir = corpusDir();
    if (!dir || !fs::exists(*dir / "manifest.json"))
        GTEST_SKIP() << "no ONNX corpus in PS_ONNX_CORPUS (tests/data/make_onnx_corpus.py needs Debian's "
                        "python3-torch and python3-torchvision)";
    const auto manifest = nlohmann::json::parse(std::ifstream(*dir / "manifest.json"));
    std::vector<CorpusRow> rows;
    std::set<std::string> exported; // model names with an export (its two opsets count once)
    for (const auto& entry : manifest) {
        rows.push_back(checkModel(*dir, entry));
        if (!entry.contains("error"))
            exported.insert(entry["name"].get<std::string>());
    }
    printTable(rows);
    EXPECT_GE(exported.size(), kMinModels) << "the corpus lost models: rebuild it with make_onnx_corpus.py";
}

// onnxruntime ran every export (tests/data/ort_reference.py), so the comparison above had its
// second oracle for each; skips saying why where onnxruntime is not installed.
TEST(OnnxCorpus, OnnxRuntimeRanEveryExport)
{
    const auto dir = corpusDir();
    if (!dir || !fs::exists(*dir / "manifest.json"))
        GTEST_SKIP() << "no ONNX corpus in PS_ONNX_CORPUS";
    if (!fs::exists(*dir / "ort.json"))
        GTEST_SKIP() << "no ort.json in the corpus (run tests/data/ort_reference.py)";
    const auto ort = nlohmann::json::parse(std::ifstream(*dir / "ort.json"));
    if (ort.contains("skipped"))
        GTEST_SKIP() << ort["skipped"].get<std::string>();
    const auto manifest = nlohmann::json::parse(std::ifstream(*dir / "manifest.json"));
    std::size_t exported = 0;
    std::size_t ran = 0;
    for (const auto& entry : manifest) {
        if (entry.contains("error"))
            continue;
        ++exported;
        const auto file = entry["file"].get<std::string>();
        const auto stem = file.substr(0, file.size() - std::string(".onnx").size());
        const auto result = ort["results"].value(stem, std::string("missing"));
        EXPECT_EQ(result, "ok") << stem;
        ran += result == "ok" && fs::exists(*dir / (stem + ".ort.bin")) ? 1 : 0;
    }
    std::cout << "[ NOTE ] onnxruntime " << ort["onnxruntime"].get<std::string>() << " ran " << ran << " of "
              << exported << " exports\n";
    EXPECT_EQ(ran, exported);
    EXPECT_GT(exported, 0U);
}

// Import time grows with the graph: a 10,000-node residual MLP must import whole. The time is
// printed, not asserted (timings belong in benchmarks).
TEST(OnnxCorpus, ImportsATenThousandNodeGraphFast)
{
    const auto dir = corpusDir();
    if (!dir || !fs::exists(*dir / "deep_mlp_10k.json"))
        GTEST_SKIP() << "no deep_mlp_10k.onnx in PS_ONNX_CORPUS (tests/data/make_onnx_corpus.py needs python3-onnx)";
    const auto info = nlohmann::json::parse(std::ifstream(*dir / "deep_mlp_10k.json"));
    const auto nodes = info["onnx_nodes"].get<std::size_t>();
    ASSERT_GE(nodes, 10000u);
    OnnxImportOptions options;
    options.batch = 4;
    const auto start = std::chrono::steady_clock::now();
    const auto imported = importOnnx(*dir / info["file"].get<std::string>(), options);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    std::printf("deep_mlp_10k.onnx: %zu ONNX nodes, %zu IR nodes, imported in %.1f ms\n", nodes,
        imported.graph.nodeCount(), ms);
    EXPECT_EQ(imported.report.onnxNodes, nodes);
    EXPECT_EQ(imported.graph.nodeCount(), nodes); // MatMul, Add, Relu and Add map one to one
    EXPECT_EQ(imported.graph.parameterCount(), info["parameters"].get<std::int64_t>());
    EXPECT_TRUE(imported.report.opaqueOps.empty());
    EXPECT_EQ(imported.graph.tensor(imported.graph.outputs().front()).shape, (Shape { 4, 16 }));
}

namespace {

struct Totals // of a whole micro-batch
{
    double forwardFlops = 0;
    double savedBytes = 0;
    double outputBytes = 0;
    double microBatch = 1;
};

Totals totals(const Graph& g)
{
    const auto s = summarizeGraph(g);
    const double mb = static_cast<double>(g.info().microBatch);
    return { s.forwardFlopsPerSample * mb, static_cast<double>(s.activationBytesPerSample) * mb,
        static_cast<double>(s.outputBytesPerSample) * mb, mb };
}

bool near(double a, double b, double tolerance)
{
    return std::abs(a - b) <= tolerance * std::max(std::abs(a), std::abs(b));
}

} // namespace

// Every corpus model exported with fixed shapes (torch.onnx.export's default) and with dynamic axes
// (tests/data/make_onnx_corpus.py, export_pairs). Imported with no sizes, the fixed export takes the
// batch it was exported with. Asked for other micro-batches (and sequence lengths) it either
// refuses, naming the node and the export argument, or:
//  - its FLOPs per sample are the dynamic export's at that size (within 2%: the exporter folds a
//    little differently with dynamic axes);
//  - after a batch change, its FLOPs and bytes per sample are exactly those at the exported batch;
//  - its bytes differ from the dynamic export's by what they differ at the exported size (the
//    dynamic export computes its masks in the forward: values of no batch, folded when fixed).
// Never a per-sample figure from a mismatched size.
TEST(OnnxCorpus, FixedShapeExportsGiveTheDynamicExportsPerSampleFigures)
{
    const auto dir = corpusDir();
    if (!dir || !fs::exists(*dir / "pairs.json"))
        GTEST_SKIP() << "no pairs.json in PS_ONNX_CORPUS (tests/data/make_onnx_corpus.py needs python3-torch)";
    const auto pairs = nlohmann::json::parse(std::ifstream(*dir / "pairs.json"));
    int compared = 0;
    int refused = 0;
    std::ostringstream table;
    for (const auto& p : pairs) {
        if (p.contains("error"))
            continue;
        const auto name = p["name"].get<std::string>();
        const auto shape = p["input_shapes"][0].get<Shape>();
        const auto axis = p["batch_axis"].get<std::size_t>();
        const auto exported = shape[axis];
        const bool sequence = p["sequence"].get<bool>();
        const auto fixedPath = *dir / p["fixed"].get<std::string>();
        const auto dynamicPath = *dir / p["dynamic"].get<std::string>();
        const auto dynamicAt = [&](std::int64_t batch, std::optional<std::int64_t> seq) {
            OnnxImportOptions o;
            o.batch = batch;
            if (sequence)
                o.sequence = seq.value_or(shape[1]);
            return totals(importOnnx(dynamicPath, o).graph);
        };
        // Defaults: the exported sizes.
        const auto atExport = totals(importOnnx(fixedPath).graph);
        EXPECT_EQ(atExport.microBatch, exported) << name << ": the batch it was exported with";
        const auto dynamicAtExport = dynamicAt(exported, std::nullopt);
        EXPECT_TRUE(near(atExport.forwardFlops, dynamicAtExport.forwardFlops, 0.02))
            << name << ": forward FLOPs/sample " << atExport.forwardFlops << " vs " << dynamicAtExport.forwardFlops;
        struct Ask
        {
            std::int64_t batch;
            std::optional<std::int64_t> seq;
        };
        std::vector<Ask> asks { { 3, std::nullopt }, { 8, std::nullopt } };
        std::map<std::int64_t, Totals> byBatch { { exported, atExport } };
        if (sequence)
            asks.push_back({ exported, shape[1] * 2 });
        for (const auto& ask : asks) {
            const auto label = name + " batch " + std::to_string(ask.batch)
                + (ask.seq ? " seq " + std::to_string(*ask.seq) : std::string());
            OnnxImportOptions fixed;
            fixed.batch = ask.batch;
            fixed.sequence = ask.seq;
            table << label << ": ";
            try {
                const auto imported = importOnnx(fixedPath, fixed);
                const auto got = totals(imported.graph);
                const auto reference = dynamicAt(ask.batch, ask.seq);
                EXPECT_EQ(got.microBatch, ask.batch) << label;
                EXPECT_TRUE(near(got.forwardFlops, reference.forwardFlops, 0.02))
                    << label << ": forward FLOPs/sample " << got.forwardFlops << " vs " << reference.forwardFlops;
                if (!ask.seq)
                    byBatch[ask.batch] = got;
                for (const auto& [mine, theirs, mineAt, theirsAt, what] :
                    { std::tuple { got.savedBytes, reference.savedBytes, atExport.savedBytes,
                          dynamicAtExport.savedBytes, "saved bytes" },
                        std::tuple { got.outputBytes, reference.outputBytes, atExport.outputBytes,
                            dynamicAtExport.outputBytes, "output bytes" } }) {
                    EXPECT_LE(std::abs((mine - theirs) - (mineAt - theirsAt)), 0.01 * std::max(mine, theirs))
                        << label << ": " << what << " " << mine << " vs " << theirs << " (at the exported size "
                        << mineAt << " vs " << theirsAt << ")";
                }
                table << "same per-sample figures (" << imported.report.respecialisedConstants
                      << " constants rewritten)\n";
                ++compared;
            } catch (const Error& e) {
                const std::string what = e.what();
                EXPECT_NE(what.find("node '"), std::string::npos) << label << ": " << what;
                EXPECT_NE(what.find("dynamic_axes"), std::string::npos) << label << ": " << what;
                table << "refused: " << what.substr(std::min(what.size(), what.find("node '"))) << "\n";
                ++refused;
            }
        }
        // FLOPs and bytes are linear in the batch: a part per sample and a part of no batch (a
        // relative position bias gathered from its table, a mask computed in the forward). Three
        // sizes lie on one line exactly when every batch-carrying value was resized (up to the
        // whole bytes per-sample figures are rounded to; a value left at the exported batch would
        // be off by its size times the batch change).
        if (byBatch.size() == 3) {
            const auto at = [&](std::int64_t b) { return byBatch.at(b); };
            const double b0 = static_cast<double>(exported);
            for (const auto& [field, what] : { std::pair { &Totals::forwardFlops, "forward FLOPs" },
                     std::pair { &Totals::savedBytes, "saved bytes" },
                     std::pair { &Totals::outputBytes, "output bytes" } }) {
                const double slope = (at(3).*field - at(exported).*field) / (3 - b0);
                const double predicted = at(3).*field + slope * 5;
                EXPECT_LE(std::abs(at(8).*field - predicted), 64 + 1e-6 * std::abs(predicted))
                    << name << ": " << what << " at batch 8 " << at(8).*field << ", the line through the exported "
                    << "batch and 3 gives " << predicted;
            }
        }
    }
    std::printf("%s", table.str().c_str());
    std::printf("fixed vs dynamic exports: %d re-specialised imports compared, %d refused\n", compared, refused);
    EXPECT_GE(compared, 60);
}
