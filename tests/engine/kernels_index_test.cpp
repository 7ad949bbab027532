// The index and resampling kernels (cpu/kernels_index.cpp) and MaxPool's ceil_mode: forward values
// against hand-computed expectations and against PyTorch (Debian's python3-torch; those tests skip
// without it), every backward against central finite differences of its forward.
#include "backend.h"
#include "index_kernel_support.h"
#include "kernel_test_support.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <unistd.h>

using namespace ps;
using namespace ps::engine;
using ps::engine::testing::expectValues;
using ps::engine::testing::IndexKernel;
using ps::engine::testing::makeNode;
using ps::engine::testing::pool;
using ps::engine::testing::resize;
using ps::engine::testing::valueAt;
namespace fs = std::filesystem;

namespace {

// One printed result of the Python side: its shape and values.
struct TorchResult
{
    Shape shape;
    std::vector<double> values;
};

const char* kPrelude = R"(import sys
try:
    import torch
    import torch.nn.functional as F
except ImportError as e:
    print("SKIP", e)
    sys.exit(0)
torch.set_num_threads(1)
def out(t):
    t = torch.as_tensor(t)
    print(" ".join(str(d) for d in t.shape) + " | " + " ".join(repr(float(v)) for v in t.flatten().tolist()))
)";

// Runs `body` after kPrelude with /usr/bin/python3; one result per out() call. Empty with `skipped`
// when torch is missing; a Python failure fails the calling test.
std::vector<TorchResult> runTorch(const std::string& body, bool* skipped = nullptr)
{
    static int counter = 0;
    const auto file = fs::temp_directory_path()
        / ("ps_index_kernel_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + ".py");
    std::ofstream(file) << kPrelude << body << "\n";
    const std::string command = "/usr/bin/python3 " + file.string() + " 2>&1";
    FILE* pipe = ::popen(command.c_str(), "r");
    std::string printed;
    char buf[4096];
    while (pipe != nullptr && std::fgets(buf, sizeof buf, pipe))
        printed += buf;
    const int status = pipe != nullptr ? ::pclose(pipe) : -1;
    fs::remove(file);
    if (skipped != nullptr)
        *skipped = printed.rfind("SKIP", 0) == 0;
    if (status != 0) {
        ADD_FAILURE() << "python failed:\n" << printed;
        return {};
    }
    std::vector<TorchResult> results;
    std::istringstream lines(printed);
    for (std::string line; std::getline(lines, line);) {
        const auto bar = line.find('|');
        if (bar == std::string::npos)
            continue;
        TorchResult r;
        std::istringstream dims(line.substr(0, bar));
        for (std::int64_t d; dims >> d;)
            r.shape.push_back(d);
        std::istringstream values(line.substr(bar + 1));
        for (std::string v; values >> v;)
            r.values.push_back(std::stod(v));
        results.push_back(std::move(r));
    }
    return results;
}

bool haveTorch()
{
    static const bool available = [] {
        bool skipped = true;
        (void)runTorch("out(torch.zeros(1))", &skipped);
        return !skipped;
    }();
    return available;
}

// "torch.tensor([...]).reshape(...)" holding the array's values exactly.
std::string pyTensor(const NdArray& a)
{
    std::ostringstream s;
    s.precision(9);
    s << "torch.tensor([";
    for (std::int64_t i = 0; i < a.numel(); ++i)
        s << (i ? ", " : "") << (a.dtype() == DType::F32 ? static_cast<double>(a.f32()[i]) : a.i64()[i]);
    s << "], dtype=" << (a.dtype() == DType::F32 ? "torch.float32" : "torch.int64") << ").reshape(";
    for (auto d : a.shape())
        s << d << ",";
    s << ")";
    return s.str();
}

void expectTorch(const NdArray& a, const TorchResult& r, const std::string& what, double tolerance = 1e-5)
{
    EXPECT_EQ(a.shape(), r.shape) << what << ": " << formatShape(a.shape()) << " vs torch " << formatShape(r.shape);
    expectValues(a, r.values, tolerance, what);
}

using IndexKernelTorch = IndexKernel;

} // namespace

