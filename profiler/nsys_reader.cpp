// Nsight Systems SQLite exports (`nsys export --type sqlite`): NVTX push/pop and start/end ranges
// (NVTX_EVENTS, names inline in `text` or in StringIds through `textId`), kernels, memcpys and
// memsets (CUPTI_ACTIVITY_KIND_*), linked to the CUDA API call that launched them through
// correlationId (CUPTI_ACTIVITY_KIND_RUNTIME, whose globalTid is the NVTX ranges' thread id).
// The schema version is EXPORT_SCHEMA_VERSION in META_DATA_EXPORT (EXPORT_META_DATA in some
// releases); 3.x (Nsight Systems 2023.2 and newer) is what this reader knows.
#include "store/project_store.h"
#include "store/sqlite.h"
#include "trace_model.h"
#include "util/error.h"

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>

namespace ps::profiler {
namespace {

    constexpr int kKnownSchemaMajor = 3;
    constexpr std::int64_t kNvtxPushPopRange = 59;
    constexpr std::int64_t kNvtxStartEndRange = 60;

    bool hasTable(sql::Database& db, const std::string& name)
    {
        sql::Statement st(db, "SELECT 1 FROM sqlite_master WHERE type IN ('table', 'view') AND name = ?1");
        st.bind(1, name);
        return st.step();
    }

    std::set<std::string> columnsOf(sql::Database& db, const std::string& table)
    {
        sql::Statement st(db, "SELECT name FROM pragma_table_info(?1)");
        st.bind(1, table);
        std::set<std::string> out;
        while (st.step())
            out.insert(st.columnText(0));
        return out;
    }

    std::string joined(const std::vector<std::string>& items)
    {
        std::string out;
        for (const auto& s : items)
            out += (out.empty() ? "" : ", ") + s;
        return out;
    }

    struct NsysLaunch
    {
        std::int64_t thread = -1;
        double atNs = 0;
    };

    class NsysReader
    {
    public:
        explicit NsysReader(const std::filesystem::path& path)
            : m_db(path, sql::Database::Mode::ReadOnly)
            , m_file("'" + path.string() + "'")
        {
        }

        TraceData read()
        {
            if (m_db.queryInt("PRAGMA application_id") == kProjectApplicationId)
                throw Error(m_file + " is a PipeStudio project, not a trace");
            m_data.format = "nsys-sqlite";
            m_data.schemaVersion = schemaVersion();
            checkTables();
            loadStrings();
            loadThreadNames();
            loadRanges();
            loadLaunches();
            loadWork("CUPTI_ACTIVITY_KIND_KERNEL", "");
            loadWork("CUPTI_ACTIVITY_KIND_MEMCPY", "memcpy");
            loadWork("CUPTI_ACTIVITY_KIND_MEMSET", "memset");
            loadGpu();
            return std::move(m_data);
        }

    private:
        std::string schemaVersion()
        {
            std::string meta;
            for (const char* t : { "META_DATA_EXPORT", "EXPORT_META_DATA" })
                meta = meta.empty() && hasTable(m_db, t) ? t : meta;
            if (meta.empty()) {
                if (!hasTable(m_db, "StringIds") && !hasTable(m_db, "NVTX_EVENTS")
                    && !hasTable(m_db, "CUPTI_ACTIVITY_KIND_KERNEL"))
                    throw Error(m_file
                        + " is an SQLite database but not an Nsight Systems export (no META_DATA_EXPORT, StringIds, "
                          "NVTX_EVENTS or CUPTI_ACTIVITY_KIND_KERNEL table)");
                throw Error(m_file
                    + ": Nsight Systems export without a schema version (no META_DATA_EXPORT or EXPORT_META_DATA "
                      "table); export the report again with Nsight Systems 2023.2 or newer");
            }
            sql::Statement st(m_db, "SELECT value FROM " + meta + " WHERE name = 'EXPORT_SCHEMA_VERSION'");
            if (!st.step())
                throw Error(m_file + ": Nsight Systems export without EXPORT_SCHEMA_VERSION in " + meta);
            const auto version = st.columnText(0);
            int major = -1;
            try {
                major = std::stoi(version);
            } catch (const std::exception&) {
                major = -1;
            }
            if (major != kKnownSchemaMajor)
                throw Error(m_file + ": Nsight Systems export schema version '" + version
                    + "' is unknown (this build reads EXPORT_SCHEMA_VERSION " + std::to_string(kKnownSchemaMajor)
                    + ".x, Nsight Systems 2023.2 and newer)");
            return version;
        }

