#include "cpu/gemm_team.h"

#include "cpu/packed_gemm.h"
#include "cpu/thread_affinity.h"

#include <algorithm>
#include <cblas.h>

namespace ps::engine {
namespace {

    thread_local GemmTeam* tTeam = nullptr;

    // Below this many multiply-adds a split costs more (waking the helpers) than it saves.
    constexpr std::int64_t kSplitWork = std::int64_t { 1 } << 20;
    constexpr std::int64_t kMinRowsPerMember = 16;

    // The packed kernels where they are the engine's choice (cpu/packed_gemm.h), for products of at
    // least 4 rows and 8 columns (fewer fill too little of a 12 x 32 tile). Decided once for a whole
    // product, so that every part of a split runs the same kernels.
    bool packedFor(std::int64_t m, std::int64_t n)
    {
        return m >= 4 && n >= 8 && cpuGemmKernels() == "packed";
    }

    void plainSgemm(bool packed, bool transA, bool transB, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
        const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc)
    {
        if (packed) {
            packedSgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
            return;
        }
        cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans,
            static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b,
            static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
    }

} // namespace

GemmTeam::GemmTeam(std::vector<int> cores)
    : m_callerCore(cores.empty() ? -1 : cores.front())
{
    for (std::size_t i = 1; i < cores.size(); ++i)
        m_helpers.emplace_back([this, i, core = cores[i]] { loop(static_cast<int>(i), core); });
}

GemmTeam::~GemmTeam()
{
    {
        const std::lock_guard lock(m_mutex);
        m_stopping = true;
    }
    m_start.notify_all();
    for (auto& t : m_helpers)
        t.join();
}

void GemmTeam::run(const std::function<void(int)>& part)
{
    if (m_helpers.empty()) {
        part(0);
        return;
    }
    {
        const std::lock_guard lock(m_mutex);
        m_part = &part;
        m_pending = static_cast<int>(m_helpers.size());
        m_failure = nullptr;
        ++m_generation;
    }
    m_start.notify_all();
    std::exception_ptr mine;
    try {
        const GemmTeamScope alone(nullptr); // a GEMM inside a part runs on this thread, never re-enters
        part(0);
    } catch (...) {
        mine = std::current_exception();
    }
    std::unique_lock lock(m_mutex);
    m_done.wait(lock, [&] { return m_pending == 0; });
    m_part = nullptr;
    if (mine)
        std::rethrow_exception(mine);
    if (m_failure)
        std::rethrow_exception(m_failure);
}

void GemmTeam::loop(int member, int core)
{
    pinCurrentThread({ core });
    std::uint64_t seen = 0;
    for (;;) {
        const std::function<void(int)>* part = nullptr;
        {
            std::unique_lock lock(m_mutex);
            m_start.wait(lock, [&] { return m_stopping || m_generation != seen; });
            if (m_stopping)
                return;
            seen = m_generation;
            part = m_part;
        }
        std::exception_ptr failure;
        try {
            (*part)(member);
        } catch (...) {
            failure = std::current_exception();
        }
        {
            const std::lock_guard lock(m_mutex);
            if (failure && !m_failure)
                m_failure = failure;
            --m_pending;
        }
        m_done.notify_all();
    }
}

GemmTeamScope::GemmTeamScope(GemmTeam* team)
    : m_previous(tTeam)
{
    tTeam = team;
    if (team != nullptr && team->size() > 1 && team->callerCore() >= 0) {
        m_restore = currentThreadCores();
        pinCurrentThread({ team->callerCore() });
    }
}

GemmTeamScope::~GemmTeamScope()
{
    tTeam = m_previous;
    pinCurrentThread(m_restore); // empty: leaves it
}

void shareAcrossTeam(std::int64_t n, std::int64_t minShare, const std::function<void(std::int64_t, std::int64_t)>& part)
{
    auto* team = tTeam;
    const auto members =
        std::min<std::int64_t>(team == nullptr ? 1 : team->size(), n / std::max<std::int64_t>(1, minShare));
    if (members <= 1) {
        part(0, n);
        return;
    }
    team->run([&](int member) {
        if (member >= members)
            return;
        part(n * member / members, n * (member + 1) / members);
    });
}

void sgemm(bool transA, bool transB, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
    std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc)
{
    auto* team = tTeam;
    const int members = team == nullptr ? 1 : team->size();
    const bool packed = packedFor(m, n);
    if (members == 1 || m * n * k < kSplitWork) {
        plainSgemm(packed, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    // Rows of C when there are enough of them (op(A)'s rows go with them), else columns (op(B)'s).
    const bool byRows = m >= members * kMinRowsPerMember || m >= n;
    const auto extent = byRows ? m : n;
    team->run([&](int member) {
        const auto first = extent * member / members;
        const auto last = extent * (member + 1) / members;
        if (first == last)
            return;
        if (byRows) {
            const float* ap = transA ? a + first : a + first * lda;
            plainSgemm(packed, transA, transB, last - first, n, k, alpha, ap, lda, b, ldb, beta, c + first * ldc, ldc);
        } else {
            const float* bp = transB ? b + first * ldb : b + first;
            plainSgemm(packed, transA, transB, m, last - first, k, alpha, a, lda, bp, ldb, beta, c + first, ldc);
        }
    });
}

} // namespace ps::engine
