// Internal to the store: the project schema as a list of forward migrations.
#pragma once

#include <string_view>
#include <vector>

namespace ps::store {

struct Migration
{
    int toVersion; // PRAGMA user_version after this step
    std::string_view sql;
};

// Ordered by version; migration i takes a file from version i to i + 1.
const std::vector<Migration>& projectMigrations();

} // namespace ps::store
