// A hand-built Nsight Systems SQLite export (`nsys export --type sqlite`), with the tables and
// columns its schema reference documents: two threads (main, PyTorch's autograd), NVTX ranges named
// after the tiny MLP's nodes (tiny_mlp.h), kernels and a host-to-device memcpy launched through
// runtime calls, one kernel without its launch, and two GPUs (the work ran on id 0). Used by the
// trace import tests and as a seed of the trace import fuzzer.
#pragma once

#include "store/sqlite.h"

#include <filesystem>
#include <string>

namespace ps::test {

// Writes the export to `path` with EXPORT_SCHEMA_VERSION `version`.
inline void createNsysExport(const std::filesystem::path& path, const std::string& version)
{
    sql::Database db(path, sql::Database::Mode::Create);
    db.exec(R"(
CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT);
CREATE TABLE ThreadNames (nameId INTEGER NOT NULL, priority INTEGER, globalTid INTEGER);
CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER,
  category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER,
  domainId INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER,
  globalTid INTEGER, correlationId INTEGER, nameId INTEGER, returnValue INTEGER, callchainId INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER,
  contextId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER, demangledName INTEGER,
  shortName INTEGER, mangledName INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER,
  contextId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER, bytes INTEGER, copyKind INTEGER);
INSERT INTO StringIds VALUES (1, 'layers.1'), (2, 'pt_autograd_0'), (3, 'main'), (4, 'ampere_sgemm'),
  (5, 'void ampere_sgemm<float>(...)'), (6, 'cudaLaunchKernel'), (7, 'elementwise_kernel');
INSERT INTO ThreadNames VALUES (3, 0, 16777217), (2, 0, 16777218);
-- push/pop ranges (59), text inline or through StringIds; a mark (34) is not a range
INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, textId) VALUES
  (1000, 2000, 59, 'layers.0.linear.matmul', 16777217, NULL),
  (3000, 5000, 59, NULL, 16777217, 1),
  (4000, 4500, 59, 'layers.1.relu', 16777217, NULL),
  (6000, 7000, 60, 'head.matmul', 16777218, NULL),
  (100, NULL, 34, 'layers.0', 16777217, NULL);
INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, globalTid, correlationId, nameId) VALUES
  (1100, 1110, 16777217, 1, 6), (3100, 3110, 16777217, 2, 6), (4100, 4110, 16777217, 3, 6),
  (6100, 6110, 16777218, 4, 6), (8000, 8010, 16777217, 5, 6);
INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, streamId, correlationId, demangledName, shortName) VALUES
  (1200, 1300, 0, 7, 1, 5, 4), (3200, 3500, 0, 7, 2, 5, 4), (4200, 4250, 0, 7, 3, 7, 7),
  (6200, 6270, 0, 7, 4, 5, 4), (9000, 9040, 0, 7, 99, 7, 7);
INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (start, end, deviceId, streamId, correlationId, bytes, copyKind) VALUES
  (8100, 8300, 0, 7, 5, 4096, 1);
CREATE TABLE TARGET_INFO_GPU (vmId INTEGER, id INTEGER, name TEXT, busLocation TEXT, totalMemory INTEGER,
  smCount INTEGER);
INSERT INTO TARGET_INFO_GPU VALUES (0, 1, 'NVIDIA A100-SXM4-40GB', '0000:07:00.0', 42505273344, 108),
  (0, 0, 'NVIDIA H100 80GB HBM3', '0000:01:00.0', 85520809984, 132);
)");
    sql::Statement meta(db, "INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_SCHEMA_VERSION', ?1)");
    meta.bind(1, version).execute();
}

} // namespace ps::test