        void checkTables()
        {
            std::vector<std::string> missing;
            for (const char* t :
                { "StringIds", "NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL" }) {
                if (!hasTable(m_db, t))
                    missing.push_back(t);
            }
            if (!missing.empty())
                throw Error(m_file + ": Nsight Systems export (schema " + m_data.schemaVersion + ") misses table(s) "
                    + joined(missing) + "; record with `nsys profile --trace=cuda,nvtx`");
            requireColumns("NVTX_EVENTS", { "start", "end", "eventType", "globalTid" });
            requireColumns("CUPTI_ACTIVITY_KIND_RUNTIME", { "start", "globalTid", "correlationId" });
            requireColumns("CUPTI_ACTIVITY_KIND_KERNEL", { "start", "end", "correlationId" });
            const auto nvtx = columnsOf(m_db, "NVTX_EVENTS");
            if (!nvtx.contains("text") && !nvtx.contains("textId"))
                throw Error(m_file + ": NVTX_EVENTS has neither a text nor a textId column");
            const auto kernel = columnsOf(m_db, "CUPTI_ACTIVITY_KIND_KERNEL");
            if (!kernel.contains("shortName") && !kernel.contains("demangledName"))
                throw Error(m_file + ": CUPTI_ACTIVITY_KIND_KERNEL has neither a shortName nor a demangledName column");
        }

        void requireColumns(const std::string& table, const std::vector<std::string>& names)
        {
            const auto have = columnsOf(m_db, table);
            std::vector<std::string> missing;
            for (const auto& n : names) {
                if (!have.contains(n))
                    missing.push_back(table + "." + n);
            }
            if (!missing.empty())
                throw Error(m_file + ": Nsight Systems export (schema " + m_data.schemaVersion + ") misses column(s) "
                    + joined(missing));
        }

        void loadStrings()
        {
            sql::Statement st(m_db, "SELECT id, value FROM StringIds");
            while (st.step())
                m_strings.emplace(st.columnInt(0), st.columnText(1));
        }

        std::string stringId(std::int64_t id) const
        {
            const auto it = m_strings.find(id);
            return it == m_strings.end() ? std::string() : it->second;
        }

        void loadThreadNames()
        {
            if (!hasTable(m_db, "ThreadNames"))
                return;
            const auto cols = columnsOf(m_db, "ThreadNames");
            if (!cols.contains("nameId") || !cols.contains("globalTid"))
                return;
            sql::Statement st(m_db, "SELECT globalTid, nameId FROM ThreadNames");
            while (st.step())
                m_data.threadNames[st.columnInt(0)] = stringId(st.columnInt(1));
        }

        void loadRanges()
        {
            const auto cols = columnsOf(m_db, "NVTX_EVENTS");
            const std::string text = cols.contains("text") ? "text" : "NULL";
            const std::string textId = cols.contains("textId") ? "textId" : "NULL";
            sql::Statement st(m_db,
                "SELECT start, end, globalTid, " + text + ", " + textId
                    + " FROM NVTX_EVENTS WHERE eventType IN (?1, ?2) AND end IS NOT NULL AND end >= start");
            st.bind(1, kNvtxPushPopRange).bind(2, kNvtxStartEndRange);
            while (st.step()) {
                auto name = st.columnIsNull(3) ? stringId(st.columnInt(4)) : st.columnText(3);
                TraceSpan span;
                span.name = std::move(name);
                span.thread = st.columnInt(2);
                span.startNs = static_cast<double>(st.columnInt(0));
                span.endNs = static_cast<double>(st.columnInt(1));
                m_data.spans.push_back(std::move(span));
            }
        }

