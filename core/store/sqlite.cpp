#include "store/sqlite.h"

#include "util/error.h"

#include <sqlite3.h>

#include <chrono>
#include <cstring>
#include <ctime>

namespace ps::sql {

Statement::Statement(Database& db, std::string_view sql)
    : m_db(&db)
{
    db.check(sqlite3_prepare_v2(db.handle(), sql.data(), static_cast<int>(sql.size()), &m_stmt, nullptr),
        "preparing statement");
}

Statement::~Statement()
{
    sqlite3_finalize(m_stmt);
}

Statement::Statement(Statement&& other) noexcept
    : m_db(other.m_db)
    , m_stmt(other.m_stmt)
{
    other.m_stmt = nullptr;
}

Statement& Statement::bind(int index, std::int64_t value)
{
    m_db->check(sqlite3_bind_int64(m_stmt, index, value), "binding a value");
    return *this;
}

Statement& Statement::bind(int index, double value)
{
    m_db->check(sqlite3_bind_double(m_stmt, index, value), "binding a value");
    return *this;
}

Statement& Statement::bind(int index, std::string_view value)
{
    m_db->check(sqlite3_bind_text64(m_stmt, index, value.data(), value.size(), SQLITE_TRANSIENT, SQLITE_UTF8),
        "binding a value");
    return *this;
}

Statement& Statement::bindBlob(int index, std::span<const std::byte> value)
{
    m_db->check(sqlite3_bind_blob64(m_stmt, index, value.data(), value.size(), SQLITE_TRANSIENT), "binding a value");
    return *this;
}

Statement& Statement::bindNull(int index)
{
    m_db->check(sqlite3_bind_null(m_stmt, index), "binding a value");
    return *this;
}

bool Statement::step()
{
    const int rc = sqlite3_step(m_stmt);
    m_db->check(rc, "executing statement");
    return rc == SQLITE_ROW;
}

void Statement::execute()
{
    while (step()) { }
    reset();
}

void Statement::reset()
{
    sqlite3_reset(m_stmt);
    sqlite3_clear_bindings(m_stmt);
}

std::int64_t Statement::columnInt(int column) const
{
    return sqlite3_column_int64(m_stmt, column);
}

double Statement::columnDouble(int column) const
{
    return sqlite3_column_double(m_stmt, column);
}

std::string Statement::columnText(int column) const
{
    const auto* text = sqlite3_column_text(m_stmt, column);
    return text ? std::string(reinterpret_cast<const char*>(text), sqlite3_column_bytes(m_stmt, column))
                : std::string();
}

std::vector<std::byte> Statement::columnBlob(int column) const
{
    const auto* data = static_cast<const std::byte*>(sqlite3_column_blob(m_stmt, column));
    return data ? std::vector<std::byte>(data, data + sqlite3_column_bytes(m_stmt, column)) : std::vector<std::byte>();
}

bool Statement::columnIsNull(int column) const
{
    return sqlite3_column_type(m_stmt, column) == SQLITE_NULL;
}

Database::Database(const std::filesystem::path& path, Mode mode)
    : m_path(path)
{
    int flags = SQLITE_OPEN_NOMUTEX;
    switch (mode) {
    case Mode::ReadOnly:
        flags |= SQLITE_OPEN_READONLY;
        break;
    case Mode::ReadWrite:
        flags |= SQLITE_OPEN_READWRITE;
        break;
    case Mode::Create:
        flags |= SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
        break;
    }
    const int rc = sqlite3_open_v2(path.c_str(), &m_db, flags, nullptr);
    if (rc != SQLITE_OK) {
        const std::string message = m_db ? sqlite3_errmsg(m_db) : sqlite3_errstr(rc);
        sqlite3_close(m_db);
        m_db = nullptr;
        throw Error(path.string() + ": cannot open: " + message);
    }
    sqlite3_extended_result_codes(m_db, 1);
    sqlite3_busy_timeout(m_db, 5000); // the engine appends metrics while the GUI reads
}

Database::~Database()
{
    sqlite3_close_v2(m_db);
}

void Database::exec(std::string_view sql)
{
    const std::string text(sql);
    char* message = nullptr;
    const int rc = sqlite3_exec(m_db, text.c_str(), nullptr, nullptr, &message);
    if (rc != SQLITE_OK) {
        std::string detail = message ? message : sqlite3_errstr(rc);
        sqlite3_free(message);
        if (sqlite3_system_errno(m_db) != 0 && ((rc & 0xff) == SQLITE_IOERR || (rc & 0xff) == SQLITE_FULL))
            detail += " (" + std::string(std::strerror(sqlite3_system_errno(m_db))) + ")";
        throw Error(m_path.string() + ": " + detail);
    }
}

std::int64_t Database::queryInt(std::string_view sql)
{
    Statement st(*this, sql);
    return st.step() ? st.columnInt(0) : 0;
}

std::int64_t Database::lastInsertRowId() const
{
    return sqlite3_last_insert_rowid(m_db);
}

void Database::check(int rc, std::string_view what) const
{
    const int primary = rc & 0xff;
    if (primary == SQLITE_OK || primary == SQLITE_ROW || primary == SQLITE_DONE)
        return;
    std::string detail = sqlite3_errmsg(m_db);
    if (primary == SQLITE_NOTADB || primary == SQLITE_CORRUPT)
        detail = "the file is corrupt or not a database (" + detail + ")";
    if ((primary == SQLITE_IOERR || primary == SQLITE_FULL || primary == SQLITE_CANTOPEN)
        && sqlite3_system_errno(m_db) != 0) // "disk I/O error" alone hides a full disk
        detail += " (" + std::string(std::strerror(sqlite3_system_errno(m_db))) + ")";
    throw Error(m_path.string() + ": " + std::string(what) + " failed: " + detail);
}

Transaction::Transaction(Database& db)
    : m_db(db)
{
    m_db.exec("BEGIN IMMEDIATE");
}

Transaction::~Transaction()
{
    if (!m_done) {
        try {
            m_db.exec("ROLLBACK");
        } catch (...) { // NOLINT(bugprone-empty-catch): nothing more to do while unwinding
        }
    }
}

void Transaction::commit()
{
    m_db.exec("COMMIT");
    m_done = true;
}

std::string utcNow()
{
    const auto t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    std::tm tm {};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

} // namespace ps::sql