// ---- Forward values by hand ----

TEST_F(IndexKernel, AvgPoolCeilModeAndCountIncludePad)
{
    const auto x = iota({ 1, 1, 4, 4 }); // 1 .. 16
    // k 3, stride 2, pads 1, ceil: 3 x 3 windows; the last starts at 3 and is clipped to the padded end 5.
    auto out = run(makeNode(OpType::AvgPool, pool({ 3, 3 }, { 2, 2 }, { 1, 1, 1, 1 }, 1, 1)), { x })[0];
    EXPECT_EQ(out.shape(), (Shape { 1, 1, 3, 3 }));
    expectValues(out, { 14.0 / 9, 30.0 / 9, 12.0 / 6, 57.0 / 9, 99.0 / 9, 36.0 / 6, 27.0 / 6, 45.0 / 6, 16.0 / 4 },
        1e-5, "count_include_pad 1");
    out = run(makeNode(OpType::AvgPool, pool({ 3, 3 }, { 2, 2 }, { 1, 1, 1, 1 }, 1, 0)), { x })[0];
    expectValues(out, { 14.0 / 4, 30.0 / 6, 12.0 / 2, 57.0 / 6, 99.0 / 9, 36.0 / 3, 27.0 / 2, 45.0 / 3, 16.0 }, 1e-5,
        "count_include_pad 0");
    out = run(makeNode(OpType::AvgPool, pool({ 3, 3 }, { 2, 2 }, { 1, 1, 1, 1 }, 0, 0)), { x })[0];
    expectValues(out, { 14.0 / 4, 30.0 / 6, 57.0 / 6, 99.0 / 9 }, 1e-5, "floor mode");
    // Asymmetric pads (ONNX): only the bottom and right, window 2, stride 2 over 3 x 3.
    out = run(makeNode(OpType::AvgPool, pool({ 2, 2 }, { 2, 2 }, { 0, 0, 1, 1 }, 0, 1)), { iota({ 1, 1, 3, 3 }) })[0];
    expectValues(out, { 12.0 / 4, 9.0 / 4, 15.0 / 4, 9.0 / 4 }, 1e-5, "asymmetric pads");
}

TEST_F(IndexKernel, MaxPoolCeilMode)
{
    const auto x = iota({ 1, 1, 3, 3 });
    auto out = run(makeNode(OpType::MaxPool, pool({ 2, 2 }, { 2, 2 }, { 0, 0, 0, 0 }, 1)), { x })[0];
    EXPECT_EQ(out.shape(), (Shape { 1, 1, 2, 2 }));
    expectValues(out, { 5, 6, 8, 9 }, 0, "ceil_mode 1");
    out = run(makeNode(OpType::MaxPool, pool({ 2, 2 }, { 2, 2 }, { 0, 0, 0, 0 }, 0)), { x })[0];
    expectValues(out, { 5 }, 0, "ceil_mode 0");
    // A window that would start in the trailing pad is dropped: 5 wide, k 2, stride 2, pad 1 -> 3, not 4.
    out = run(makeNode(OpType::MaxPool, pool({ 2, 2 }, { 2, 2 }, { 1, 1, 1, 1 }, 1)), { iota({ 1, 1, 5, 5 }) })[0];
    EXPECT_EQ(out.shape(), (Shape { 1, 1, 3, 3 }));
    expectValues(out, { 1, 3, 5, 11, 13, 15, 21, 23, 25 }, 0, "pads with ceil_mode");
    // 6 wide, k 3, stride 2, pad 1: ceil keeps a fourth window [5, 8) over the last column.
    out = run(makeNode(OpType::MaxPool, pool({ 3, 3 }, { 2, 2 }, { 1, 1, 1, 1 }, 1)), { iota({ 1, 1, 1, 6 }) })[0];
    EXPECT_EQ(out.shape(), (Shape { 1, 1, 1, 4 }));
    expectValues(out, { 2, 4, 6, 6 }, 0, "partial last window");
}