        void loadLaunches()
        {
            sql::Statement st(m_db, "SELECT correlationId, globalTid, start FROM CUPTI_ACTIVITY_KIND_RUNTIME");
            while (st.step())
                m_launches.emplace(
                    st.columnInt(0), NsysLaunch { st.columnInt(1), static_cast<double>(st.columnInt(2)) });
        }

        // Kernels are named by shortName (readable), memcpys and memsets by `fixedName`.
        void loadWork(const std::string& table, const std::string& fixedName)
        {
            if (!hasTable(m_db, table))
                return;
            const auto cols = columnsOf(m_db, table);
            if (!cols.contains("start") || !cols.contains("end") || !cols.contains("correlationId"))
                return;
            const std::string name = !fixedName.empty() ? (cols.contains("copyKind") ? "copyKind" : "NULL")
                : cols.contains("shortName")            ? "shortName"
                                                        : "demangledName";
            const std::string device = cols.contains("deviceId") ? "deviceId" : "-1";
            sql::Statement st(m_db, "SELECT start, end, correlationId, " + name + ", " + device + " FROM " + table);
            while (st.step()) {
                const auto it = m_launches.find(st.columnInt(2));
                const NsysLaunch at = it == m_launches.end() ? NsysLaunch {} : it->second;
                const double ns = static_cast<double>(st.columnInt(1) - st.columnInt(0));
                m_data.work.push_back(
                    { fixedName.empty() ? stringId(st.columnInt(3)) : copyName(fixedName, st.columnInt(3)), ns,
                        at.thread, at.atNs, static_cast<double>(st.columnInt(0)) });
                m_busy[st.columnInt(4)] += ns;
            }
        }

        // A memcpy named by its CUPTI copy kind, as CUPTI's records name it ("memcpy HtoD").
        static std::string copyName(const std::string& fixedName, std::int64_t kind)
        {
            if (fixedName != "memcpy")
                return fixedName;
            switch (kind) {
            case 1:
                return "memcpy HtoD";
            case 2:
                return "memcpy DtoH";
            case 8:
                return "memcpy DtoD";
            case 10:
                return "memcpy PtoP";
            default:
                return fixedName;
            }
        }

        // The GPU (TARGET_INFO_GPU) that ran most of the work's time: its name and memory.
        void loadGpu()
        {
            if (m_busy.empty() || !hasTable(m_db, "TARGET_INFO_GPU"))
                return;
            const auto cols = columnsOf(m_db, "TARGET_INFO_GPU");
            if (!cols.contains("name") || !cols.contains("totalMemory") || !cols.contains("id"))
                return;
            const auto most = std::max_element(
                m_busy.begin(), m_busy.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
            sql::Statement st(m_db, "SELECT id, name, totalMemory FROM TARGET_INFO_GPU");
            // The kernels' deviceId against TARGET_INFO_GPU's id (the same where CUDA_VISIBLE_DEVICES does
            // not renumber the GPUs); no row of that id: no GPU named.
            while (st.step()) {
                if (st.columnInt(0) == most->first)
                    m_data.gpu = { st.columnText(1), st.columnInt(2) };
            }
        }

        sql::Database m_db;
        std::string m_file;
        TraceData m_data;
        std::unordered_map<std::int64_t, std::string> m_strings;
        std::unordered_map<std::int64_t, NsysLaunch> m_launches;
        std::map<std::int64_t, double> m_busy; // work time by device id
    };

} // namespace

TraceData readNsysSqlite(const std::filesystem::path& path)
{
    return NsysReader(path).read();
}

} // namespace ps::profiler
