#include "store/schema.h"

namespace ps::store {

namespace {

    // Version 1: the model graph. Node ids are positions in topological order.
    constexpr std::string_view kVersion1 = R"sql(
CREATE TABLE meta(
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL);
CREATE TABLE model(
    id INTEGER PRIMARY KEY CHECK (id = 1),
    name TEXT NOT NULL,
    family TEXT NOT NULL,
    config_json TEXT NOT NULL,
    micro_batch INTEGER NOT NULL,
    outputs TEXT NOT NULL);
CREATE TABLE tensors(
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    dtype TEXT NOT NULL,
    shape TEXT NOT NULL,
    data BLOB);
CREATE TABLE nodes(
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    op TEXT NOT NULL,
    opaque_type TEXT NOT NULL DEFAULT '',
    scope TEXT NOT NULL,
    layer INTEGER NOT NULL,
    attrs_json TEXT NOT NULL);
CREATE TABLE edges(
    node_id INTEGER NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
    direction INTEGER NOT NULL CHECK (direction IN (0, 1)),
    slot INTEGER NOT NULL,
    tensor_id INTEGER NOT NULL REFERENCES tensors(id),
    PRIMARY KEY (node_id, direction, slot)) WITHOUT ROWID;
CREATE INDEX edges_by_tensor ON edges(tensor_id);
)sql";

    // Version 2: what profiling, planning, simulation and training write.
    constexpr std::string_view kVersion2 = R"sql(
CREATE TABLE profiles(
    id INTEGER PRIMARY KEY,
    node_id INTEGER NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
    device_kind TEXT NOT NULL,
    micro_batch INTEGER NOT NULL,
    forward_ns REAL NOT NULL,
    backward_ns REAL NOT NULL,
    output_bytes INTEGER NOT NULL,
    saved_bytes INTEGER NOT NULL,
    workspace_bytes INTEGER NOT NULL,
    parameter_bytes INTEGER NOT NULL,
    source TEXT NOT NULL,
    created_at TEXT NOT NULL,
    UNIQUE (node_id, device_kind, micro_batch, source));
CREATE TABLE cluster(
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    json TEXT NOT NULL);
CREATE TABLE plans(
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    created_at TEXT NOT NULL,
    algorithm TEXT NOT NULL,
    json TEXT NOT NULL,
    iteration_ns REAL,
    feasible INTEGER);
CREATE TABLE simulations(
    id INTEGER PRIMARY KEY,
    plan_id INTEGER REFERENCES plans(id) ON DELETE CASCADE,
    created_at TEXT NOT NULL,
    json TEXT NOT NULL);
CREATE TABLE runs(
    id INTEGER PRIMARY KEY,
    plan_id INTEGER REFERENCES plans(id) ON DELETE SET NULL,
    started_at TEXT NOT NULL,
    ended_at TEXT,
    status TEXT NOT NULL,
    error TEXT,
    json TEXT NOT NULL DEFAULT '{}');
CREATE TABLE run_metrics(
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    step INTEGER NOT NULL,
    loss REAL,
    step_ns REAL,
    tokens_per_s REAL,
    PRIMARY KEY (run_id, step)) WITHOUT ROWID;
CREATE TABLE events(
    id INTEGER PRIMARY KEY,
    simulation_id INTEGER REFERENCES simulations(id) ON DELETE CASCADE,
    run_id INTEGER REFERENCES runs(id) ON DELETE CASCADE,
    device INTEGER NOT NULL,
    stream TEXT NOT NULL,
    action TEXT NOT NULL,
    micro_batch INTEGER,
    start_ns REAL NOT NULL,
    end_ns REAL NOT NULL,
    bytes INTEGER NOT NULL DEFAULT 0);
)sql";

    // Version 3: the zero-bubble weight-gradient share of backward, and an index for profile lookups.
    constexpr std::string_view kVersion3 = R"sql(
ALTER TABLE profiles ADD COLUMN weight_grad_ns REAL NOT NULL DEFAULT 0;
CREATE INDEX profiles_by_device ON profiles(device_kind, source, micro_batch);
)sql";

    // Version 4: training checkpoints (parameter values by tensor id, fp32 little endian).
    constexpr std::string_view kVersion4 = R"sql(
CREATE TABLE checkpoints(
    id INTEGER PRIMARY KEY,
    run_id INTEGER REFERENCES runs(id) ON DELETE CASCADE,
    step INTEGER NOT NULL,
    created_at TEXT NOT NULL);