TEST_F(IndexKernel, PadModes)
{
    const auto x = floats({ 3 }, { 1, 2, 3 });
    const auto pad = [&](Shape pads, std::string mode) {
        return run(
            makeNode(OpType::Pad, { { "pads", std::move(pads) }, { "mode", std::move(mode) }, { "value", 0.5 } }),
            { x })[0];
    };
    expectValues(pad({ 2, 1 }, "reflect"), { 3, 2, 1, 2, 3, 2 }, 0, "reflect");
    expectValues(pad({ 2, 1 }, "edge"), { 1, 1, 1, 2, 3, 3 }, 0, "edge");
    expectValues(pad({ 2, 1 }, "constant"), { 0.5, 0.5, 1, 2, 3, 0.5 }, 0, "constant");
    expectValues(pad({ 2, 1 }, "wrap"), { 2, 3, 1, 2, 3, 1 }, 0, "wrap");
    expectValues(pad({ -1, 2 }, "constant"), { 2, 3, 0.5, 0.5 }, 0, "crop and pad");
    expectValues(pad({ -1, 1 }, "reflect"), { 2, 3, 2 }, 0, "crop and reflect");
    const auto y = run(makeNode(OpType::Pad, { { "pads", Shape { 1, 0, 0, 1 } }, { "mode", std::string("edge") } }),
        { floats({ 2, 2 }, { 1, 2, 3, 4 }) })[0];
    EXPECT_EQ(y.shape(), (Shape { 3, 3 }));
    expectValues(y, { 1, 2, 2, 1, 2, 2, 3, 4, 4 }, 0, "edge 2-d");
    const auto ids =
        run(makeNode(OpType::Pad, { { "pads", Shape { 1, 1 } }, { "value", 7.0 } }), { ints({ 2 }, { 4, 5 }) })[0];
    EXPECT_EQ(ids.dtype(), DType::I64);
    expectValues(ids, { 7, 4, 5, 7 }, 0, "i64 constant");
    expectError([&] { (void)pad({ 1 }, "constant"); }, "pads needs 2 values");
    expectError([&] { (void)pad({ 1, 1 }, "mirror"); }, "mode 'mirror'");
    expectError([&] { (void)pad({ -2, -2 }, "constant"); }, "below zero");
}

TEST_F(IndexKernel, ResizeNearestAndLinear)
{
    const auto x = floats({ 1, 1, 2, 2 }, { 1, 2, 3, 4 });
    auto out = run(makeNode(OpType::Resize, resize({ 4, 4 }, "linear", "align_corners")), { x })[0];
    EXPECT_EQ(out.shape(), (Shape { 1, 1, 4, 4 }));
    const double t = 1.0 / 3;
    expectValues(out,
        { 1, 1 + t, 1 + 2 * t, 2, 1 + 2 * t, 1 + 3 * t, 1 + 4 * t, 2 + 2 * t, 1 + 4 * t, 1 + 5 * t, 1 + 6 * t,
            2 + 4 * t, 3, 3 + t, 3 + 2 * t, 4 },
        1e-5, "align_corners");
    out = run(makeNode(OpType::Resize, resize({ 1, 4 }, "linear", "half_pixel")), { x })[0];
    expectValues(out, { 2, 2.25, 2.75, 3 }, 1e-6, "half_pixel (edge clamp)");
    out = run(makeNode(OpType::Resize, resize({ 3, 4 }, "nearest", "asymmetric", "floor")), { x })[0];
    expectValues(out, { 1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4 }, 0, "nearest floor");
    const auto row = floats({ 1, 1, 1, 2 }, { 1, 2 }); // x = 0, 0.5, 1, 1.5 below
    out = run(makeNode(OpType::Resize, resize({ 1, 4 }, "nearest", "asymmetric", "round_prefer_ceil")), { row })[0];
    expectValues(out, { 1, 2, 2, 2 }, 0, "round_prefer_ceil");
    out = run(makeNode(OpType::Resize, resize({ 1, 4 }, "nearest", "asymmetric", "round_prefer_floor")), { row })[0];
    expectValues(out, { 1, 1, 2, 2 }, 0, "round_prefer_floor");
    out = run(makeNode(OpType::Resize, resize({ 1, 4 }, "nearest", "asymmetric", "ceil")), { row })[0];
    expectValues(out, { 1, 2, 2, 2 }, 0, "ceil");
    expectError(
        [&] {
            (void)run(makeNode(OpType::Resize, resize({ 2, 2 }, "cubic", "half_pixel")), { x });
        },
        "mode 'cubic'");
    expectError([&] { (void)run(makeNode(OpType::Resize, { { "mode", std::string("linear") } }), { x }); }, "sizes");
}

