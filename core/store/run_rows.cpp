// ProjectStore: training runs, their per-step metrics and checkpoints.
#include "store/project_store.h"
#include "store/sqlite.h"
#include "util/error.h"

#include <nlohmann/json.hpp>
#include <sqlite3.h>

#include <cerrno>
#include <csignal>
#include <fstream>
#include <sstream>
#include <unistd.h>

namespace ps {
namespace {

    std::string firstLine(const std::string& path)
    {
        std::ifstream in(path);
        std::string line;
        std::getline(in, line);
        return line;
    }

    std::string hostName()
    {
        char name[256] = {};
        if (gethostname(name, sizeof name - 1) != 0)
            return {};
        return name;
    }

    // Changes at every boot, so a run written before a power loss is recognised as dead even if
    // its pid is in use again.
    std::string bootId()
    {
        return firstLine("/proc/sys/kernel/random/boot_id");
    }

    struct ProcessState
    {
        bool exists = false;
        bool zombie = false; // exited (e.g. SIGKILL) but not yet reaped by its parent
        std::string start; // clock ticks after boot: tells a reused pid from the original process
    };

    // From /proc/<pid>/stat: field 3 (state) and field 22 (starttime), counted after the command
    // name, which may itself hold spaces and parentheses.
    ProcessState processState(std::int64_t pid)
    {
        ProcessState s;
        const auto stat = firstLine("/proc/" + std::to_string(pid) + "/stat");
        const auto close = stat.rfind(')');
        if (close == std::string::npos) {
            // No procfs: ask the kernel whether the pid exists.
            s.exists = pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
            return s;
        }
        std::istringstream fields(stat.substr(close + 1));
        std::vector<std::string> f;
        for (std::string v; fields >> v;)
            f.push_back(v);
        s.exists = !f.empty();
        s.zombie = !f.empty() && (f[0] == "Z" || f[0] == "X");
        if (f.size() > 19)
            s.start = f[19];
        return s;
    }

    struct RunWriter
    {
        std::int64_t pid = 0; // 0: not recorded (older builds)
        std::string host;
        std::string bootId;
        std::string start;
    };

