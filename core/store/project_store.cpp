#include "store/project_store.h"

#include "graph/validate.h"
#include "ps/config.h"
#include "store/graph_rows.h"
#include "store/schema.h"
#include "store/sqlite.h"
#include "util/error.h"

#include <array>
#include <fstream>
#include <unistd.h>

namespace ps {
namespace {

    constexpr std::array<char, 16> kSqliteMagic = { 'S', 'Q', 'L', 'i', 't', 'e', ' ', 'f', 'o', 'r', 'm', 'a', 't',
        ' ', '3', '\0' };

    std::string quoted(const std::filesystem::path& path)
    {
        return "'" + path.string() + "'";
    }

    void checkSqliteHeader(const std::filesystem::path& path)
    {
        std::error_code ec;
        if (!std::filesystem::exists(path, ec))
            throw Error(quoted(path) + ": no such file");
        if (!std::filesystem::is_regular_file(path, ec))
            throw Error(quoted(path) + " is not a regular file");
        std::ifstream in(path, std::ios::binary);
        if (!in)
            throw Error(quoted(path) + ": cannot be read (permission denied?)");
        std::array<char, 16> header {};
        in.read(header.data(), header.size());
        if (in.gcount() != static_cast<std::streamsize>(header.size()) || header != kSqliteMagic)
            throw Error(quoted(path) + " is not a PipeStudio project: it is not an SQLite database");
    }

    void checkIdentity(sql::Database& db)
    {
        const auto& path = db.path();
        std::int64_t appId = 0;
        try {
            appId = db.queryInt("PRAGMA application_id");
        } catch (const Error& e) {
            throw Error(quoted(path) + " is not a readable PipeStudio project: " + e.what());
        }
        if (appId != kProjectApplicationId)
            throw Error(quoted(path) + " is an SQLite database but not a PipeStudio project (application_id "
                + std::to_string(appId) + ")");
        const auto version = db.queryInt("PRAGMA user_version");
        if (version > kProjectSchemaVersion)
            throw Error(quoted(path) + " was written by a newer PipeStudio (schema " + std::to_string(version)
                + "; this build reads up to " + std::to_string(kProjectSchemaVersion) + ")");
        if (version < 1)
            throw Error(
                quoted(path) + " is a damaged PipeStudio project (schema version " + std::to_string(version) + ")");
        sql::Statement check(db, "PRAGMA quick_check");
        if (check.step() && check.columnText(0) != "ok")
            throw Error(quoted(path) + " is corrupt: " + check.columnText(0));
    }

    void configure(sql::Database& db)
    {
        db.exec("PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;");
    }

    // Applies migrations from the file's version up to `target`, all in one transaction.
    void migrate(sql::Database& db, int target)
    {
        const auto current = static_cast<int>(db.queryInt("PRAGMA user_version"));
        if (current >= target)
            return;
        sql::Transaction tx(db);
        for (const auto& m : store::projectMigrations()) {
            if (m.toVersion > current && m.toVersion <= target) {
                db.exec(m.sql);
                db.exec("PRAGMA user_version = " + std::to_string(m.toVersion));
            }
        }
        tx.commit();
    }

