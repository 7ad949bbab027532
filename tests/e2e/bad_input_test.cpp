// Bad input for every subcommand: malformed arguments, missing files, files of the wrong kind and
// numbers out of range. Each case must end within a timeout with a non-zero exit code and one line
// on stderr that names what was wrong (the option, the file) — never a crash, an abort, a stack
// trace or a hang. Table-driven: {args, expected substring}; placeholders name the fixtures.
#include "cli_support.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace fs = std::filesystem;

namespace {

using ps::e2e::readFile;
using ps::e2e::runShell;

using ps::e2e::quote;

// Protocol-buffer wire format, enough to write a tiny valid ONNX model without the onnx package.
struct Proto
{
    std::string bytes;
    Proto& varint(int field, std::uint64_t value)
    {
        key(field, 0);
        raw(value);
        return *this;
    }
    Proto& string(int field, const std::string& value)
    {
        key(field, 2);
        raw(value.size());
        bytes += value;
        return *this;
    }
    Proto& message(int field, const Proto& value)
    {
        return string(field, value.bytes);
    }

private:
    void key(int field, int wire)
    {
        raw(static_cast<std::uint64_t>(field) << 3 | static_cast<std::uint64_t>(wire));
    }
    void raw(std::uint64_t v)
    {
        do {
            const auto low = static_cast<char>(v & 0x7f);
            v >>= 7;
            bytes += static_cast<char>(low | (v ? 0x80 : 0));
        } while (v);
    }
};

// ModelProto { ir_version 8, opset 17, graph: y = Relu(x), x and y float (2, 4) }.
std::string tinyOnnx()
{
    const auto valueInfo = [](const std::string& name) {
        Proto shape;
        shape.message(1, Proto().varint(1, 2)).message(1, Proto().varint(1, 4));
        const auto tensor = Proto().varint(1, 1).message(2, shape);
        return Proto().string(1, name).message(2, Proto().message(1, tensor));
    };
    Proto graph;
    graph.message(1, Proto().string(1, "x").string(2, "y").string(3, "relu").string(4, "Relu"));
    graph.string(2, "tiny").message(11, valueInfo("x")).message(12, valueInfo("y"));
    return Proto().varint(1, 8).message(8, Proto().string(1, "").varint(2, 17)).message(7, graph).bytes;
}

struct Case
{
    std::string args; // after `pipestudio`; {proj}, {text}, ... are replaced by the fixtures' paths
    std::string expect; // a substring of stderr (case-sensitive)
};

// Every subcommand that opens a project, with the least arguments it needs besides the project.
const std::vector<std::pair<std::string, std::string>> kProjectCommands = {
    { "info", "{P}" },
    { "estimate", "{P}" },
    { "simulate", "{P} --stages 2" },
    { "plan", "{P} --stages 2" },
    { "search", "{P} --stages 2" },
    { "grouping", "{P} --stages 2 --global-batch 8" },
    { "maxbatch", "{P} --stages 2" },
    { "train", "{P} --steps 1" },
    { "trace", "{P} -o {out}/t.json" },
    { "compare", "{P}" },
    { "profile", "{P} --repeats 1 --warmup 0" },
    { "export", "{P} --plan 1 -o {out}/x" },
    { "import-trace", "{P} {text}" },
};

// File kinds that are not a project, and a fragment of the file's name the error must show.
const std::vector<std::pair<std::string, std::string>> kNotProjects = {
    { "{missing}", "missing.pstudio" },
    { "{text}", "notes.txt" },
    { "{rand}", "noise.bin" },
    { "{empty}", "empty.pstudio" },
    { "{onnx}", "tiny.onnx" },
    { "{dir}", "folder" },
    { "{sqlite}", "other.sqlite" },
};

std::vector<Case> fileKindCases()
{
    std::vector<Case> cases;
    for (const auto& [cmd, rest] : kProjectCommands) {
        for (const auto& [file, name] : kNotProjects) {
            auto args = rest;
            args.replace(args.find("{P}"), 3, file);
            cases.push_back({ cmd + " " + args, name });
        }
    }
    // A project or other non-ONNX where an ONNX model is expected.
    for (const auto& [file, name] : std::vector<std::pair<std::string, std::string>> { { "{proj}", "base.pstudio" },
             { "{missing}", "missing.pstudio" }, { "{text}", "notes.txt" }, { "{rand}", "noise.bin" },
             { "{empty}", "empty.pstudio" }, { "{dir}", "folder" } })
        cases.push_back({ "import " + file + " -o {out}/i.pstudio", name });
    // Traces that are not traces.
    for (const auto& [file, name] : std::vector<std::pair<std::string, std::string>> { { "{missing}", "missing" },
             { "{rand}", "noise.bin" }, { "{empty}", "empty.pstudio" }, { "{onnx}", "tiny.onnx" },
             { "{proj}", "base.pstudio" }, { "{dir}", "folder" }, { "{badjson}", "bad.json" } })
        cases.push_back({ "import-trace {copy} " + file, name });
    // Catalogs, clusters and data that are not what they claim.
    for (const auto& [file, name] : std::vector<std::pair<std::string, std::string>> {
             { "{text}", "notes.txt" }, { "{rand}", "noise.bin" }, { "{badjson}", "bad.json" } }) {
        cases.push_back({ "simulate {proj} --stages 2 --no-save --cluster " + file, name });
        cases.push_back({ "simulate {proj} --stages 2 --no-save --catalog " + file, name });
        cases.push_back({ "plan {proj} --stages 2 --no-save --catalog " + file, name });
        cases.push_back({ "grouping {proj} --global-batch 8 --stages 2 --cluster " + file, name });
        cases.push_back({ "maxmodel --host-ram 64GiB --catalog " + file, name });
    }
    cases.push_back({ "simulate {proj} --stages 2 --no-save --cluster {missing}", "missing" });
    cases.push_back({ "maxmodel --host-ram 64GiB --catalog {missing}", "missing" });
    cases.push_back({ "train {copy} --steps 1 --data {missing}", "missing" });
    cases.push_back({ "train {copy} --steps 1 --data {empty}", "empty.pstudio" });
    cases.push_back({ "train {copy} --steps 1 --data {dir}", "folder" });
    cases.push_back({ "train {copy} --steps 1 --data {onebyte} --data-format u16", "one.bin" });
    cases.push_back({ "gui {missing}", "missing" });
    return cases;
}

std::vector<Case> optionCases()
{
    return {
        // The command line itself.
        { "bogus", "bogus" },
        { "--bogus", "--bogus" },
        { "info", "project" },
        { "info {proj} extra", "extra" },
        { "info {proj} --bogus", "--bogus" },
        { "zoo extra", "extra" },
        { "devices --bogus", "--bogus" },
        { "demo --dir {text}", "notes.txt" },
        { "demo --dir {text}/sub", "notes.txt" },
        { "reproduce --paper bogus", "--paper" },
        { "reproduce --paper dawnpiper --quick -o {text}", "notes.txt" },
        // With a GUI a project opens a window (no error to check); headless renders read it.
        { PS_CLI_HAS_GUI ? "gui {text} --screenshot {out}/s.png" : "gui {proj}", PS_CLI_HAS_GUI ? "notes.txt" : "GUI" },
        { "gui --width 1", "--width" },
        { "gui --height 99999", "--height" },
        { "gui --view bogus", "--view" },
        { "gui --plan 0", "--plan" },
        // new
        { "new -o {out}/n.pstudio", "--model" },
        { "new -m gpt2-tiny", "--output" },
        { "new -m bogus -o {out}/n.pstudio", "bogus" },
        { "new -m gpt2-tiny -o {proj}", "base.pstudio" },
        { "new -m gpt2-tiny -o {dir}", "folder" },
        { "new -m gpt2-tiny -o {missing}/sub/n.pstudio", "missing" },
        { "new -m gpt2-tiny -o {text}/n.pstudio", "notes.txt" },
        { "new -m gpt2-tiny -o {out}/n.pstudio --layers 0", "layers" },
        { "new -m gpt2-tiny -o {out}/n.pstudio --layers -1", "layers" },
        { "new -m gpt2-tiny -o {out}/n.pstudio --layers abc", "--layers" },
        { "new -m gpt2-tiny -o {out}/n.pstudio --layers 1e30", "--layers" },
        { "new -m gpt2-tiny -o {out}/n.pstudio --layers 99999999999", "layers" },
        { "new -m gpt2-tiny -o {out}/n.pstudio --hidden 0", "hidden" },
        { "new -m gpt2-tiny -o {out}/n.pstudio --hidden -64", "hidden" },
        { "new -m gpt2-tiny -o {out}/n.pstudio --hidden 99999999999", "hidden" },
        { "new -m gpt2-tiny -o {out}/n.pstudio --heads 0", "heads" },
        { "new -m gpt2-tiny -o {out}/n.pstudio --heads 7", "heads" },
        { "new -m gpt2-tiny -o {out}/n.pstudio --head-dim -1", "head" },
        { "new -m gpt2-tiny -o {out}/n.pstudio --ffn 0", "ffn" },
        { "new -m gpt2-tiny -o {out}/n.pstudio --seq 0", "seq" },
        { "new -m gpt2-tiny -o {out}/n.pstudio --seq 99999999999", "seq" },
        { "new -m gpt2-tiny -o {out}/n.pstudio --vocab 0", "vocab" },
        { "new -m gpt2-tiny -o {out}/n.pstudio --vocab 99999999999999", "vocab" },
        { "new -m gpt2-tiny -o {out}/n.pstudio --max-positions -5", "position" },
        { "new -m gpt2-tiny -o {out}/n.pstudio --micro-batch 0", "micro-batch" },
        { "new -m gpt2-tiny -o {out}/n.pstudio --micro-batch 99999999999999", "micro-batch" },
        { "new -m gpt2-tiny -o {out}/n.pstudio --dropout 2", "dropout" },
        { "new -m gpt2-tiny -o {out}/n.pstudio --dropout -0.5", "dropout" },
        { "new -m gpt2-tiny -o {out}/n.pstudio --dropout nan", "dropout" },
        { "new -m t5-small -o {out}/n.pstudio --decoder-layers -1", "decoder" },
        { "new -m t5-small -o {out}/n.pstudio --decoder-seq 0", "decoder" },
        { "new -m mlp -o {out}/n.pstudio --layers 0", "layers" },
        // import
        { "import {onnx}", "--output" },
        { "import {onnx} -o {out}/i.pstudio --batch 0", "--batch" },
        { "import {onnx} -o {out}/i.pstudio --seq -1", "--seq" },
        { "import {onnx} -o {out}/i.pstudio --loss hinge", "--loss" },
        { "import {onnx} -o {out}/i.pstudio --labels-shape 2", "--labels-shape" },
        { "import {onnx} -o {out}/i.pstudio --loss mse --labels-shape 9,9", "labels shape (9, 9)" },
        { "import {onnx} -o {out}/i.pstudio --loss mse --labels-shape 2,x", "--labels-shape" },
        { "import {onnx} -o {out}/i.pstudio --loss mse --labels-shape 0,4", "positive" },
        { "import {onnx} -o {proj}", "base.pstudio" },
        // estimate
        { "estimate {proj} --device bogus", "bogus" },
        { "estimate {proj} --micro-batch 0", "--micro-batch" },
        { "estimate {proj} --micro-batch 1e30", "micro-batch" },
        { "estimate {proj} --optimizer bogus", "bogus" },
        // simulate
        { "simulate {proj} --stages 0", "--stages" },
        { "simulate {proj} --stages -2", "--stages" },
        { "simulate {proj} --stages 4000 --no-save", "stages" },
        { "simulate {proj} --stages 999999", "--stages" },
        { "simulate {proj} --stages 2 --micro-batches 0", "--micro-batches" },
        { "simulate {proj} --stages 2 --micro-batch 0 --no-save", "micro-batch" },
        { "simulate {proj} --stages 2 --micro-batch -4 --no-save", "micro-batch" },
        { "simulate {proj} --stages 2 --micro-batch 1e30 --no-save", "micro-batch" },
        { "simulate {proj} --stages 2 --micro-batch nan --no-save", "micro-batch" },
        { "simulate {proj} --stages 2 --cuts abc --no-save", "cuts" },
        { "simulate {proj} --stages 3 --cuts 9,4 --no-save", "cuts" },
        { "simulate {proj} --stages 2 --cuts 999999 --no-save", "cuts" },
        { "simulate {proj} --stages 3 --cuts 4 --no-save", "cuts" },
        { "simulate {proj} --stages 2 --cuts -3 --no-save", "cuts" },
        { "simulate {proj} --stages 2 --schedule bogus --no-save", "bogus" },
        { "simulate {proj} --stages 2 --schedule kfkb:0 --no-save", "kfkb" },
        { "simulate {proj} --stages 2 --schedule kfkb:x --no-save", "kfkb" },
        { "simulate {proj} --stages 2 --schedule interleaved:0 --no-save", "interleaved" },
        { "simulate {proj} --stages 2 --schedule interleaved:99999 --no-save", "interleaved" },
        { "simulate {proj} --stages 2 --devices-per-node 0 --no-save", "devices-per-node" },
        { "simulate {proj} --stages 2 --devices-per-node -1 --no-save", "devices-per-node" },
        { "simulate {proj} --stages 2 --device bogus --no-save", "bogus" },
        { "simulate {proj} --stages 2 --optimizer bogus --no-save", "bogus" },
        { "simulate {proj} --stages 2 --trace {missing}/t.json --no-save", "missing" },
        { "simulate {proj} --stages 2 --csv {dir} --no-save", "folder" },
        // plan
        { "plan {proj} --stages 0", "--stages" },
        { "plan {proj} --stages 1000 --no-save", "stages" },
        { "plan {proj} --stages 2000", "--stages" },
        { "plan {proj} --micro-batches 0", "--micro-batches" },
        { "plan {proj} --micro-batch -3 --no-save", "micro-batch" },
        { "plan {proj} --micro-batch 1e30 --no-save", "micro-batch" },
        { "plan {proj} --memory-limit -5GiB --no-save", "--memory-limit" },
        { "plan {proj} --memory-limit 0 --no-save", "--memory-limit" },
        { "plan {proj} --memory-limit abc --no-save", "--memory-limit" },
        { "plan {proj} --memory-limit 12XB --no-save", "--memory-limit" },
        { "plan {proj} --memory-limit 1e30 --no-save", "--memory-limit" },
        { "plan {proj} --memory-limit nan --no-save", "--memory-limit" },
        { "plan {proj} --memory-limit inf --no-save", "--memory-limit" },
        { "plan {proj} --algo bogus --no-save", "bogus" },
        { "plan {proj} --algo , --no-save", "--algo" },
        { "plan {proj} --schedule kfkb:99 --no-save", "kfkb" },
        { "plan {proj} --schedule ftpipe-async:0 --no-save", "ftpipe" },
        { "plan {proj} --device bogus --no-save", "bogus" },
        { "plan {proj} --optimizer bogus --no-save", "bogus" },
        // search
        { "search {proj} --schedules bogus --no-save", "bogus" },
        { "search {proj} --schedules , --no-save", "--schedules" },
        { "search {proj} --micro-batch-sizes abc --no-save", "--micro-batch-sizes" },
        { "search {proj} --micro-batch-sizes 0 --no-save", "--micro-batch-sizes" },
        { "search {proj} --micro-batch-sizes 1e30 --no-save", "micro-batch" },
        { "search {proj} --global-batch -1 --no-save", "--global-batch" },
        { "search {proj} --global-batch nan --no-save", "--global-batch" },
        { "search {proj} --global-batch 1e30 --no-save", "global" },
        { "search {proj} --top 0", "--top" },
        { "search {proj} --save -1", "--save" },
        { "search {proj} --stages 0", "--stages" },
        // maxbatch
        { "maxbatch {proj} --upper-limit 0", "--upper-limit" },
        { "maxbatch {proj} --memory-limit 0", "--memory-limit" },
        { "maxbatch {proj} --memory-limit 1e30", "--memory-limit" },
        { "maxbatch {proj} --algo bogus", "bogus" },
        { "maxbatch {proj} --stages 0", "--stages" },
        { "maxbatch {proj} --micro-batches 0", "--micro-batches" },
        // grouping
        { "grouping {proj} --stages 2", "--global-batch" },
        { "grouping {proj} --stages 2 --global-batch 0", "--global-batch" },
        { "grouping {proj} --stages 2 --global-batch -8", "--global-batch" },
        { "grouping {proj} --stages 2 --global-batch 1e30", "global" },
        { "grouping {proj} --stages 2 --global-batch nan", "--global-batch" },
        { "grouping {proj} --stages 0 --global-batch 8", "--stages" },
        { "grouping {proj} --stages 500 --global-batch 8", "stages" },
        { "grouping {proj} --stages 2 --global-batch 8 --max-k 0", "--max-k" },
        { "grouping {proj} --stages 2 --global-batch 8 --group-batch -1", "--group-batch" },
        { "grouping {proj} --stages 2 --global-batch 8 --preempt abc", "--preempt" },
        { "grouping {proj} --stages 2 --global-batch 8 --preempt 60,2,0.5", "--preempt" },
        { "grouping {proj} --stages 2 --global-batch 8 --interval 0", "--interval" },
        { "grouping {proj} --stages 2 --global-batch 8 --iterations -1", "--iterations" },
        { "grouping {proj} --stages 2 --global-batch 8 --memory-limit -1", "--memory-limit" },
        { "grouping {proj} --stages 2 --global-batch 8 --algo bogus", "bogus" },
        // maxmodel
        { "maxmodel", "--host-ram" },
        { "maxmodel --host-ram -1", "--host-ram" },
        { "maxmodel --host-ram 0", "--host-ram" },
        { "maxmodel --host-ram abc", "--host-ram" },
        { "maxmodel --host-ram 1e30", "--host-ram" },
        { "maxmodel --host-ram 64GiB --gpus 0", "--gpus" },
        { "maxmodel --host-ram 64GiB --batch -1", "--batch" },
        { "maxmodel --host-ram 64GiB --seq-len 0", "--seq-len" },
        { "maxmodel --host-ram 64GiB --chunk-elements 0", "--chunk-elements" },
        { "maxmodel --host-ram 64GiB --device bogus", "bogus" },
        { "maxmodel --host-ram 64GiB --cpu-adam-bandwidth 0", "--cpu-adam-bandwidth" },
        { "maxmodel --host-ram 64GiB --cpu-adam-bandwidth abc", "--cpu-adam-bandwidth" },
        { "maxmodel --host-ram 64GiB --min-tflops -1", "--min-tflops" },
        // train
        { "train {copy} --steps 0", "--steps" },
        { "train {copy} --steps -1", "--steps" },
        { "train {copy} --steps abc", "--steps" },
        { "train {copy} --steps 1 --stages 0", "--stages" },
        { "train {copy} --steps 1 --micro-batches 0", "--micro-batches" },
        { "train {copy} --steps 1 --micro-batch 0", "--micro-batch" },
        { "train {copy} --steps 1 --micro-batch 99999999", "micro-batch" },
        { "train {copy} --steps 1 --accumulate 0", "--accumulate" },
        { "train {copy} --steps 1 --devices cpu:0", "cpu:0" },
        { "train {copy} --steps 1 --devices cpu:abc", "cpu:abc" },
        { "train {copy} --steps 1 --devices cpu:1000", "cpu:1000" },
        { "train {copy} --steps 1 --devices gpu", "gpu" },
        { "train {copy} --steps 1 --devices cpu:2 --stages 1000", "stages" },
        { "train {copy} --steps 1 --memory -1", "-memory" },
        { "train {copy} --steps 1 --memory abc", "-memory" },
        { "train {copy} --steps 1 --memory 1e30", "-memory" },
        { "train {copy} --steps 1 --memory 1KiB", "cpu" },
        { "train {copy} --steps 1 --schedule bogus", "bogus" },
        { "train {copy} --steps 1 --devices cpu:2 --schedule interleaved:0", "interleaved" },
        { "train {copy} --steps 1 --plan 999", "no stored plans" },
        { "train {copy} --steps 1 --plan best", "plan" },
        { "train {copy} --steps 1 --plan abc", "abc" },
        { "train {copy} --steps 1 --resume", "checkpoint" },
        { "train {copy} --steps 1 --data-format bogus", "bogus" },
        { "train {copy} --steps 1 --data {text} --data-format u32 --vocab 0", "notes.txt" },
        { "train {copy} --steps 1 --data-format random --vocab -5", "--vocab" },
        { "train {copy} --steps 1 --data-format random --vocab 99999999999", "vocab" },
        { "train {copy} --steps 1 --optimizer bogus", "bogus" },
        { "train {copy} --steps 1 --lr nan", "--lr" },
        { "train {copy} --steps 1 --lr -1", "--lr" },
        { "train {copy} --steps 1 --weight-decay -1", "--weight-decay" },
        { "train {copy} --steps 1 --beta2 2", "--beta2" },
        { "train {copy} --steps 1 --checkpoint-every -1", "--checkpoint-every" },
        { "train {copy} --steps 1 --warmup -1", "--warmup" },
        { "train {copy} --steps 1 --algo bogus --devices cpu:2", "bogus" },
        { "train {copy} --steps 1 --trace-iterations -1", "--trace-iterations" },
        { "train {copy} --steps 1 --trace-every -1", "--trace-every" },
        { "train {copy} --steps 1 --devices cpu:2 --link-bandwidth 0", "--link-bandwidth" },
        { "train {copy} --steps 1 --devices cpu:2 --link-bandwidth abc", "--link-bandwidth" },
        { "train {copy} --steps 1 --devices cpu:2 --link-latency -1", "--link-latency" },
        { "train {copy} --steps 1 --devices cpu:2 --preempt 1,1,1", "--preempt" },
        { "train {copy} --steps 1 --devices cpu:2 --link-latency 1", "--link-bandwidth" },
        { "train {copy} --steps 1 --chunks --chunk-elements 0", "--chunk-elements" },
        { "train {copy} --steps 1 --devices cpu:2 --schedule kfkb:auto --adapt-every 0", "--adapt-every" },
        // trace, compare
        { "trace {copy}", "--output" },
        { "trace {copy} -o {out}/t.json", "no training runs" },
        { "trace {copy} -o {out}/t.json --run 999", "999" },
        { "trace {copy} -o {out}/t.json --run -1", "--run" },
        { "trace {copy} -o {out}/t.json --iteration -3", "--iteration" },
        { "compare {copy}", "no training runs" },
        { "compare {copy} --run 999", "999" },
        { "compare {copy} --run -1", "--run" },
        // profile
        { "profile {copy} --device gpu", "gpu" },
        { "profile {copy} --repeats 0", "--repeats" },
        { "profile {copy} --warmup -1", "--warmup" },
        { "profile {copy} --threads -1", "--threads" },
        { "profile {copy} --micro-batches 0", "micro-batch" },
        { "profile {copy} --micro-batches 1,2,3", "micro-batch" },
        // export
        { "export {copy} -o {out}/x", "--plan" },
        { "export {copy} --plan 999 -o {out}/x", "999" },
        { "export {copy} --plan abc -o {out}/x", "abc" },
        { "export {copy} --plan 1 --format bogus -o {out}/x", "bogus" },
        { "export {copy} --plan 1", "--output" },
        // import-trace
        { "import-trace {copy} {trace} --micro-batch 0", "--micro-batch" },
        { "import-trace {copy}", "trace" },
    };
}

struct Outcome
{
    int exitCode = -1;
    std::string err;
};

// Runs one case under `timeout 60` with stderr captured on its own.
Outcome runCase(const std::string& args, const fs::path& errFile)
{
    const auto r = runShell("( timeout -k 5 60 " + std::string(PS_CLI_PATH) + " " + args + " >/dev/null 2>"
        + quote(errFile) + " </dev/null )");
    return { r.exitCode, readFile(errFile) };
}

std::vector<std::string> lines(const std::string& text)
{
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string l; std::getline(in, l);) {
        if (!l.empty())
            out.push_back(l);
    }
    return out;
}