    bool writerAlive(const RunWriter& w)
    {
        if (w.pid <= 0)
            return false; // recorded by a build without writer tracking: nothing can be running it now
        if (w.host != hostName())
            return true; // another machine's process (a shared file system): cannot tell
        if (w.bootId != bootId())
            return false;
        const auto state = processState(w.pid);
        return state.exists && !state.zombie && (w.start.empty() || state.start.empty() || state.start == w.start);
    }

} // namespace

std::int64_t ProjectStore::beginRun(const std::string& json)
{
    const auto pid = static_cast<std::int64_t>(getpid());
    sql::Statement st(*m_db,
        "INSERT INTO runs(started_at, status, json, pid, host, boot_id, process_start) "
        "VALUES (?1, 'running', ?2, ?3, ?4, ?5, ?6)");
    st.bind(1, sql::utcNow()).bind(2, json).bind(3, pid).bind(4, hostName()).bind(5, bootId());
    st.bind(6, processState(pid).start).execute();
    return m_db->lastInsertRowId();
}

bool ProjectStore::endRunIfRunning(std::int64_t runId, const std::string& status, const std::string& error)
{
    sql::Statement st(
        *m_db, "UPDATE runs SET ended_at = ?1, status = ?2, error = ?3 WHERE id = ?4 AND status = 'running'");
    st.bind(1, sql::utcNow()).bind(2, status).bind(3, error).bind(4, runId).execute();
    return sqlite3_changes(m_db->handle()) > 0;
}

std::vector<ProjectStore::RunRow> ProjectStore::loadRuns() const
{
    sql::Statement st(*m_db,
        "SELECT r.id, r.started_at, coalesce(r.ended_at, ''), r.status, coalesce(r.error, ''), r.json, "
        "(SELECT count(*) FROM run_metrics m WHERE m.run_id = r.id), "
        "(SELECT loss FROM run_metrics m WHERE m.run_id = r.id ORDER BY step DESC LIMIT 1), "
        "(SELECT tokens_per_s FROM run_metrics m WHERE m.run_id = r.id ORDER BY step DESC LIMIT 1) "
        "FROM runs r ORDER BY r.id DESC");
    std::vector<RunRow> out;
    while (st.step()) {
        RunRow r { st.columnInt(0), 0, st.columnText(1), st.columnText(2), st.columnText(3), st.columnText(4),
            st.columnText(5), st.columnInt(6), st.columnDouble(7), st.columnDouble(8) };
        const auto j = nlohmann::json::parse(r.json, nullptr, false);
        if (j.is_object())
            r.planId = j.value("plan_id", std::int64_t { 0 });
        out.push_back(std::move(r));
    }
    return out;
}

std::vector<std::int64_t> ProjectStore::markStaleRunsInterrupted()
{
    std::vector<std::pair<std::int64_t, RunWriter>> running;
    {
        sql::Statement st(*m_db,
            "SELECT id, coalesce(pid, 0), coalesce(host, ''), coalesce(boot_id, ''), coalesce(process_start, '') "
            "FROM runs WHERE status = 'running'");
        while (st.step())
            running.push_back(
                { st.columnInt(0), { st.columnInt(1), st.columnText(2), st.columnText(3), st.columnText(4) } });
    }
    std::vector<std::int64_t> stale;
    for (const auto& [id, writer] : running) {
        const auto who = writer.pid > 0 ? "its process (pid " + std::to_string(writer.pid) + ")" : "its process";
        if (!writerAlive(writer) && endRunIfRunning(id, "interrupted", who + " ended without finishing the run"))
            stale.push_back(id);
    }
    return stale;
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

std::string ProjectStore::runConfig(std::int64_t runId) const
{
    sql::Statement st(*m_db, "SELECT json FROM runs WHERE id = ?1");
    st.bind(1, runId);
    if (!st.step())
        throw Error("'" + path().string() + "' has no run " + std::to_string(runId));
    return st.columnText(0);
}

std::int64_t ProjectStore::saveCheckpoint(std::int64_t runId, std::int64_t step, const TensorBytes& tensors,
    const OptimizerStateBytes& optimizerState, int optimizerSteps)
{
    sql::Transaction tx(*m_db);
    sql::Statement head(
        *m_db, "INSERT INTO checkpoints(run_id, step, created_at, optimizer_steps) VALUES (?1, ?2, ?3, ?4)");
    head.bind(1, runId).bind(2, step).bind(3, sql::utcNow()).bind(4, std::int64_t { optimizerSteps }).execute();
    const auto id = m_db->lastInsertRowId();
    sql::Statement row(*m_db, "INSERT INTO checkpoint_tensors(checkpoint_id, tensor_id, data) VALUES (?1, ?2, ?3)");
    for (const auto& [tensor, bytes] : tensors) {
        row.bind(1, id).bind(2, static_cast<std::int64_t>(tensor.value)).bindBlob(3, bytes);
        row.execute();
    }
    sql::Statement state(
        *m_db, "INSERT INTO checkpoint_optimizer(checkpoint_id, tensor_id, slot, data) VALUES (?1, ?2, ?3, ?4)");
    for (const auto& [tensor, buffers] : optimizerState) {
        for (std::size_t slot = 0; slot < buffers.size(); ++slot) {
            state.bind(1, id).bind(2, static_cast<std::int64_t>(tensor.value));
            state.bind(3, static_cast<std::int64_t>(slot)).bindBlob(4, buffers[slot]).execute();
        }
    }
    tx.commit();
    return id;
}

std::optional<ProjectStore::Checkpoint> ProjectStore::latestCheckpoint() const
{
    sql::Statement head(*m_db, "SELECT id, run_id, step, optimizer_steps FROM checkpoints ORDER BY id DESC LIMIT 1");
    if (!head.step())
        return std::nullopt;
    Checkpoint c { head.columnInt(0), head.columnInt(1), head.columnInt(2), {}, {},
        static_cast<int>(head.columnInt(3)) };
    sql::Statement rows(
        *m_db, "SELECT tensor_id, data FROM checkpoint_tensors WHERE checkpoint_id = ?1 ORDER BY tensor_id");
    rows.bind(1, c.id);
    while (rows.step())
        c.tensors.emplace_back(TensorId(static_cast<std::uint32_t>(rows.columnInt(0))), rows.columnBlob(1));
    sql::Statement state(*m_db,
        "SELECT tensor_id, slot, data FROM checkpoint_optimizer WHERE checkpoint_id = ?1 ORDER BY tensor_id, slot");
    state.bind(1, c.id);
    while (state.step()) {
        const TensorId tensor(static_cast<std::uint32_t>(state.columnInt(0)));
        if (c.optimizerState.empty() || c.optimizerState.back().first != tensor)
            c.optimizerState.emplace_back(tensor, std::vector<std::vector<std::byte>>());
        c.optimizerState.back().second.push_back(state.columnBlob(2));
    }
    return c;
}

void ProjectStore::saveRunEvents(std::int64_t runId, std::int64_t iteration, const std::vector<SimEvent>& events)
{
    sql::Transaction tx(*m_db);
    sql::Statement ev(*m_db,
        "INSERT INTO events(run_id, iteration, device, stream, action, micro_batch, start_ns, end_ns, bytes) "
        "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)");
    for (const auto& e : events) {
        ev.bind(1, runId).bind(2, iteration).bind(3, std::int64_t { e.device.value }).bind(4, toString(e.stream));
        ev.bind(5, std::to_string(e.stage.value) + std::string(actionCode(e.action)));
        if (e.microBatch.valid())
            ev.bind(6, std::int64_t { e.microBatch.value });
        else
            ev.bindNull(6);
        ev.bind(7, e.startNs).bind(8, e.endNs).bind(9, static_cast<std::int64_t>(e.bytes)).execute();
    }
    tx.commit();
}

std::vector<std::int64_t> ProjectStore::runEventIterations(std::int64_t runId) const
{
    sql::Statement st(*m_db, "SELECT DISTINCT iteration FROM events WHERE run_id = ?1 ORDER BY iteration");
    st.bind(1, runId);
    std::vector<std::int64_t> out;
    while (st.step())
        out.push_back(st.columnInt(0));
    return out;
}

std::vector<SimEvent> ProjectStore::loadRunEvents(std::int64_t runId, std::int64_t iteration) const
{
    sql::Statement st(*m_db,
        "SELECT device, stream, action, micro_batch, start_ns, end_ns, bytes FROM events "
        "WHERE run_id = ?1 AND iteration = ?2 ORDER BY start_ns");
    st.bind(1, runId).bind(2, iteration);
    std::vector<SimEvent> out;
    while (st.step()) {
        const auto mb = st.columnText(3);
        const auto action = parseAction(st.columnText(2) + (mb.empty() ? std::string() : mb));
        if (!action)
            throw Error("'" + path().string() + "': run " + std::to_string(runId) + " has an event with action '"
                + st.columnText(2) + "' this build does not know");
        SimEvent e;
        e.device = DeviceId(static_cast<std::uint32_t>(st.columnInt(0)));
        const auto stream = st.columnText(1);
        for (auto s : { Stream::Compute, Stream::CopyToHost, Stream::CopyFromHost, Stream::Send }) {
            if (toString(s) == stream)
                e.stream = s;
        }
        e.action = action->type;
        e.stage = action->stage;
        e.microBatch = action->microBatch;
        e.startNs = st.columnDouble(4);
        e.endNs = st.columnDouble(5);
        e.bytes = st.columnDouble(6);
        out.push_back(e);
    }
    return out;
}

void ProjectStore::appendRunDeviceMetrics(std::int64_t runId, const std::vector<RunDeviceMetric>& metrics)
{
    sql::Transaction tx(*m_db);
    sql::Statement st(*m_db,
        "INSERT OR REPLACE INTO run_devices(run_id, step, device, name, peak_bytes, busy_ns, peak_by_use) "
        "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)");
    for (const auto& m : metrics) {
        st.bind(1, runId).bind(2, m.step).bind(3, std::int64_t { m.device }).bind(4, m.name);
        st.bind(5, m.peakBytes).bind(6, m.busyNs).bind(7, m.peakByUse).execute();
    }
    tx.commit();
}

std::vector<ProjectStore::RunDeviceMetric> ProjectStore::loadRunDeviceMetrics(std::int64_t runId) const
{
    sql::Statement st(*m_db,
        "SELECT step, device, name, peak_bytes, busy_ns, peak_by_use FROM run_devices WHERE run_id = ?1 "
        "ORDER BY step, device");
    st.bind(1, runId);
    std::vector<RunDeviceMetric> out;
    while (st.step())
        out.push_back({ st.columnInt(0), static_cast<int>(st.columnInt(1)), st.columnText(2), st.columnInt(3),
            st.columnDouble(4), st.columnText(5) });
    return out;
}

std::int64_t ProjectStore::latestRunId() const
{
    return m_db->queryInt("SELECT coalesce(max(id), 0) FROM runs");
}

} // namespace ps
