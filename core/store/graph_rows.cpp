#include "store/graph_rows.h"

#include "util/error.h"

#include <nlohmann/json.hpp>

namespace ps::store {
namespace {

    std::string outputsToText(const std::vector<TensorId>& outputs)
    {
        Shape ids;
        for (auto t : outputs)
            ids.push_back(t.value);
        return joinShape(ids);
    }

    void writeTensors(sql::Database& db, const Graph& graph)
    {
        sql::Statement st(
            db, "INSERT INTO tensors(id, name, kind, dtype, shape, data) VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
        for (const auto& t : graph.tensors()) {
            st.bind(1, std::int64_t { t.id.value }).bind(2, t.name).bind(3, toString(t.kind));
            st.bind(4, toString(t.dtype)).bind(5, joinShape(t.shape));
            if (t.data)
                st.bindBlob(6, *t.data);
            else
                st.bindNull(6);
            st.execute();
        }
    }

    void writeNodes(sql::Database& db, const Graph& graph)
    {
        sql::Statement node(db,
            "INSERT INTO nodes(id, name, op, opaque_type, scope, layer, attrs_json) "
            "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)");
        sql::Statement edge(db, "INSERT INTO edges(node_id, direction, slot, tensor_id) VALUES (?1, ?2, ?3, ?4)");
        for (const auto& n : graph.nodes()) {
            node.bind(1, std::int64_t { n.id.value }).bind(2, n.name).bind(3, toString(n.op)).bind(4, n.opaqueType);
            node.bind(5, n.scope).bind(6, std::int64_t { n.layer }).bind(7, attributesToJson(n.attrs)).execute();
            for (std::int64_t dir = 0; dir < 2; ++dir) {
                const auto& list = dir == 0 ? n.inputs : n.outputs;
                for (std::size_t slot = 0; slot < list.size(); ++slot) {
                    edge.bind(1, std::int64_t { n.id.value }).bind(2, dir).bind(3, static_cast<std::int64_t>(slot));
                    edge.bind(4, std::int64_t { list[slot].value }).execute();
                }
            }
        }
    }

    [[noreturn]] void malformed(const sql::Database& db, const std::string& what)
    {
        throw Error(db.path().string() + ": malformed project: " + what);
    }

    Tensor readTensorRow(const sql::Database& db, const sql::Statement& st, std::int64_t expectedId)
    {
        Tensor t;
        if (st.columnInt(0) != expectedId)
            malformed(db, "tensor ids are not dense (expected " + std::to_string(expectedId) + ")");
        t.name = st.columnText(1);
        const auto kind = parseTensorKind(st.columnText(2));
        const auto dtype = parseDType(st.columnText(3));
        if (!kind || !dtype)
            malformed(db, "tensor '" + t.name + "' has an unknown kind or dtype");
        t.kind = *kind;
        t.dtype = *dtype;
        t.shape = splitShape(st.columnText(4));
        if (!st.columnIsNull(5))
            t.data = std::make_shared<const std::vector<std::byte>>(st.columnBlob(5));
        return t;
    }

    void readTensors(sql::Database& db, Graph& graph)
    {
        sql::Statement st(db, "SELECT id, name, kind, dtype, shape, data FROM tensors ORDER BY id");
        for (std::int64_t expected = 0; st.step(); ++expected)
            graph.addTensor(readTensorRow(db, st, expected));
    }

    TensorId checkedTensor(const sql::Database& db, const Graph& graph, std::int64_t id, const Node& node)
    {
        if (id < 0 || static_cast<std::size_t>(id) >= graph.tensorCount())
            malformed(db, "node '" + node.name + "' refers to missing tensor #" + std::to_string(id));
        return TensorId(static_cast<std::uint32_t>(id));
    }

    std::vector<Node> readNodes(sql::Database& db)
    {
        std::vector<Node> nodes;
        sql::Statement st(db, "SELECT id, name, op, opaque_type, scope, layer, attrs_json FROM nodes ORDER BY id");
        while (st.step()) {
            Node n;
            if (st.columnInt(0) != static_cast<std::int64_t>(nodes.size()))
                malformed(db, "node ids are not dense");
            n.name = st.columnText(1);
            const auto op = parseOpType(st.columnText(2));
            if (!op)
                malformed(db, "node '" + n.name + "' has unknown op '" + st.columnText(2) + "'");
            n.op = *op;
            n.opaqueType = st.columnText(3);
            n.scope = st.columnText(4);
            n.layer = static_cast<std::int32_t>(st.columnInt(5));
            n.attrs = attributesFromJson(st.columnText(6));
            nodes.push_back(std::move(n));
        }
        return nodes;
    }

    void readEdges(sql::Database& db, const Graph& graph, std::vector<Node>& nodes)
    {
        sql::Statement st(
            db, "SELECT node_id, direction, slot, tensor_id FROM edges ORDER BY node_id, direction, slot");
        while (st.step()) {
            const auto nodeId = st.columnInt(0);
            if (nodeId < 0 || static_cast<std::size_t>(nodeId) >= nodes.size())
                malformed(db, "an edge refers to missing node #" + std::to_string(nodeId));
            auto& n = nodes[static_cast<std::size_t>(nodeId)];
            auto& list = st.columnInt(1) == 0 ? n.inputs : n.outputs;
            if (st.columnInt(2) != static_cast<std::int64_t>(list.size()))
                malformed(db, "node '" + n.name + "' has a gap in its input/output slots");
            list.push_back(checkedTensor(db, graph, st.columnInt(3), n));
        }
    }

} // namespace

std::string attributesToJson(const Attributes& attrs)
{
    nlohmann::json j = nlohmann::json::object();
    for (const auto& [key, value] : attrs)
        std::visit([&j, &k = key](const auto& v) { j[k] = v; }, value);
    return j.dump();
}

Attributes attributesFromJson(std::string_view text)
{
    const auto j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object())
        throw Error("attributes are not a JSON object: " + std::string(text.substr(0, 80)));
    Attributes attrs;
    for (const auto& [key, value] : j.items()) {
        if (value.is_number_integer())
            attrs[key] = value.get<std::int64_t>();
        else if (value.is_number())
            attrs[key] = value.get<double>();
        else if (value.is_string())
            attrs[key] = value.get<std::string>();
        else if (value.is_array())
            attrs[key] = value.get<std::vector<std::int64_t>>();
        else
            throw Error("attribute '" + key + "' has an unsupported JSON type");
    }
    return attrs;
}

void writeGraph(sql::Database& db, const Graph& graph)
{
    db.exec("DELETE FROM edges; DELETE FROM nodes; DELETE FROM tensors; DELETE FROM model;");
    const auto& info = graph.info();
    sql::Statement model(db,
        "INSERT INTO model(id, name, family, config_json, micro_batch, outputs) "
        "VALUES (1, ?1, ?2, ?3, ?4, ?5)");
    model.bind(1, info.name).bind(2, info.family).bind(3, info.configJson).bind(4, info.microBatch);
    model.bind(5, outputsToText(graph.outputs())).execute();
    writeTensors(db, graph);
    writeNodes(db, graph);
}

Graph readGraph(sql::Database& db)
{
    sql::Statement model(db, "SELECT name, family, config_json, micro_batch, outputs FROM model WHERE id = 1");
    if (!model.step())
        throw Error(db.path().string() + ": the project has no model yet");
    Graph graph(ModelInfo { model.columnText(0), model.columnText(1), model.columnText(2), model.columnInt(3) });
    const auto outputs = splitShape(model.columnText(4));
    readTensors(db, graph);
    auto nodes = readNodes(db);
    readEdges(db, graph, nodes);
    for (auto& n : nodes)
        graph.addNode(std::move(n));
    std::vector<TensorId> outs;
    for (auto id : outputs) {
        if (id < 0 || static_cast<std::size_t>(id) >= graph.tensorCount())
            malformed(db, "graph output #" + std::to_string(id) + " does not exist");
        outs.emplace_back(static_cast<std::uint32_t>(id));
    }
    graph.setOutputs(std::move(outs));
    return graph;
}

} // namespace ps::store