TEST_F(IndexKernel, GatherShapesAndNegativeIndices)
{
    const auto data = floats({ 3, 2 }, { 1, 2, 3, 4, 5, 6 });
    auto out = run(makeNode(OpType::Gather), { data, ints({ 2, 2 }, { 0, -1, 1, 0 }) })[0];
    EXPECT_EQ(out.shape(), (Shape { 2, 2, 2 }));
    expectValues(out, { 1, 2, 5, 6, 3, 4, 1, 2 }, 0, "axis 0");
    out = run(makeNode(OpType::Gather, { { "axis", std::int64_t { -1 } } }), { data, ints({ 1 }, { 1 }) })[0];
    EXPECT_EQ(out.shape(), (Shape { 3, 1 }));
    expectValues(out, { 2, 4, 6 }, 0, "axis -1");
    out = run(makeNode(OpType::Gather), { ints({ 3, 2 }, { 1, 2, 3, 4, 5, 6 }), ints({}, { 2 }) })[0];
    EXPECT_EQ(out.shape(), (Shape { 2 }));
    EXPECT_EQ(out.dtype(), DType::I64);
    expectValues(out, { 5, 6 }, 0, "i64 data, scalar index");
    expectError([&] { (void)run(makeNode(OpType::Gather), { data, ints({ 2 }, { 0, 3 }) }); }, "index 3");
    expectError([&] { (void)run(makeNode(OpType::Gather), { data, ints({ 1 }, { -4 }) }); }, "index -4");
}

TEST_F(IndexKernel, ScatterNDWritesRowsAndElements)
{
    auto out = run(makeNode(OpType::ScatterND),
        { iota({ 8 }), ints({ 4, 1 }, { 4, 3, 1, 7 }), floats({ 4 }, { 9, 10, 11, 12 }) })[0];
    expectValues(out, { 1, 11, 3, 10, 9, 6, 7, 12 }, 0, "ONNX example");
    const auto data = iota({ 2, 3 });
    out = run(makeNode(OpType::ScatterND), { data, ints({ 1, 1 }, { 1 }), floats({ 1, 3 }, { 7, 8, 9 }) })[0];
    expectValues(out, { 1, 2, 3, 7, 8, 9 }, 0, "row");
    out = run(makeNode(OpType::ScatterND), { data, ints({ 2, 2 }, { 0, 2, -1, 0 }), floats({ 2 }, { 10, 20 }) })[0];
    expectValues(out, { 1, 2, 10, 20, 5, 6 }, 0, "elements, negative index");
    expectValues(data, { 1, 2, 3, 4, 5, 6 }, 0, "data untouched");
    expectError(
        [&] {
            (void)run(makeNode(OpType::ScatterND), { data, ints({ 1, 1 }, { 2 }), floats({ 1, 3 }, { 0, 0, 0 }) });
        },
        "index 2");
    expectError(
        [&] {
            (void)run(makeNode(OpType::ScatterND), { data, ints({ 1, 1 }, { 0 }), floats({ 1, 2 }, { 0, 0 }) });
        },
        "updates must be (1, 3)");
}