// Empty when the outcome is what a user should see; else why not.
std::string verdict(const Outcome& o, const std::string& expect)
{
    if (o.exitCode == 124 || o.exitCode == 137)
        return "timed out (hang)";
    if (o.exitCode == 0)
        return "exit code 0";
    if (o.exitCode < 0 || o.exitCode > 125)
        return "killed by a signal (exit " + std::to_string(o.exitCode) + ")";
    for (const char* bad : { "terminate called", "Sanitizer", "runtime error:", "Aborted", "Segmentation",
             "core dumped", "what():", "Stack trace", "#0 " }) {
        if (o.err.find(bad) != std::string::npos)
            return std::string("stderr shows '") + bad + "'";
    }
    const auto l = lines(o.err);
    if (l.size() != 1)
        return std::to_string(l.size()) + " lines on stderr";
    if (l.front().find(expect) == std::string::npos)
        return "stderr lacks '" + expect + "'";
    return {};
}

class BadInput : public ps::e2e::ScratchTest
{
protected:
    void makeFixtures()
    {
        const auto cli = std::string(PS_CLI_PATH) + " ";
        const auto base = m_dir / "base.pstudio";
        const auto made = runShell(cli + "new -m gpt2-tiny -o " + quote(base));
        ASSERT_EQ(made.exitCode, 0) << made.output;
        std::ofstream(m_dir / "notes.txt") << "these are notes, not a project\n";
        std::ofstream(m_dir / "bad.json") << "{\"devices\": [1, 2, ";
        std::ofstream(m_dir / "empty.pstudio") << "";
        std::ofstream(m_dir / "one.bin") << "x";
        std::mt19937 rng(12345);
        std::string noise(4096, '\0');
        for (auto& c : noise)
            c = static_cast<char>(rng());
        std::ofstream(m_dir / "noise.bin", std::ios::binary) << noise;
        std::ofstream(m_dir / "tiny.onnx", std::ios::binary) << tinyOnnx();
        fs::create_directories(m_dir / "folder");
        fs::create_directories(m_dir / "out");
        sqlite3* db = nullptr; // an SQLite database that is not a project
        ASSERT_EQ(sqlite3_open((m_dir / "other.sqlite").c_str(), &db), SQLITE_OK);
        ASSERT_EQ(
            sqlite3_exec(db, "CREATE TABLE t(x); INSERT INTO t VALUES (1);", nullptr, nullptr, nullptr), SQLITE_OK);
        sqlite3_close(db);
        std::ofstream(m_dir / "trace.json") << R"({"traceEvents": []})";
        m_fixtures = { { "{proj}", base }, { "{missing}", m_dir / "missing.pstudio" },
            { "{text}", m_dir / "notes.txt" }, { "{rand}", m_dir / "noise.bin" },
            { "{empty}", m_dir / "empty.pstudio" }, { "{onnx}", m_dir / "tiny.onnx" }, { "{dir}", m_dir / "folder" },
            { "{badjson}", m_dir / "bad.json" }, { "{onebyte}", m_dir / "one.bin" },
            { "{sqlite}", m_dir / "other.sqlite" }, { "{trace}", m_dir / "trace.json" } };
    }

