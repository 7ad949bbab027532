// ProjectStore: profiles, clusters and simulations.
#include "store/project_store.h"
#include "store/sqlite.h"
#include "util/error.h"

#include <nlohmann/json.hpp>

#include <map>

namespace ps {
namespace {

    struct ProfileRow
    {
        double microBatch, forwardNs, backwardNs, weightGradNs, outputBytes, savedBytes, workspaceBytes;
    };

    LinearModel fit(const ProfileRow& a, const ProfileRow& b, double ProfileRow::*field)
    {
        if (a.microBatch == b.microBatch)
            return { 0, a.*field / a.microBatch };
        return LinearModel::through(a.microBatch, a.*field, b.microBatch, b.*field);
    }

} // namespace

void ProjectStore::saveProfile(const Profile& profile, double microBatchA, double microBatchB)
{
    sql::Transaction tx(*m_db);
    sql::Statement clear(*m_db, "DELETE FROM profiles WHERE device_kind = ?1 AND source = ?2 AND threads = ?3");
    clear.bind(1, profile.deviceKind).bind(2, profile.source).bind(3, std::int64_t { profile.threads }).execute();
    sql::Statement insert(*m_db,
        "INSERT INTO profiles(node_id, device_kind, micro_batch, forward_ns, backward_ns, weight_grad_ns, "
        "output_bytes, saved_bytes, workspace_bytes, parameter_bytes, source, created_at, threads) "
        "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)");
    const auto created = sql::utcNow();
    constexpr double paramBytes = 4; // fp32 bytes per parameter, whatever the training precision
    for (std::size_t n = 0; n < profile.nodes.size(); ++n) {
        const auto& p = profile.nodes[n];
        for (double b : { microBatchA, microBatchB }) {
            insert.bind(1, static_cast<std::int64_t>(n))
                .bind(2, profile.deviceKind)
                .bind(3, static_cast<std::int64_t>(b));
            insert.bind(4, p.forwardNs.at(b)).bind(5, p.backwardNs.at(b)).bind(6, p.weightGradNs.at(b));
            insert.bind(7, static_cast<std::int64_t>(p.outputBytes.at(b)))
                .bind(8, static_cast<std::int64_t>(p.savedBytes.at(b)));
            insert.bind(9, static_cast<std::int64_t>(p.workspaceBytes.at(b)));
            insert.bind(10, static_cast<std::int64_t>(static_cast<double>(p.parameterCount) * paramBytes));
            insert.bind(11, profile.source).bind(12, created).bind(13, std::int64_t { profile.threads }).execute();
            if (microBatchA == microBatchB)
                break;
        }
    }
    sql::Statement clearStep(
        *m_db, "DELETE FROM profile_steps WHERE device_kind = ?1 AND source = ?2 AND threads = ?3");
    clearStep.bind(1, profile.deviceKind).bind(2, profile.source).bind(3, std::int64_t { profile.threads }).execute();
    if (profile.setup.optimizerNsPerParameter > 0) {
        sql::Statement step(*m_db,
            "INSERT INTO profile_steps(device_kind, source, threads, optimizer_ns_per_parameter) "
            "VALUES (?1, ?2, ?3, ?4)");
        step.bind(1, profile.deviceKind).bind(2, profile.source).bind(3, std::int64_t { profile.threads });
        step.bind(4, profile.setup.optimizerNsPerParameter).execute();
    }
    tx.commit();
}

std::vector<int> ProjectStore::profileThreads(const std::string& deviceKind, const std::string& source) const
{
    // A file read without migrating (schema 7 and older) has no threads column: its count is 0.
    sql::Statement st(*m_db,
        schemaVersion() >= 8
            ? "SELECT DISTINCT threads FROM profiles WHERE device_kind = ?1 AND source = ?2 ORDER BY threads"
            : "SELECT DISTINCT 0 FROM profiles WHERE device_kind = ?1 AND source = ?2");
    st.bind(1, deviceKind).bind(2, source);
    std::vector<int> out;
    while (st.step())
        out.push_back(static_cast<int>(st.columnInt(0)));
    return out;
}

std::optional<Profile> ProjectStore::loadProfile(
    const std::string& deviceKind, const std::string& source, int threads) const
{
    if (threads < 0) {
        const auto counts = profileThreads(deviceKind, source);
        if (counts.empty())
            return std::nullopt;
        threads = counts.back();
    }
    sql::Statement st(*m_db,
        "SELECT node_id, micro_batch, forward_ns, backward_ns, weight_grad_ns, output_bytes, "
        "saved_bytes, workspace_bytes, parameter_bytes FROM profiles "
        "WHERE device_kind = ?1 AND source = ?2 AND "
            + std::string(schemaVersion() >= 8 ? "threads" : "0") + " = ?3 ORDER BY node_id, micro_batch");
    st.bind(1, deviceKind).bind(2, source).bind(3, std::int64_t { threads });
    std::map<std::int64_t, std::vector<ProfileRow>> rows;
    std::map<std::int64_t, std::int64_t> paramBytes;
    while (st.step()) {
        rows[st.columnInt(0)].push_back({ static_cast<double>(st.columnInt(1)), st.columnDouble(2), st.columnDouble(3),
            st.columnDouble(4), static_cast<double>(st.columnInt(5)), static_cast<double>(st.columnInt(6)),
            static_cast<double>(st.columnInt(7)) });
        paramBytes[st.columnInt(0)] = st.columnInt(8);
    }
    if (rows.empty())
        return std::nullopt;
    Profile profile { deviceKind, source, {}, threads, {}, {} };
    for (const auto& [node, list] : rows) {
        if (node != static_cast<std::int64_t>(profile.nodes.size()))
            throw Error(path().string() + ": profile '" + source + "' for " + deviceKind + " misses node #"
                + std::to_string(profile.nodes.size()));
        const auto& a = list.front();
        const auto& b = list.back();
        NodeProfile p;
        p.forwardNs = fit(a, b, &ProfileRow::forwardNs);
        p.backwardNs = fit(a, b, &ProfileRow::backwardNs);
        p.weightGradNs = fit(a, b, &ProfileRow::weightGradNs);
        p.outputBytes = fit(a, b, &ProfileRow::outputBytes);
        p.savedBytes = fit(a, b, &ProfileRow::savedBytes);
        p.workspaceBytes = fit(a, b, &ProfileRow::workspaceBytes);
        p.parameterCount = paramBytes[node] / 4;
        profile.nodes.push_back(p);
    }
    if (schemaVersion() >= 9) { // older files measured no optimizer step
        sql::Statement step(*m_db,
            "SELECT optimizer_ns_per_parameter FROM profile_steps WHERE device_kind = ?1 AND source = ?2 AND "
            "threads = ?3");
        step.bind(1, deviceKind).bind(2, source).bind(3, std::int64_t { threads });
        if (step.step())
            profile.setup.optimizerNsPerParameter = step.columnDouble(0);
    }
    return profile;
}

void ProjectStore::saveCluster(const Cluster& cluster)
{
    sql::Statement st(*m_db,
        "INSERT INTO cluster(name, json) VALUES (?1, ?2) "
        "ON CONFLICT(name) DO UPDATE SET json = excluded.json");
    st.bind(1, cluster.name).bind(2, clusterToJson(cluster)).execute();
}

std::vector<Cluster> ProjectStore::loadClusters() const
{
    std::vector<Cluster> clusters;
    sql::Statement st(*m_db, "SELECT name, json FROM cluster ORDER BY id");
    while (st.step())
        clusters.push_back(clusterFromJson(st.columnText(1), path().string() + ": cluster '" + st.columnText(0) + "'"));
    return clusters;
}

std::int64_t ProjectStore::saveSimulation(const SimulationResult& result, const std::string& configJson)
{
    sql::Transaction tx(*m_db);
    auto summary = nlohmann::ordered_json::parse(simulationSummaryJson(result));
    summary["config"] = nlohmann::json::parse(configJson, nullptr, false);
    sql::Statement sim(*m_db, "INSERT INTO simulations(plan_id, created_at, json) VALUES (NULL, ?1, ?2)");
    sim.bind(1, sql::utcNow()).bind(2, summary.dump()).execute();
    const auto id = m_db->lastInsertRowId();
    sql::Statement ev(*m_db,
        "INSERT INTO events(simulation_id, device, stream, action, micro_batch, start_ns, end_ns, bytes) "
        "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)");
    for (const auto& e : result.events) {
        ev.bind(1, id).bind(2, std::int64_t { e.device.value }).bind(3, toString(e.stream));
        ev.bind(4, std::to_string(e.stage.value) + std::string(actionCode(e.action)));
        if (e.microBatch.valid())
            ev.bind(5, std::int64_t { e.microBatch.value });
        else
            ev.bindNull(5);
        ev.bind(6, e.startNs).bind(7, e.endNs).bind(8, static_cast<std::int64_t>(e.bytes)).execute();
    }
    tx.commit();
    return id;
}

std::int64_t ProjectStore::simulationCount() const
{
    return m_db->queryInt("SELECT count(*) FROM simulations");
}

} // namespace ps

