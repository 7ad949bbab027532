// Thin RAII layer over the SQLite C API: a connection, prepared statements, transactions.
//
// Every statement is prepared and bound (no SQL built from values). Errors become ps::Error
// carrying SQLite's message and the file name. Depends on: SQLite only.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

struct sqlite3;
struct sqlite3_stmt;

namespace ps::sql {

class Database;

class Statement
{
public:
    Statement(Database& db, std::string_view sql);
    ~Statement();
    Statement(Statement&& other) noexcept;
    Statement& operator=(Statement&&) = delete;
    Statement(const Statement&) = delete;
    Statement& operator=(const Statement&) = delete;

    // Parameters are 1-based, as in SQLite.
    Statement& bind(int index, std::int64_t value);
    Statement& bind(int index, double value);
    Statement& bind(int index, std::string_view value);
    Statement& bindBlob(int index, std::span<const std::byte> value);
    Statement& bindNull(int index);

    // Returns true while a row is available.
    bool step();
    // Runs to completion (INSERT/UPDATE/DELETE) and resets for reuse.
    void execute();
    void reset();

    [[nodiscard]] std::int64_t columnInt(int column) const;
    [[nodiscard]] double columnDouble(int column) const;
    [[nodiscard]] std::string columnText(int column) const;
    [[nodiscard]] std::vector<std::byte> columnBlob(int column) const;
    [[nodiscard]] bool columnIsNull(int column) const;

private:
    Database* m_db;
    sqlite3_stmt* m_stmt = nullptr;
};

class Database
{
public:
    enum class Mode { ReadOnly, ReadWrite, Create };

    Database(const std::filesystem::path& path, Mode mode);
    ~Database();
    Database(const Database&) = delete;
    Database& operator=(const Database&) = delete;

    // For statements without parameters (DDL, PRAGMA).
    void exec(std::string_view sql);
    [[nodiscard]] std::int64_t queryInt(std::string_view sql);
    [[nodiscard]] std::int64_t lastInsertRowId() const;
    [[nodiscard]] const std::filesystem::path& path() const
    {
        return m_path;
    }
    [[nodiscard]] sqlite3* handle() const
    {
        return m_db;
    }
    // Throws ps::Error "<file>: <what>: <sqlite message>" when rc is not OK/ROW/DONE.
    void check(int rc, std::string_view what) const;

private:
    std::filesystem::path m_path;
    sqlite3* m_db = nullptr;
};

// BEGIN IMMEDIATE on construction; ROLLBACK on destruction unless commit() ran.
class Transaction
{
public:
    explicit Transaction(Database& db);
    ~Transaction();
    Transaction(const Transaction&) = delete;
    Transaction& operator=(const Transaction&) = delete;
    void commit();

private:
    Database& m_db;
    bool m_done = false;
};

// "2026-11-22T13:04:05Z": the timestamps project rows carry.
[[nodiscard]] std::string utcNow();

} // namespace ps::sql