TEST_F(IndexKernel, TopKValuesIndicesAndTies)
{
    const auto x = floats({ 2, 5 }, { 3, 1, 4, 1, 5, 9, 2, 6, 5, 3 });
    auto out = run(makeNode(OpType::TopK, { { "k", std::int64_t { 3 } } }), { x });
    ASSERT_EQ(out.size(), 2U);
    EXPECT_EQ(out[0].shape(), (Shape { 2, 3 }));
    EXPECT_EQ(out[1].dtype(), DType::I64);
    expectValues(out[0], { 5, 4, 3, 9, 6, 5 }, 0, "largest values");
    expectValues(out[1], { 4, 2, 0, 0, 2, 3 }, 0, "largest indices");
    out = run(makeNode(OpType::TopK, { { "k", std::int64_t { 2 } }, { "largest", std::int64_t { 0 } } }), { x });
    expectValues(out[0], { 1, 1, 2, 3 }, 0, "smallest values");
    expectValues(out[1], { 1, 3, 1, 4 }, 0, "smallest indices, ties lower first");
    out = run(makeNode(OpType::TopK, { { "k", std::int64_t { 1 } }, { "axis", std::int64_t { 0 } } }),
        { floats({ 2, 3 }, { 1, 7, 5, 4, 2, 5 }) });
    EXPECT_EQ(out[0].shape(), (Shape { 1, 3 }));
    expectValues(out[0], { 4, 7, 5 }, 0, "axis 0 values");
    expectValues(out[1], { 1, 0, 0 }, 0, "axis 0 indices");
    out = run(makeNode(OpType::TopK), { x, ints({ 1 }, { 2 }) }); // ONNX's k input
    expectValues(out[0], { 5, 4, 9, 6 }, 0, "k input");
    expectError([&] { (void)run(makeNode(OpType::TopK, { { "k", std::int64_t { 6 } } }), { x }); }, "k 6");
}

TEST_F(IndexKernel, EinsumEquations)
{
    const auto a = iota({ 2, 3 });
    auto out = run(makeNode(OpType::Einsum, { { "equation", std::string("ij->ji") } }), { a })[0];
    EXPECT_EQ(out.shape(), (Shape { 3, 2 }));
    expectValues(out, { 1, 4, 2, 5, 3, 6 }, 0, "transpose");
    out = run(makeNode(OpType::Einsum, { { "equation", std::string("ij->") } }), { a })[0];
    EXPECT_TRUE(out.shape().empty());
    expectValues(out, { 21 }, 0, "sum");
    const auto b = iota({ 3, 2 });
    out = run(makeNode(OpType::Einsum, { { "equation", std::string("ij,jk") } }), { a, b })[0]; // implicit "ik"
    expectValues(out, { 22, 28, 49, 64 }, 1e-5, "matmul");
    out = run(makeNode(OpType::Einsum, { { "equation", std::string("ij, jk -> ki") } }), { a, b })[0];
    expectValues(out, { 22, 49, 28, 64 }, 1e-5, "matmul, permuted output");
    out = run(makeNode(OpType::Einsum, { { "equation", std::string("ba,ca") } }), { a, iota({ 1, 3 }) })[0];
    EXPECT_EQ(out.shape(), (Shape { 2, 1 })); // implicit output "bc"
    expectValues(out, { 14, 32 }, 1e-5, "implicit alphabetical output");
    out =
        run(makeNode(OpType::Einsum, { { "equation", std::string("ij,j->j") } }), { a, floats({ 3 }, { 1, 2, 3 }) })[0];
    expectValues(out, { 5, 14, 27 }, 1e-5, "summed-out letter");
    const auto eq = [&](std::string e) {
        return [this, a, e] { (void)run(makeNode(OpType::Einsum, { { "equation", e } }), { a }); };
    };
    expectError(eq("...j->j"), "ellipsis");
    expectError(eq("ii->i"), "repeats");
    expectError(eq("ij->k"), "output letter 'k'");
    expectError(eq("ijk->i"), "has shape");
    expectError(
        [&] {
            (void)run(makeNode(OpType::Einsum, { { "equation", std::string("ij,jk->ik") } }), { a, a });
        },
        "letter 'j' has sizes");
}