namespace ps {

std::int64_t ProjectStore::savePlan(const Plan& plan, const std::string& name, const SimulationResult* simulation)
{
    auto json = nlohmann::ordered_json::parse(planToJson(plan));
    if (simulation)
        json["simulation"] = nlohmann::ordered_json::parse(simulationSummaryJson(*simulation));
    sql::Statement st(*m_db,
        "INSERT INTO plans(name, created_at, algorithm, json, iteration_ns, feasible) "
        "VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
    st.bind(1, name).bind(2, sql::utcNow()).bind(3, plan.algorithm).bind(4, json.dump());
    st.bind(5, plan.slowestStageNs).bind(6, std::int64_t { plan.feasible ? 1 : 0 }).execute();
    return m_db->lastInsertRowId();
}

void ProjectStore::renamePlan(std::int64_t id, const std::string& name)
{
    sql::Statement st(*m_db, "UPDATE plans SET name = ?1 WHERE id = ?2");
    st.bind(1, name).bind(2, id).execute();
}

void ProjectStore::deletePlan(std::int64_t id)
{
    sql::Statement st(*m_db, "DELETE FROM plans WHERE id = ?1");
    st.bind(1, id).execute();
}

std::vector<ProjectStore::PlanRow> ProjectStore::loadPlans() const
{
    std::vector<PlanRow> rows;
    sql::Statement st(*m_db,
        "SELECT id, name, algorithm, json, iteration_ns, feasible FROM plans "
        "ORDER BY feasible DESC, iteration_ns ASC, id ASC");
    while (st.step())
        rows.push_back({ st.columnInt(0), st.columnText(1), st.columnText(2), st.columnText(3), st.columnDouble(4),
            st.columnInt(5) != 0 });
    return rows;
}

} // namespace ps
