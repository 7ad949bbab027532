// A CPU device's GEMM team: the device's worker thread plus one helper thread per further core of
// its share, each helper pinned to its own core. While a thread has a team (GemmTeamScope), sgemm()
// splits a large product by rows (or columns) of C across the team, each part a single-threaded
// GEMM (the packed kernels of cpu/packed_gemm.h where they are the engine's choice, else OpenBLAS),
// so the device's BLAS work stays on its cores.
//
// Why not OpenBLAS's own threads: its pthread build has one pool for the process, and 0.3.21
// serializes level-3 calls that use it (gemm_driver takes a global lock), so two pipeline workers
// with several BLAS threads each would take turns instead of running side by side. With teams the
// runtime sets OpenBLAS to one thread and no call takes that lock.
// Depends on: cpu/packed_gemm.h; OpenBLAS's cblas.h.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ps::engine {

class GemmTeam
{
public:
    // `cores`: the device's cores; the caller is member 0 and runs on its own affinity, a helper
    // thread is started and pinned for each further core.
    explicit GemmTeam(std::vector<int> cores);
    ~GemmTeam();
    GemmTeam(const GemmTeam&) = delete;
    GemmTeam& operator=(const GemmTeam&) = delete;

    [[nodiscard]] int size() const
    {
        return static_cast<int>(m_helpers.size()) + 1;
    }
    // The core of member 0 (the caller).
    [[nodiscard]] int callerCore() const
    {
        return m_callerCore;
    }
    // Runs part(i) for every member i (0 on the caller) and returns when all are done; rethrows the
    // first failure. Not reentrant: one caller at a time, as one worker owns its device.
    void run(const std::function<void(int)>& part);

private:
    void loop(int member, int core);

    std::mutex m_mutex;
    std::condition_variable m_start, m_done;
    const std::function<void(int)>* m_part = nullptr;
    std::uint64_t m_generation = 0;
    int m_pending = 0;
    bool m_stopping = false;
    std::exception_ptr m_failure;
    int m_callerCore = -1;
    std::vector<std::thread> m_helpers; // last: they start once the members above exist
};

// Gives the calling thread a team for its lifetime (null: none, OpenBLAS as configured). With a
// team of several members the thread is also pinned to the team's first core for that time (member
// 0's; the helpers hold the others): left free to run on a helper's core, it was seen sharing that
// core with the helper, and a split product ran no faster than one thread. Its affinity before is
// restored at the end.
class GemmTeamScope
{
public:
    explicit GemmTeamScope(GemmTeam* team);
    ~GemmTeamScope();
    GemmTeamScope(const GemmTeamScope&) = delete;
    GemmTeamScope& operator=(const GemmTeamScope&) = delete;

private:
    GemmTeam* m_previous;
    std::vector<int> m_restore; // the affinity to restore; empty: unchanged
};

// Runs part(begin, end) over [0, n) split into contiguous shares, one per member of the calling
// thread's team (the caller takes the first), when it has one and n is at least 2 * minShare;
// else part(0, n) on the caller. For element-wise loops whose elements are independent, so the
// result does not depend on the split.
void shareAcrossTeam(
    std::int64_t n, std::int64_t minShare, const std::function<void(std::int64_t, std::int64_t)>& part);

// Elements per team member below which waking the team costs more than it saves (the element-wise
// and layout kernels' threshold).
inline constexpr std::int64_t kMinTeamShare = std::int64_t { 1 } << 15;

// Row-major C = alpha op(A) op(B) + beta C, as cblas_sgemm(CblasRowMajor, ...); on the calling
// thread's team when it has one and the product is large enough to share.
void sgemm(bool transA, bool transB, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
    std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc);

} // namespace ps::engine
