#include "onnx/frequency_tables.h"

#include <deque>
#include <unordered_map>
#include <vector>

namespace ps::onnximport {
namespace {

    bool holdsFloats(int t)
    {
        using P = onnx::TensorProto;
        return t == P::FLOAT || t == P::DOUBLE || t == P::FLOAT16 || t == P::BFLOAT16;
    }

    // Ops whose outputs differ from run to run on the same inputs, or that run subgraphs.
    bool sameOnEveryRun(const std::string& op)
    {
        return !op.starts_with("Random") && op != "Dropout" && op != "Multinomial" && op != "Bernoulli" && op != "If"
            && op != "Loop" && op != "Scan";
    }

    // Every value the data cannot change once the sizes are bound. Nodes are taken to be in any
    // order: passes repeat until nothing joins (exported graphs are sorted, so one or two passes).
    std::set<std::string> staticValues(const onnx::GraphProto& g)
    {
        std::set<std::string> known;
        for (const auto& t : g.initializer())
            known.insert(t.name());
        for (bool grew = true; grew;) {
            grew = false;
            for (const auto& n : g.node()) {
                if (n.output_size() == 0 || known.contains(n.output(0)))
                    continue;
                const auto& op = n.op_type();
                bool isStatic = op == "Constant" || op == "Shape" || op == "Size";
                if (!isStatic && sameOnEveryRun(op)) {
                    isStatic = true;
                    for (const auto& in : n.input())
                        isStatic = isStatic && (in.empty() || known.contains(in));
                }
                if (isStatic) {
                    for (const auto& o : n.output())
                        known.insert(o);
                    grew = true;
                }
            }
        }
        return known;
    }

} // namespace

std::set<std::string> frequencyTables(const onnx::ModelProto& model)
{
    const auto& g = model.graph();
    const auto known = staticValues(g);
    std::unordered_map<std::string, std::vector<int>> readers;
    for (int i = 0; i < g.node_size(); ++i) {
        for (const auto& in : g.node(i).input())
            readers[in].push_back(i);
    }
    std::set<std::string> outputs;
    for (const auto& o : g.output())
        outputs.insert(o.name());
    // Candidates: float initializers and Constant nodes holding float tensors (torch's constant
    // folding turns a non-persistent buffer into one).
    std::vector<std::string> candidates;
    for (const auto& t : g.initializer()) {
        if (holdsFloats(t.data_type()) && t.dims_size() > 0)
            candidates.push_back(t.name());
    }
    for (const auto& n : g.node()) {
        if (n.op_type() != "Constant" || n.output_size() != 1)
            continue;
        for (const auto& a : n.attribute()) {
            if (a.name() == "value" && a.has_t() && holdsFloats(a.t().data_type()) && a.t().dims_size() > 0)
                candidates.push_back(n.output(0));
        }
    }
    std::set<std::string> tables;
    for (const auto& name : candidates) {
        // Follow the values computed from it through static nodes; a Sin or Cos ends a path.
        std::deque<std::string> open { name };
        std::set<std::string> seen { name };
        bool trig = false;
        bool meetsData = false;
        while (!open.empty() && !meetsData) {
            const auto value = open.front();
            open.pop_front();
            meetsData = outputs.contains(value);
            const auto it = readers.find(value);
            if (it == readers.end())
                continue;
            for (int i : it->second) {
                const auto& n = g.node(i);
                if (n.output_size() == 0 || !known.contains(n.output(0))) {
                    meetsData = true;
                    break;
                }
                if (n.op_type() == "Sin" || n.op_type() == "Cos") {
                    trig = true;
                    continue;
                }
                if (n.op_type() == "Shape" || n.op_type() == "Size")
                    continue; // its sizes, not its values
                for (const auto& o : n.output()) {
                    if (seen.insert(o).second)
                        open.push_back(o);
                }
            }
        }
        if (trig && !meetsData)
            tables.insert(name);
    }
    return tables;
}

} // namespace ps::onnximport