    void writeMeta(sql::Database& db)
    {
        sql::Statement st(db, "INSERT OR REPLACE INTO meta(key, value) VALUES (?1, ?2)");
        st.bind(1, std::string_view("application")).bind(2, std::string_view("PipeStudio")).execute();
        st.bind(1, std::string_view("created_with")).bind(2, std::string_view(PS_VERSION_STRING)).execute();
    }

} // namespace

ProjectStore::ProjectStore(std::unique_ptr<sql::Database> db)
    : m_db(std::move(db))
{
}

ProjectStore::ProjectStore(ProjectStore&&) noexcept = default;
ProjectStore& ProjectStore::operator=(ProjectStore&&) noexcept = default;
ProjectStore::~ProjectStore() = default;

ProjectStore ProjectStore::create(const std::filesystem::path& path, int schemaVersion)
{
    std::error_code ec;
    if (std::filesystem::exists(path, ec))
        throw Error(quoted(path) + " already exists; choose another name or remove it first");
    auto db = std::make_unique<sql::Database>(path, sql::Database::Mode::Create);
    configure(*db);
    db->exec("PRAGMA application_id = " + std::to_string(kProjectApplicationId));
    migrate(*db, schemaVersion);
    writeMeta(*db);
    return ProjectStore(std::move(db));
}

ProjectStore ProjectStore::open(const std::filesystem::path& path, Access access)
{
    verifyProjectFile(path);
    const auto mode = access == Access::ReadOnly ? sql::Database::Mode::ReadOnly : sql::Database::Mode::ReadWrite;
    auto db = std::make_unique<sql::Database>(path, mode);
    if (access == Access::ReadWrite) {
        configure(*db);
        migrate(*db, kProjectSchemaVersion);
    }
    return ProjectStore(std::move(db));
}

const std::filesystem::path& ProjectStore::path() const
{
    return m_db->path();
}

int ProjectStore::schemaVersion() const
{
    return static_cast<int>(m_db->queryInt("PRAGMA user_version"));
}

bool ProjectStore::hasModel() const
{
    return m_db->queryInt("SELECT count(*) FROM model") > 0;
}

void ProjectStore::saveGraph(const Graph& graph)
{
    validateGraphOrThrow(graph);
    sql::Transaction tx(*m_db);
    store::writeGraph(*m_db, graph);
    tx.commit();
}

Graph ProjectStore::loadGraph() const
{
    auto graph = store::readGraph(*m_db);
    try {
        validateGraphOrThrow(graph);
    } catch (const Error& e) {
        throw Error(quoted(path()) + ": " + e.what());
    }
    return graph;
}

std::vector<std::string> ProjectStore::tableNames() const
{
    std::vector<std::string> names;
    sql::Statement st(*m_db, "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name");
    while (st.step())
        names.push_back(st.columnText(0));
    return names;
}

void verifyProjectFile(const std::filesystem::path& path)
{
    checkSqliteHeader(path);
    sql::Database db(path, sql::Database::Mode::ReadOnly);
    checkIdentity(db);
}

void writeNewProject(const std::filesystem::path& path, const Graph& graph, bool overwrite)
{
    std::error_code ec;
    if (!overwrite && std::filesystem::exists(path, ec))
        throw Error(quoted(path) + " already exists (use --force to replace it)");
    validateGraphOrThrow(graph);
    auto temp = path;
    temp += ".tmp-" + std::to_string(::getpid());
    for (const char* suffix : { "", "-wal", "-shm" })
        std::filesystem::remove(temp.string() + suffix, ec);
    try {
        {
            auto store = ProjectStore::create(temp);
            store.saveGraph(graph);
        } // closing checkpoints the WAL into the main file
        // A stale WAL next to the old file would be replayed into the new one.
        for (const char* suffix : { "-wal", "-shm" })
            std::filesystem::remove(path.string() + suffix, ec);
        std::filesystem::rename(temp, path);
    } catch (...) {
        for (const char* suffix : { "", "-wal", "-shm" })
            std::filesystem::remove(temp.string() + suffix, ec);
        throw;
    }
}

void copyProject(const std::filesystem::path& from, const std::filesystem::path& to)
{
    verifyProjectFile(from);
    std::error_code ec;
    if (std::filesystem::equivalent(from, to, ec))
        return;
    auto temp = to;
    temp += ".tmp-" + std::to_string(::getpid());
    std::filesystem::remove(temp, ec);
    try {
        {
            sql::Database db(from, sql::Database::Mode::ReadOnly);
            sql::Statement vacuum(db, "VACUUM INTO ?"); // a consistent copy, WAL included
            vacuum.bind(1, temp.string());
            vacuum.step();
        }
        for (const char* suffix : { "-wal", "-shm" })
            std::filesystem::remove(to.string() + suffix, ec);
        std::filesystem::rename(temp, to);
    } catch (...) {
        std::filesystem::remove(temp, ec);
        throw;
    }
}

} // namespace ps