CREATE TABLE checkpoint_tensors(
    checkpoint_id INTEGER NOT NULL REFERENCES checkpoints(id) ON DELETE CASCADE,
    tensor_id INTEGER NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (checkpoint_id, tensor_id)) WITHOUT ROWID;
)sql";

    // Version 5: pipeline runs: optimizer state in checkpoints (so a resume continues Adam), the
    // measured timeline's iteration, per-device measured peak memory and busy time per step.
    constexpr std::string_view kVersion5 = R"sql(
ALTER TABLE checkpoints ADD COLUMN optimizer_steps INTEGER NOT NULL DEFAULT 0;
CREATE TABLE checkpoint_optimizer(
    checkpoint_id INTEGER NOT NULL REFERENCES checkpoints(id) ON DELETE CASCADE,
    tensor_id INTEGER NOT NULL,
    slot INTEGER NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (checkpoint_id, tensor_id, slot)) WITHOUT ROWID;
ALTER TABLE events ADD COLUMN iteration INTEGER;
CREATE INDEX events_by_run ON events(run_id, iteration);
CREATE TABLE run_devices(
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    step INTEGER NOT NULL,
    device INTEGER NOT NULL,
    name TEXT NOT NULL,
    peak_bytes INTEGER NOT NULL,
    busy_ns REAL NOT NULL,
    PRIMARY KEY (run_id, step, device)) WITHOUT ROWID;
)sql";

    // Version 6: what each device's measured peak was for (bytes by use, a JSON object).
    constexpr std::string_view kVersion6 = R"sql(
ALTER TABLE run_devices ADD COLUMN peak_by_use TEXT NOT NULL DEFAULT '{}';
)sql";

    // Version 7: the process that writes a run (pid, host, boot and process start time), so a run
    // left "running" by a process that no longer exists can be told apart from a live one.
    constexpr std::string_view kVersion7 = R"sql(
ALTER TABLE runs ADD COLUMN pid INTEGER;
ALTER TABLE runs ADD COLUMN host TEXT;
ALTER TABLE runs ADD COLUMN boot_id TEXT;
ALTER TABLE runs ADD COLUMN process_start TEXT;
)sql";

    // Version 8: the BLAS threads a CPU profile was measured with (0: not recorded), part of its
    // key, so profiles measured at several thread counts live side by side.
    constexpr std::string_view kVersion8 = R"sql(
CREATE TABLE profiles_v8(
    id INTEGER PRIMARY KEY,
    node_id INTEGER NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
    device_kind TEXT NOT NULL,
    micro_batch INTEGER NOT NULL,
    forward_ns REAL NOT NULL,
    backward_ns REAL NOT NULL,
    output_bytes INTEGER NOT NULL,
    saved_bytes INTEGER NOT NULL,
    workspace_bytes INTEGER NOT NULL,
    parameter_bytes INTEGER NOT NULL,
    source TEXT NOT NULL,
    created_at TEXT NOT NULL,
    weight_grad_ns REAL NOT NULL DEFAULT 0,
    threads INTEGER NOT NULL DEFAULT 0,
    UNIQUE (node_id, device_kind, micro_batch, source, threads));
INSERT INTO profiles_v8(id, node_id, device_kind, micro_batch, forward_ns, backward_ns, output_bytes, saved_bytes,
    workspace_bytes, parameter_bytes, source, created_at, weight_grad_ns, threads)
    SELECT id, node_id, device_kind, micro_batch, forward_ns, backward_ns, output_bytes, saved_bytes, workspace_bytes,
        parameter_bytes, source, created_at, weight_grad_ns, 0 FROM profiles;
DROP TABLE profiles;
ALTER TABLE profiles_v8 RENAME TO profiles;
CREATE INDEX profiles_by_device ON profiles(device_kind, source, micro_batch);
)sql";

    // Version 9: what a profile measured besides its nodes, by the profile's key: the optimizer
    // step's time per parameter (0: not measured).
    constexpr std::string_view kVersion9 = R"sql(
CREATE TABLE profile_steps(
    device_kind TEXT NOT NULL,
    source TEXT NOT NULL,
    threads INTEGER NOT NULL,
    optimizer_ns_per_parameter REAL NOT NULL,
    PRIMARY KEY (device_kind, source, threads));
)sql";

} // namespace

const std::vector<Migration>& projectMigrations()
{
    static const std::vector<Migration> kMigrations = { { 1, kVersion1 }, { 2, kVersion2 }, { 3, kVersion3 },
        { 4, kVersion4 }, { 5, kVersion5 }, { 6, kVersion6 }, { 7, kVersion7 }, { 8, kVersion8 }, { 9, kVersion9 } };
    return kMigrations;
}

} // namespace ps::store
