// ProjectStore: training runs, their per-step metrics and checkpoints.
#include "store/project_store.h"
#include "store/sqlite.h"
#include "util/error.h"

namespace ps {

std::int64_t ProjectStore::beginRun(const std::string& json)
{
    sql::Statement st(*m_db, "INSERT INTO runs(started_at, status, json) VALUES (?1, 'running', ?2)");
    st.bind(1, sql::utcNow()).bind(2, json).execute();
    return m_db->lastInsertRowId();
}

void ProjectStore::appendRunMetrics(std::int64_t runId, const std::vector<RunMetric>& metrics)
{
    sql::Transaction tx(*m_db);
    sql::Statement st(*m_db,
        "INSERT OR REPLACE INTO run_metrics(run_id, step, loss, step_ns, tokens_per_s) VALUES (?1, ?2, ?3, ?4, ?5)");
    for (const auto& m : metrics) {
        st.bind(1, runId).bind(2, m.step).bind(3, m.loss).bind(4, m.stepNs).bind(5, m.tokensPerSecond);
        st.execute();
    }
    tx.commit();
}

void ProjectStore::endRun(std::int64_t runId, const std::string& status, const std::string& error)
{
    sql::Statement st(*m_db, "UPDATE runs SET ended_at = ?1, status = ?2, error = ?3 WHERE id = ?4");
    st.bind(1, sql::utcNow()).bind(2, status).bind(3, error).bind(4, runId).execute();
}

std::vector<ProjectStore::RunMetric> ProjectStore::loadRunMetrics(std::int64_t runId) const
{
    sql::Statement st(
        *m_db, "SELECT step, loss, step_ns, tokens_per_s FROM run_metrics WHERE run_id = ?1 ORDER BY step");
    st.bind(1, runId);
    std::vector<RunMetric> out;
    while (st.step())
        out.push_back({ st.columnInt(0), st.columnDouble(1), st.columnDouble(2), st.columnDouble(3) });
    return out;
}

std::string ProjectStore::runStatus(std::int64_t runId) const
{
    sql::Statement st(*m_db, "SELECT status FROM runs WHERE id = ?1");
    st.bind(1, runId);
    if (!st.step())
        throw Error("'" + path().string() + "' has no run " + std::to_string(runId));
    return st.columnText(0);
}

std::int64_t ProjectStore::saveCheckpoint(
    std::int64_t runId, std::int64_t step, const std::vector<std::pair<TensorId, std::vector<std::byte>>>& tensors)
{
    sql::Transaction tx(*m_db);
    sql::Statement head(*m_db, "INSERT INTO checkpoints(run_id, step, created_at) VALUES (?1, ?2, ?3)");
    head.bind(1, runId).bind(2, step).bind(3, sql::utcNow()).execute();
    const auto id = m_db->lastInsertRowId();
    sql::Statement row(*m_db, "INSERT INTO checkpoint_tensors(checkpoint_id, tensor_id, data) VALUES (?1, ?2, ?3)");
    for (const auto& [tensor, bytes] : tensors) {
        row.bind(1, id).bind(2, static_cast<std::int64_t>(tensor.value)).bindBlob(3, bytes);
        row.execute();
    }
    tx.commit();
    return id;
}

std::optional<ProjectStore::Checkpoint> ProjectStore::latestCheckpoint() const
{
    sql::Statement head(*m_db, "SELECT id, run_id, step FROM checkpoints ORDER BY id DESC LIMIT 1");
    if (!head.step())
        return std::nullopt;
    Checkpoint c { head.columnInt(0), head.columnInt(1), head.columnInt(2), {} };
    sql::Statement rows(
        *m_db, "SELECT tensor_id, data FROM checkpoint_tensors WHERE checkpoint_id = ?1 ORDER BY tensor_id");
    rows.bind(1, c.id);
    while (rows.step())
        c.tensors.emplace_back(TensorId(static_cast<std::uint32_t>(rows.columnInt(0))), rows.columnBlob(1));
    return c;
}

} // namespace ps