    // A case's arguments with the fixtures' paths; {copy} is a fresh copy of the project of its own.
    std::string expand(std::string args, std::size_t index)
    {
        const auto out = m_dir / "out" / std::to_string(index); // outputs of its own
        fs::create_directories(out);
        for (auto at = args.find("{out}"); at != std::string::npos; at = args.find("{out}"))
            args.replace(at, 5, quote(out));
        if (args.find("{copy}") != std::string::npos) {
            const auto copy = m_dir / ("copy" + std::to_string(index) + ".pstudio");
            fs::copy_file(m_fixtures.at("{proj}"), copy, fs::copy_options::overwrite_existing);
            args.replace(args.find("{copy}"), 6, quote(copy));
        }
        for (const auto& [key, path] : m_fixtures) {
            for (auto at = args.find(key); at != std::string::npos; at = args.find(key))
                args.replace(at, key.size(), quote(path));
        }
        return args;
    }

    // Runs the cases on two workers; returns the failures, one line each.
    std::vector<std::string> runAll(const std::vector<Case>& cases)
    {
        std::vector<std::string> args(cases.size());
        for (std::size_t i = 0; i < cases.size(); ++i)
            args[i] = expand(cases[i].args, i);
        std::vector<std::string> failures;
        std::mutex mutex;
        std::atomic<std::size_t> next { 0 };
        const auto worker = [&] {
            for (auto i = next++; i < cases.size(); i = next++) {
                const auto o = runCase(args[i], m_dir / ("case" + std::to_string(i) + ".err"));
                const auto why = verdict(o, cases[i].expect);
                if (std::getenv("PS_E2E_VERBOSE")) { // every message, for reading them all
                    const std::lock_guard lock(mutex);
                    std::printf("%s\n    -> %s", cases[i].args.c_str(), o.err.c_str());
                }
                if (!why.empty()) {
                    const std::lock_guard lock(mutex);
                    failures.push_back("pipestudio " + cases[i].args + ": " + why + " [exit "
                        + std::to_string(o.exitCode) + "] stderr: " + o.err.substr(0, 600));
                }
            }
        };
        std::vector<std::thread> threads;
        for (int t = 0; t < 3; ++t)
            threads.emplace_back(worker);
        for (auto& t : threads)
            t.join();
        return failures;
    }

