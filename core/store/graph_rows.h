// Internal to the store: writing a Graph to, and reading it from, the model tables.
#pragma once

#include "graph/graph.h"
#include "store/sqlite.h"

namespace ps::store {

// Inside the caller's transaction: clears the model tables and writes `graph`.
void writeGraph(sql::Database& db, const Graph& graph);
// Reads the model tables back; throws ps::Error naming the file on missing or malformed rows.
Graph readGraph(sql::Database& db);

std::string attributesToJson(const Attributes& attrs);
Attributes attributesFromJson(std::string_view json);

} // namespace ps::store