// ---- Forward values against PyTorch ----

TEST_F(IndexKernelTorch, PoolingMatchesTorch)
{
    if (!haveTorch())
        GTEST_SKIP() << "no PyTorch at /usr/bin/python3";
    struct PoolCase
    {
        Shape kernel, strides, pads; // pads symmetric (torch's padding)
        Shape dilations;
        std::int64_t ceil, includePad;
    };
    const std::vector<PoolCase> cases { { { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1 }, 1, 1 },
        { { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1 }, 1, 0 }, { { 2, 2 }, { 2, 2 }, { 0, 0 }, { 1, 1 }, 1, 1 },
        { { 3, 2 }, { 2, 3 }, { 1, 1 }, { 1, 1 }, 1, 1 }, { { 3, 2 }, { 2, 3 }, { 1, 0 }, { 1, 1 }, 1, 0 },
        { { 4, 4 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, 1, 1 }, { { 4, 3 }, { 3, 2 }, { 2, 1 }, { 1, 1 }, 0, 1 },
        { { 3, 3 }, { 2, 2 }, { 1, 1 }, { 2, 1 }, 1, 0 }, { { 2, 3 }, { 3, 2 }, { 1, 1 }, { 2, 2 }, 1, 0 } };
    const auto x = random({ 2, 2, 7, 8 }, -2.0F, 2.0F);
    std::string script = "x = " + pyTensor(x) + "\n";
    for (const auto& c : cases) {
        const auto tuple = [](const Shape& s) {
            return "(" + std::to_string(s[0]) + ", " + std::to_string(s[1]) + ")";
        };
        const auto common = tuple(c.kernel) + ", " + tuple(c.strides) + ", " + tuple(c.pads) + ", ceil_mode=";
        const auto ceil = c.ceil ? std::string("True") : std::string("False");
        if (c.dilations == Shape { 1, 1 })
            script += "out(F.avg_pool2d(x, " + common + ceil
                + ", count_include_pad=" + (c.includePad ? "True" : "False") + "))\n";
        script += "out(F.max_pool2d(x, " + tuple(c.kernel) + ", " + tuple(c.strides) + ", " + tuple(c.pads) + ", "
            + tuple(c.dilations) + ", ceil_mode=" + ceil + "))\n";
    }
    const auto ref = runTorch(script);
    std::size_t at = 0;
    for (const auto& c : cases) {
        const Shape pads { c.pads[0], c.pads[1], c.pads[0], c.pads[1] };
        const auto label = "kernel " + formatShape(c.kernel) + " strides " + formatShape(c.strides) + " pads "
            + formatShape(c.pads) + " dilations " + formatShape(c.dilations) + " ceil " + std::to_string(c.ceil)
            + " count_include_pad " + std::to_string(c.includePad);
        ASSERT_LT(at, ref.size());
        if (c.dilations == Shape { 1, 1 })
            expectTorch(run(makeNode(OpType::AvgPool, pool(c.kernel, c.strides, pads, c.ceil, c.includePad)), { x })[0],
                ref[at++], "AvgPool " + label);
        ASSERT_LT(at, ref.size());
        auto attrs = pool(c.kernel, c.strides, pads, c.ceil);
        attrs["dilations"] = c.dilations;
        expectTorch(run(makeNode(OpType::MaxPool, attrs), { x })[0], ref[at++], "MaxPool " + label);
    }
}

TEST_F(IndexKernelTorch, PadMatchesTorch)
{
    if (!haveTorch())
        GTEST_SKIP() << "no PyTorch at /usr/bin/python3";
    const auto x = random({ 1, 2, 4, 5 });
    // torch's (left, right, top, bottom) and ONNX's (begins, ends) over (N, C, H, W).
    struct PadCase
    {
        std::vector<std::int64_t> lrtb;
        std::string torchMode, onnxMode;
    };
    const std::vector<PadCase> cases { { { 2, 1, 1, 3 }, "reflect", "reflect" },
        { { 4, 0, 0, 3 }, "reflect", "reflect" }, { { 3, 0, 2, 1 }, "replicate", "edge" },
        { { -1, 2, 1, -2 }, "constant", "constant" }, { { 2, 2, 1, 1 }, "circular", "wrap" } };
    std::string script = "x = " + pyTensor(x) + "\n";
    for (const auto& c : cases) {
        const auto& p = c.lrtb;
        script += "out(F.pad(x, (" + std::to_string(p[0]) + ", " + std::to_string(p[1]) + ", " + std::to_string(p[2])
            + ", " + std::to_string(p[3]) + "), mode='" + c.torchMode + "'"
            + (c.torchMode == "constant" ? ", value=1.5" : "") + "))\n";
    }
    const auto ref = runTorch(script);
    ASSERT_EQ(ref.size(), cases.size());
    for (std::size_t i = 0; i < cases.size(); ++i) {
        const auto& p = cases[i].lrtb;
        const auto node = makeNode(OpType::Pad,
            { { "pads", Shape { 0, 0, p[2], p[0], 0, 0, p[3], p[1] } }, { "mode", cases[i].onnxMode },
                { "value", 1.5 } });
        expectTorch(run(node, { x })[0], ref[i], "Pad " + cases[i].onnxMode + " case " + std::to_string(i), 0);
    }
}

TEST_F(IndexKernelTorch, ResizeMatchesInterpolate)
{
    if (!haveTorch())
        GTEST_SKIP() << "no PyTorch at /usr/bin/python3";
    const auto x = random({ 2, 2, 5, 7 });
    const std::vector<Shape> sizes { { 9, 13 }, { 3, 4 }, { 5, 3 }, { 1, 1 }, { 12, 7 }, { 2, 11 } };
    std::string script = "x = " + pyTensor(x) + "\n";
    for (const auto& s : sizes) {
        const auto size = "size=(" + std::to_string(s[0]) + ", " + std::to_string(s[1]) + ")";
        script += "out(F.interpolate(x, " + size + ", mode='nearest'))\n";
        script += "out(F.interpolate(x, " + size + ", mode='nearest-exact'))\n";
        script += "out(F.interpolate(x, " + size + ", mode='bilinear', align_corners=False))\n";
        script += "out(F.interpolate(x, " + size + ", mode='bilinear', align_corners=True))\n";
    }
    const auto ref = runTorch(script);
    ASSERT_EQ(ref.size(), 4 * sizes.size());
    for (std::size_t i = 0; i < sizes.size(); ++i) {
        const auto label = " to " + formatShape(sizes[i]);
        // What torch.onnx.export emits for each F.interpolate mode.
        expectTorch(run(makeNode(OpType::Resize, resize(sizes[i], "nearest", "asymmetric", "floor")), { x })[0],
            ref[4 * i], "nearest" + label, 0);
        expectTorch(
            run(makeNode(OpType::Resize, resize(sizes[i], "nearest", "half_pixel", "round_prefer_ceil")), { x })[0],
            ref[4 * i + 1], "nearest-exact" + label, 0);
        expectTorch(run(makeNode(OpType::Resize, resize(sizes[i], "linear", "half_pixel")), { x })[0], ref[4 * i + 2],
            "bilinear" + label);
        expectTorch(run(makeNode(OpType::Resize, resize(sizes[i], "linear", "align_corners")), { x })[0],
            ref[4 * i + 3], "bilinear align_corners" + label);
        if (sizes[i][0] > 1 && sizes[i][1] > 1) // pytorch_half_pixel differs from half_pixel only for size 1
            expectTorch(run(makeNode(OpType::Resize, resize(sizes[i], "linear", "pytorch_half_pixel")), { x })[0],
                ref[4 * i + 2], "bilinear pytorch_half_pixel" + label);
    }
}

TEST_F(IndexKernelTorch, GatherScatterTopKEinsumMatchTorch)
{
    if (!haveTorch())
        GTEST_SKIP() << "no PyTorch at /usr/bin/python3";
    const auto data = random({ 3, 4, 5 });
    const auto idx = ints({ 2, 3 }, { 0, -1, 2, 3, 1, 0 });
    const auto sIdx = ints({ 2, 2 }, { 2, 1, 0, 3 });
    const auto updates = random({ 2, 5 });
    const auto t = distinct({ 3, 6, 4 });
    const auto q = random({ 2, 3, 4, 5 });
    const auto k = random({ 2, 3, 6, 5 });
    const auto m = random({ 4, 3 });
    std::string script = "data = " + pyTensor(data) + "\nidx = " + pyTensor(idx) + "\nsidx = " + pyTensor(sIdx)
        + "\nupd = " + pyTensor(updates) + "\nt = " + pyTensor(t) + "\nq = " + pyTensor(q) + "\nk = " + pyTensor(k)
        + "\nm = " + pyTensor(m) + "\n";
    script += "out(torch.index_select(data, 1, idx.flatten() % 4).reshape(3, 2, 3, 5))\n";
    script += "s = data.clone()\ns[sidx[:, 0], sidx[:, 1]] = upd\nout(s)\n";
    script += "v, i = torch.topk(t, 3, dim=1)\nout(v)\nout(i)\n";
    script += "v, i = torch.topk(t, 2, dim=-1, largest=False)\nout(v)\nout(i)\n";
    script += "out(torch.einsum('bhid,bhjd->bhij', q, k))\n";
    script += "out(torch.einsum('bhid,ik->bhkd', q, m))\n";
    script += "out(torch.einsum('bhid->hdb', q))\n";
    const auto ref = runTorch(script);
    ASSERT_EQ(ref.size(), 9U);
    expectTorch(
        run(makeNode(OpType::Gather, { { "axis", std::int64_t { 1 } } }), { data, idx })[0], ref[0], "Gather", 0);
    expectTorch(run(makeNode(OpType::ScatterND), { data, sIdx, updates })[0], ref[1], "ScatterND", 0);
    auto top = run(makeNode(OpType::TopK, { { "k", std::int64_t { 3 } }, { "axis", std::int64_t { 1 } } }), { t });
    expectTorch(top[0], ref[2], "TopK values", 0);
    expectTorch(top[1], ref[3], "TopK indices", 0);
    top = run(makeNode(OpType::TopK, { { "k", std::int64_t { 2 } }, { "largest", std::int64_t { 0 } } }), { t });
    expectTorch(top[0], ref[4], "TopK smallest values", 0);
    expectTorch(top[1], ref[5], "TopK smallest indices", 0);
    const auto einsum = [&](const char* eq, std::vector<NdArray> in) {
        return run(makeNode(OpType::Einsum, { { "equation", std::string(eq) } }), std::move(in))[0];
    };
    expectTorch(einsum("bhid,bhjd->bhij", { q, k }), ref[6], "Einsum attention scores");
    expectTorch(einsum("bhid,ik->bhkd", { q, m }), ref[7], "Einsum mixed");
    expectTorch(einsum("bhid->hdb", { q }), ref[8], "Einsum one operand");
}