    std::map<std::string, fs::path> m_fixtures;
};

} // namespace

TEST_F(BadInput, TheFixtureOnnxIsAValidModel)
{
    makeFixtures();
    const auto r = ps::e2e::runCli("import " + quote(m_dir / "tiny.onnx") + " -o " + quote(m_dir / "ok.pstudio"));
    EXPECT_EQ(r.exitCode, 0) << r.output;
}

// An imported model trains only with a loss: without one `train` says how to attach it; with
// `--loss mse` it trains on generated inputs and says so.
TEST_F(BadInput, AnImportedModelTrainsOnceItHasALoss)
{
    makeFixtures();
    const auto bare = m_dir / "bare.pstudio";
    ASSERT_EQ(ps::e2e::runCli("import " + quote(m_dir / "tiny.onnx") + " -o " + quote(bare)).exitCode, 0);
    const auto refused = ps::e2e::runCli("train " + quote(bare) + " --steps 1");
    EXPECT_NE(refused.exitCode, 0);
    EXPECT_NE(refused.output.find("import --loss"), std::string::npos) << refused.output;
    const auto withLoss = m_dir / "mse.pstudio";
    const auto imported = ps::e2e::runCli("import " + quote(m_dir / "tiny.onnx") + " --loss mse -o " + quote(withLoss));
    ASSERT_EQ(imported.exitCode, 0) << imported.output;
    EXPECT_NE(imported.output.find("loss: mse on the output, labels input 'labels' (2, 4)"), std::string::npos)
        << imported.output;
    const auto trained = ps::e2e::runCli("train " + quote(withLoss) + " --steps 2");
    ASSERT_EQ(trained.exitCode, 0) << trained.output;
    EXPECT_NE(trained.output.find("generated inputs (x random N(0, 1), labels random N(0, 1))"), std::string::npos)
        << trained.output;
    EXPECT_NE(trained.output.find("samples/s"), std::string::npos) << trained.output;
}

// A language model whose vocabulary is under the text's 256 bytes: text is refused naming the fix,
// and random tokens, drawn from the model's own vocabulary, train.
TEST_F(BadInput, ASmallVocabularyModelTrainsOnRandomTokensAndTextSaysHow)
{
    const auto p = m_dir / "v200.pstudio";
    ASSERT_EQ(ps::e2e::runCli("new -m gpt2-tiny --layers 1 --hidden 32 --heads 2 --seq 16 --vocab 200 -o " + quote(p))
                  .exitCode,
        0);
    const auto text = ps::e2e::runCli("train " + quote(p) + " --steps 1");
    EXPECT_NE(text.exitCode, 0);
    EXPECT_NE(text.output.find("embedding has 200 rows: train on random tokens"), std::string::npos) << text.output;
    const auto random = ps::e2e::runCli("train " + quote(p) + " --steps 2 --data-format random");
    ASSERT_EQ(random.exitCode, 0) << random.output;
    EXPECT_NE(random.output.find("random tokens"), std::string::npos) << random.output;
}

TEST_F(BadInput, EveryCommandGivesOneLineNamingTheProblem)
{
    makeFixtures();
    auto cases = fileKindCases();
    const auto options = optionCases();
    cases.insert(cases.end(), options.begin(), options.end());
    const auto failures = runAll(cases);
    for (const auto& f : failures)
        ADD_FAILURE() << f;
    std::printf("[bad input] %zu cases, %zu failures\n", cases.size(), failures.size());
    EXPECT_GE(cases.size(), 300u);
}
